"""The clients' kept states in a checkpoint, as files shared between checkpoints (ours).

A snapshot names each client's kept state by a file on the fed server's node
(:class:`raysfl.own_states.OwnManifest`). A checkpoint keeps those files in
``checkpoints/own/`` and, in its ``round_NNNN.pt``, only their names; the names are also
listed in ``checkpoints/own/round_NNNN.json`` so that pruning knows which files a kept
checkpoint still needs. A file is never changed once written and its name is never reused,
so a checkpoint adds only the states that changed since the one before: written from the
snapshot where it holds them by value (in the fed server's memory) or by reference (the client
actors' results, fetched), otherwise on one machine
a hard link (or a copy where the fed server's directory is on another file system), from
another node the bytes the fed server sends. Read back (:func:`resolve`), a checkpoint holds
the states themselves again, as before kept states had files.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from raysfl.own_states import OwnManifest, read_state, write_state
from raysfl.errors import ConfigError, first_line
from raysfl.whole_files import replacing, write_bytes, write_text

OWN = "own"            # the directory under checkpoints/
MARK = "__own_files__"  # {MARK: {client: file name}} stands for the states in a checkpoint


def own_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / OWN


def for_checkpoint(run_dir: Path, rnd: int, federation: dict, fed_actor=None) -> dict:
    """``federation`` (a snapshot's values) with the fed server's kept states as file names,
    the files in ``checkpoints/own/`` (only those not there yet are added)."""
    fed = federation.get("fed") or {}
    own = fed.get("own")
    if not isinstance(own, OwnManifest):
        return federation
    own = own.by_value()  # states named by reference: fetched, to be written below
    d = own_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    remote = []
    for c, name in own.files.items():
        dst = d / name
        if dst.exists():
            continue
        if c in own.inline:  # in the fed server's memory, never written: written here
            write_state(str(dst), own.inline[c])
            continue
        src = os.path.join(own.directory, name) if own.directory else None
        if src and os.path.isfile(src):
            with replacing(dst, tmp=d / f".{name}.tmp") as tmp:
                try:
                    os.link(src, tmp)
                except OSError:  # another file system
                    shutil.copyfile(src, tmp)
        else:
            remote.append(name)
    if remote:  # the fed server's node is another one: it sends the bytes
        import ray

        if fed_actor is None:
            raise RuntimeError(f"{len(remote)} kept-state files are on another node and no fed server to ask")
        for name, data in ray.get(fed_actor.own_files.remote(own.directory, remote)).items():
            write_bytes(d / name, data, tmp=d / f".{name}.tmp")
    names = {int(c): n for c, n in own.files.items()}
    write_text(d / f"round_{rnd:04d}.json", json.dumps(sorted(set(names.values()))))
    return {**federation, "fed": {**fed, "own": {MARK: names}}}


def resolve(run_dir: Path, state: dict, path: Path) -> dict:
    """A checkpoint read back (``path``): the kept states it names read into it."""
    fed = (state.get("federation") or {}).get("fed") or {}
    own = fed.get("own")
    if not (isinstance(own, dict) and set(own) == {MARK}):
        return state
    d = own_dir(run_dir)
    states = {}
    for c, name in own[MARK].items():
        f = d / name
        if not f.is_file():
            raise ConfigError(f"checkpoint {path} names client {c}'s kept state {f}, which is missing; move "
                              f"{path.name} out of {path.parent} to resume from the checkpoint before it")
        try:
            states[int(c)] = read_state(str(f))
        except (OSError, ValueError, zipfile.BadZipFile) as e:  # the zip's CRC-32 finds a changed byte
            raise ConfigError(f"checkpoint {path} names client {c}'s kept state {f}, which is damaged "
                              f"({first_line(e, 120)}); move {path.name} out of {path.parent} to resume from "
                              f"the checkpoint before it") from None
    fed["own"] = states
    return state


def files_of(run_dir: Path, rnd: int) -> list[Path]:
    """The files round ``rnd``'s checkpoint needs besides its own: its list and the states it
    names ([] where it names none)."""
    d = own_dir(run_dir)
    listing = d / f"round_{rnd:04d}.json"
    if not listing.is_file():
        return []
    return [listing] + [d / n for n in json.loads(listing.read_text())]


def states_in_checkpoints(run_dir: Path, manifest: OwnManifest) -> dict | None:
    """The states ``manifest`` names, read from ``checkpoints/own/`` (None where one is not
    there): a fed server restarted on another node than its files goes on from them."""
    d = own_dir(run_dir)
    manifest = manifest.by_value()
    if not all(c in manifest.inline or (d / n).is_file() for c, n in manifest.files.items()):
        return None
    return {c: manifest.inline[c] if c in manifest.inline else read_state(str(d / n))
            for c, n in manifest.files.items()}


def prune(run_dir: Path, rounds_kept: list[int]) -> None:
    """Delete the lists of checkpoints no longer kept, and the files no kept list names."""
    d = own_dir(run_dir)
    if not d.is_dir():
        return
    keep = {f"round_{r:04d}.json" for r in rounds_kept}
    needed: set[str] = set()
    for f in d.glob("round_*.json"):
        if f.name not in keep:
            f.unlink(missing_ok=True)
            continue
        try:
            needed.update(json.loads(f.read_text()))
        except (OSError, ValueError):
            return  # a list that cannot be read: delete nothing
    for f in d.iterdir():
        if f.suffix == ".npz" and f.name not in needed:
            f.unlink(missing_ok=True)
