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

A snapshot (:meth:`OwnStates.manifest`) writes the states changed since the last one and
returns an :class:`OwnManifest`: the directory and, per client, its file's name. That is a
few bytes per client, not its state. The files a manifest names are kept until the next
manifest (the round before may be rolled back to); loading a manifest
(:meth:`OwnStates.load`, a round retried or the fed server restarted on the same node) deletes
every other file of the directory, the states of the round given up. A checkpoint links or
copies the manifest's files into the run directory (:mod:`raysfl.runtime.own_files`).
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

MIB = 2**20


class OwnStatesMissing(RuntimeError):
    """Files a manifest names are not on this node (the fed server came back on another one)."""


@dataclass
class OwnManifest:
    """Where every client's kept state is: ``files[client]``, a file name in ``directory`` (on
    the node of the fed server that wrote it)."""

    directory: str | None
    files: dict[int, str] = field(default_factory=dict)


def state_bytes(state: dict) -> int:
    return int(sum(np.asarray(v).nbytes for v in state.values()))


def read_state(path: str) -> dict[str, np.ndarray]:
    """One client's state from its file (NumPy arrays; nothing is unpickled)."""
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def write_state(path: str, state: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in state.items()})


class OwnStates(MutableMapping):
    """client -> state, in memory up to ``budget_bytes`` (least recently used first out),
    on disk beyond it (module docstring). Iterates in insertion order, as a dict does."""

    def __init__(self, budget_bytes: int = 256 * MIB, directory: str | None = None):
        self.budget = int(budget_bytes)
        self.directory = directory  # created on the first write
        self._keys: dict[int, None] = {}          # every client, in insertion order
        self._mem: OrderedDict[int, dict] = OrderedDict()  # states in memory, least recent first
        self._mem_bytes = 0
        self._file: dict[int, str] = {}           # client -> the file holding its current state
        self._dirty: set[int] = set()             # clients whose current state is in no file yet
        self._pinned: set[str] = set()            # files the last manifest names

    # ----------------------------------------------------------------- the mapping
    def __getitem__(self, client: int) -> dict:
        if client in self._mem:
            self._mem.move_to_end(client)
            return self._mem[client]
        name = self._file[client]  # KeyError for a client without a state
        state = read_state(os.path.join(self.directory, name))
        self._cache(client, state)
        return state

    def __setitem__(self, client: int, state: dict) -> None:
        self._forget(client)
        self._keys.setdefault(client, None)
        self._dirty.add(client)
        self._cache(client, state)

    def __delitem__(self, client: int) -> None:
        if client not in self._keys:
            raise KeyError(client)
        self._forget(client)
        del self._keys[client]

    def __contains__(self, client) -> bool:
        return client in self._keys

    def __iter__(self):
        return iter(list(self._keys))

    def __len__(self) -> int:
        return len(self._keys)

    # ----------------------------------------------------------------- snapshots
    def manifest(self) -> OwnManifest:
        """Write the states changed since the last manifest; their files, and every other
        client's, named. Files only the manifest before named are deleted."""
        for c in list(self._dirty):
            self._write(c)
        names = {c: self._file[c] for c in self._keys}
        now = set(names.values())
        for name in self._pinned - now:
            self._unlink(name)
        self._pinned = now
        return OwnManifest(self.directory, names)

    def load(self, source: OwnManifest | dict) -> None:
        """Become ``source``: a manifest (a round rolled back, a restarted fed server: every
        other file of its directory is deleted) or plain {client: state} (a checkpoint read
        back, a state built by hand)."""
        self._mem.clear()
        self._mem_bytes = 0
        self._dirty.clear()
        if isinstance(source, OwnManifest):
            if source.directory is not None:
                missing = [n for n in source.files.values()
                           if not os.path.isfile(os.path.join(source.directory, n))]
                if missing:
                    raise OwnStatesMissing(f"{len(missing)} of {len(source.files)} clients' kept states are not in "
                                           f"{source.directory} on this node (first: {missing[0]})")
                self.directory = source.directory
            self._keys = dict.fromkeys(source.files)
            self._file = dict(source.files)
            self._pinned = set(self._file.values())
            self._sweep()
            return
        self._keys, self._file, self._pinned = {}, {}, set()
        self._sweep()
        for c, state in source.items():
            self[c] = state

    def close(self) -> None:
        """Delete the directory (the run is over)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
        self._keys, self._file, self._pinned, self._dirty = {}, {}, set(), set()
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
            if old in self._dirty:
                self._write(old)
            self._mem_bytes -= state_bytes(self._mem.pop(old))

    def _forget(self, client: int) -> None:
        """Drop ``client``'s current state from memory and, unless a manifest names it, disk."""
        if client in self._mem:
            self._mem_bytes -= state_bytes(self._mem.pop(client))
        name = self._file.pop(client, None)
        if name is not None and name not in self._pinned:
            self._unlink(name)
        self._dirty.discard(client)

    def _write(self, client: int) -> None:
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="raysfl-own-")
        name = f"c{client}-{uuid.uuid4().hex[:16]}.npz"
        write_state(os.path.join(self.directory, name), self._mem[client])
        self._file[client] = name
        self._dirty.discard(client)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.directory, name))
        except FileNotFoundError:
            pass

    def _sweep(self) -> None:
        """Delete the directory's files no client's state is in (a round given up)."""
        if self.directory is None or not os.path.isdir(self.directory):
            return
        keep = set(self._file.values())
        for name in os.listdir(self.directory):
            if name not in keep:
                self._unlink(name)
