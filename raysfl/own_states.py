"""The state each client keeps between rounds, held in memory up to a budget and on disk
beyond it (ours; issue 44: memory grows with the clients in a round, not the population).

PSL, EPSL and GAPSL keep every client's own client-side model on the fed server between
rounds (about 210 KB each on the digits CNN); FLEX-SFL keeps client submodels, SuperSFL and
BESplit small modules. With 10,000 clients that is gigabytes, and it used to be copied whole
into Ray's object store for every round's snapshot and into every checkpoint.

:class:`OwnStates` is the aggregator's ``own`` mapping (client -> {key: array}). The states
used most recently stay in memory, up to ``--own-state-memory-mb`` (256 MiB by default);
older ones are written to files in a directory of the fed server's node and read back on
demand. Each file holds one client's state as one ``.npz`` (no pickle), under a name never
used twice, and is never changed: a client's new state is a new file.

A snapshot (:meth:`OwnStates.manifest`) returns an :class:`OwnManifest`: every client's
state by name (a few bytes each), and the states changed since the last snapshot also by
value, copied into the object store as a snapshot always was -- so a run whose clients all
train every round writes no file. Where a state in memory is the very one a client actor's update brought
(:meth:`OwnStates.came_from`; ``--snapshot-refs``, on one node by default), the manifest names
it by that object -- the client actor's results, owned by the driver and already in the object
store -- instead of copying it there again (issue 44: a snapshot by reference; 21 MB a round
for PSL at 100 clients). A state carried by value (or by reference) once and
not changed by the next snapshot is written to its file then, so none is copied twice. The
files a manifest names are kept until the next manifest (the round before may be rolled
back to); loading a manifest
(:meth:`OwnStates.load`, a round retried or the fed server restarted) deletes every other
file of the directory, the states of the round given up. A checkpoint adds to the run
directory the states it has no file of yet, under their names (:mod:`raysfl.own_state_files`),
so each state is written there once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections import OrderedDict
from collections.abc import MutableMapping
from dataclasses import dataclass, field

import numpy as np

from raysfl.whole_files import replacing

MIB = 2**20
PREFIX = "raysfl-own-"  # + the writing process's id: a directory in the temp dir of the fed server's node


def remove_orphans(where: str | None = None) -> list[str]:
    """Delete the kept-state directories in ``where`` (the temp dir) whose fed server process
    is gone without closing them (its driver killed with SIGKILL: nothing ran its teardown),
    so that they do not pile up on a node; returns their paths. A directory of a process that
    is alive, of another user's, or without a process id in its name is left alone."""
    import re

    where = where or tempfile.gettempdir()
    gone = []
    for name in os.listdir(where):
        m = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-\w+", name)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(where, name), ignore_errors=True)
            gone.append(os.path.join(where, name))
        except (PermissionError, OverflowError):
            pass
    return gone


class OwnStatesMissing(RuntimeError):
    """Files a manifest names are not on this node (the fed server came back on another one)."""


@dataclass
class OwnManifest:
    """Every client's kept state: ``files[client]``, its name, a file in ``directory`` (on the
    node of the fed server that wrote it) unless the state is in ``inline``, by value (it is
    in the fed server's memory and was never written) or in ``refs``, by reference: (an ObjectRef
    of a client actor's list of updates, the index of the client's update in it); :meth:`by_value`
    fetches those."""

    directory: str | None
    files: dict[int, str] = field(default_factory=dict)
    inline: dict[int, dict] = field(default_factory=dict)
    refs: dict[int, tuple] = field(default_factory=dict)

    def by_value(self) -> OwnManifest:
        """This manifest with the states it names by reference fetched into ``inline`` (one fetch
        per object; Ray keeps an object alive while a manifest names it)."""
        if not self.refs:
            return self
        import ray

        objects = list({r: None for r, _ in self.refs.values()})
        lists = dict(zip(objects, ray.get(objects)))
        inline = {**self.inline, **{c: lists[r][j].state for c, (r, j) in self.refs.items()}}
        return OwnManifest(self.directory, dict(self.files), inline)


def state_bytes(state: dict) -> int:
    return int(sum(np.asarray(v).nbytes for v in state.values()))


def read_state(path: str) -> dict[str, np.ndarray]:
    """One client's state from its file (NumPy arrays; nothing is unpickled)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write_state(path: str, state: dict) -> None:
    """Write to a temporary name, then rename: a file under a state's name is whole."""
    with replacing(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in state.items()})


class OwnStates(MutableMapping):
    """client -> state, in memory up to ``budget_bytes`` (least recently used first out),
    on disk beyond it (module docstring). Iterates in insertion order, as a dict does."""

    def __init__(self, budget_bytes: int = 256 * MIB, directory: str | None = None):
        self.budget = int(budget_bytes)
        self.directory = directory  # created on the first write
        self._name: dict[int, str] = {}           # every client -> its state's name, in insertion order
        self._mem: OrderedDict[int, dict] = OrderedDict()  # states in memory, least recent first
        self._mem_bytes = 0
        self._on_disk: set[int] = set()           # clients whose state's file is written
        self._pinned: set[str] = set()            # files the last manifest names
        self._inlined: dict[int, str] = {}        # states the last manifest carried by value or reference
        self._token: dict[int, str] = {}          # states their client actor keeps too, by its name for them
        self._from: dict[int, tuple] = {}         # states in memory as a client actor's update brought them: (ref, index)

    # ----------------------------------------------------------------- the mapping
    def __getitem__(self, client: int) -> dict:
        if client in self._mem:
            self._mem.move_to_end(client)
            return self._mem[client]
        name = self._name[client]  # KeyError for a client without a state
        state = read_state(os.path.join(self.directory, name))
        self._cache(client, state)
        return state

    def __setitem__(self, client: int, state: dict) -> None:
        self._forget(client)
        self._token.pop(client, None)
        self._from.pop(client, None)
        self._name[client] = f"c{client}-{uuid.uuid4().hex[:16]}.npz"
        self._cache(client, state)

    def __delitem__(self, client: int) -> None:
        if client not in self._name:
            raise KeyError(client)
        self._forget(client)
        self._token.pop(client, None)
        self._from.pop(client, None)
        del self._name[client]

    def __contains__(self, client) -> bool:
        return client in self._name

    def __iter__(self):
        return iter(list(self._name))

    def __len__(self) -> int:
        return len(self._name)

    # ----------------------------------------------------------------- resident states
    def tag(self, client: int, state: dict, token: str) -> None:
        """Note that ``client``'s client actor keeps ``state`` under ``token``, if ``state`` is the
        object stored for it (raysfl.runtime.resident); replacing, deleting or loading states
        forgets it."""
        if self._mem.get(client) is state:
            self._token[client] = token

    def token(self, client: int, state: dict) -> str | None:
        """The name ``client``'s client actor keeps ``state`` under, if ``state`` is the object
        stored for it (not a copy of it, nor a state built from it) and was tagged."""
        return self._token.get(client) if self._mem.get(client) is state else None

    def came_from(self, client: int, state: dict, where: tuple) -> None:
        """Note that ``state`` is the object a client actor's update brought (``where``: the ObjectRef
        of that actor's list of updates, the update's index in it), if it is the object stored for
        ``client``: a manifest then names it by reference (module docstring). Replacing, deleting,
        writing or loading states forgets it."""
        if self._mem.get(client) is state:
            self._from[client] = where

    # ----------------------------------------------------------------- snapshots
    def manifest(self) -> OwnManifest:
        """Every client's state by name; those changed since the last manifest and in memory
        also by value (a copy into the object store: a round's changes), or by reference where a
        client actor's update brought them (:meth:`came_from`). A state the last manifest carried
        by value or reference and that has not changed since is written now, so that no state is
        copied twice nor keeps a round's objects alive. Files only the manifest before named are
        deleted."""
        for c, name in self._inlined.items():
            if self._name.get(c) == name and c not in self._on_disk and c in self._mem:
                self._write(c)
        names = dict(self._name)
        now = {names[c] for c in self._on_disk}
        for name in self._pinned - now:
            self._unlink(name)
        self._pinned = now
        carried = [c for c in names if c not in self._on_disk]
        self._inlined = {c: names[c] for c in carried}
        refs = {c: self._from[c] for c in carried if c in self._from}
        return OwnManifest(self.directory, names, {c: self._mem[c] for c in carried if c not in refs}, refs)

    def load(self, source: OwnManifest | dict) -> None:
        """Become ``source``: a manifest (a round rolled back, a restarted fed server: every
        other file of its directory is deleted) or plain {client: state} (a checkpoint read
        back, a state built by hand)."""
        self._mem.clear()
        self._mem_bytes = 0
        self._token = {}  # a state rolled back to may not be what the client actors keep
        self._from = {}
        if isinstance(source, OwnManifest):
            source = source.by_value()  # states named by reference: fetched (then written at the next manifest)
            stored = {c: n for c, n in source.files.items() if c not in source.inline}
            if stored:
                missing = [n for n in stored.values()
                           if source.directory is None or not os.path.isfile(os.path.join(source.directory, n))]
                if missing:
                    raise OwnStatesMissing(f"{len(missing)} of {len(source.files)} clients' kept states are not in "
                                           f"{source.directory} on this node (first: {missing[0]})")
            if source.directory is not None:
                self.directory = source.directory
            self._name = dict(source.files)
            self._on_disk = set(stored)
            self._pinned = set(stored.values())
            self._sweep()
            for c, state in source.inline.items():
                self._cache(c, state)
            self._inlined = {c: source.files[c] for c in source.inline}
            return
        self._name, self._on_disk, self._pinned, self._inlined = {}, set(), set(), {}
        self._sweep()
        for c, state in source.items():
            self[c] = state

    def close(self) -> None:
        """Delete the directory (the run is over)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self._name, self._on_disk, self._pinned, self._token, self._from = {}, set(), set(), {}, {}
        self._mem.clear()
        self._mem_bytes = 0

    @property
    def memory_bytes(self) -> int:
        """Bytes of the states held in memory now."""
        return self._mem_bytes

    # ----------------------------------------------------------------- inside
    def _cache(self, client: int, state: dict) -> None:
        self._mem[client] = state
        self._mem.move_to_end(client)
        self._mem_bytes += state_bytes(state)
        while self._mem_bytes > self.budget and len(self._mem) > 1:
            old = next(iter(self._mem))
            if old not in self._on_disk:
                self._write(old)
            self._mem_bytes -= state_bytes(self._mem.pop(old))

    def _forget(self, client: int) -> None:
        """Drop ``client``'s current state from memory and, unless a manifest names it, disk."""
        if client in self._mem:
            self._mem_bytes -= state_bytes(self._mem.pop(client))
        if client in self._on_disk:
            self._on_disk.discard(client)
            if self._name[client] not in self._pinned:
                self._unlink(self._name[client])

    def _write(self, client: int) -> None:
        if self.directory is None:
            remove_orphans()
            self.directory = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")
        elif not os.path.isdir(self.directory):
            os.makedirs(self.directory, exist_ok=True)
        write_state(os.path.join(self.directory, self._name[client]), self._mem[client])
        self._on_disk.add(client)
        self._from.pop(client, None)  # named by its file now: the round's object may go

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.directory, name))
        except (FileNotFoundError, TypeError):
            pass

    def _sweep(self) -> None:
        """Delete the directory's files no client's state is in (a round given up)."""
        if self.directory is None or not os.path.isdir(self.directory):
            return
        keep = set(self._pinned)
        for name in os.listdir(self.directory):
            if name not in keep:
                self._unlink(name)
