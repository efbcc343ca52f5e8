"""The clients' kept states: in memory up to a budget, in files beyond it; snapshots name the
files, checkpoints share them (raysfl.algorithms.roles.own_states, raysfl.runtime.own_files)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from raysfl.algorithms.roles.own_states import OwnManifest, OwnStates, OwnStatesMissing, state_bytes
from raysfl.runtime import own_files


def state(c: int, v: float = 0.0) -> dict:
    return {"blocks.0.weight": np.full((64, 64), c + v, dtype=np.float32), "blocks.0.bias": np.arange(4.0) + c}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def files(store: OwnStates) -> set[str]:
    return set(os.listdir(store.directory)) if store.directory else set()


def test_states_past_the_budget_wait_on_disk_and_come_back_equal(tmp_path):
    one = state_bytes(state(0))
    store = OwnStates(budget_bytes=3 * one, directory=str(tmp_path))
    for c in range(10):
        store[c] = state(c)
    assert store.memory_bytes <= 3 * one       # memory: the budget, not the population
    assert len(files(store)) == 7              # the seven least recent were written
    assert list(store) == list(range(10)) and len(store) == 10
    for c in range(10):
        assert same(store[c], state(c))
    assert store.memory_bytes <= 3 * one and len(files(store)) == 10  # read back: every one has a file now
    store[2] = state(2, 0.5)                    # a new state: the old file goes (no manifest names it)
    assert same(store[2], state(2, 0.5)) and len(files(store)) == 9
    del store[5]
    assert 5 not in store and len(store) == 9
    with pytest.raises(KeyError):
        store[5]


def test_a_manifest_is_the_round_to_go_back_to(tmp_path):
    store = OwnStates(budget_bytes=0, directory=str(tmp_path))  # everything on disk
    for c in range(4):
        store[c] = state(c)
    m = store.manifest()
    assert set(m.files) == {0, 1, 2, 3} and files(store) == set(m.files.values())
    store[1] = state(1, 9.0)                    # the next round changes client 1 and adds client 7 ...
    store[7] = state(7)
    assert m.files[1] in files(store)           # ... the manifest's file of client 1 is kept
    store.load(m)                               # ... and the round is given up
    assert list(store) == [0, 1, 2, 3] and same(store[1], state(1))
    assert files(store) == set(m.files.values())  # the given-up round's files are gone
    store[1] = state(1, 2.0)
    m2 = store.manifest()
    assert m.files[1] not in files(store) and files(store) == set(m2.files.values())


def test_a_restarted_fed_server_reads_the_manifest_back_or_says_the_files_are_elsewhere(tmp_path):
    store = OwnStates(budget_bytes=10**9, directory=str(tmp_path / "a"))
    os.makedirs(store.directory)
    store[3] = state(3)
    m = store.manifest()                        # a manifest writes what memory held
    fresh = OwnStates()
    fresh.load(m)
    assert same(fresh[3], state(3))
    with pytest.raises(OwnStatesMissing, match="1 of 1 clients' kept states are not in"):
        OwnStates().load(OwnManifest(str(tmp_path / "elsewhere"), {3: "c3-x.npz"}))
    plain = OwnStates(budget_bytes=0)
    plain.load({5: state(5), 6: state(6)})      # a checkpoint read back
    assert same(plain[5], state(5)) and same(plain[6], state(6)) and plain.directory is not None
    plain.close()
    assert not os.path.exists(plain.directory)


def test_checkpoints_share_the_files_and_pruning_keeps_what_a_kept_one_names(tmp_path):
    run = tmp_path / "run"
    store = OwnStates(budget_bytes=0, directory=str(tmp_path / "fed"))
    os.makedirs(store.directory)
    names = {}
    for rnd in (1, 2, 3):
        store[rnd] = state(rnd)                 # one more client each round, client 1 retrained
        store[1] = state(1, rnd)
        fed = own_files.for_checkpoint(run, rnd, {"fed": {"own": store.manifest(), "global": {}}, "servers": []})
        names[rnd] = fed["fed"]["own"][own_files.MARK]
    d = own_files.own_dir(run)
    npz = {f.name for f in d.glob("*.npz")}
    assert npz == set().union(*(set(n.values()) for n in names.values()))  # each file once, shared
    own_files.prune(run, [2, 3])
    left = {f.name for f in d.glob("*.npz")}
    assert left == set(names[2].values()) | set(names[3].values())
    assert names[1][1] not in left              # only round 1's checkpoint named it
    back = own_files.resolve(run, {"federation": {"fed": {"own": {own_files.MARK: names[3]}}}}, d / "x.pt")
    own = back["federation"]["fed"]["own"]
    assert same(own[1], state(1, 3)) and same(own[3], state(3))
    (d / names[3][2]).unlink()
    with pytest.raises(Exception, match="kept state .* which is missing"):
        own_files.resolve(run, {"federation": {"fed": {"own": {own_files.MARK: names[3]}}}}, d / "x.pt")
