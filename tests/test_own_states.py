"""The clients' kept states: in memory up to a budget, in files beyond it; snapshots name the
files, checkpoints share them (raysfl.own_states, raysfl.own_state_files)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from raysfl.own_states import OwnManifest, OwnStates, OwnStatesMissing, state_bytes
from raysfl import own_state_files
from raysfl.errors import ConfigError


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
    store = OwnStates(budget_bytes=0, directory=str(tmp_path))  # all but the last on disk
    for c in range(4):
        store[c] = state(c)
    m = store.manifest()
    assert set(m.files) == {0, 1, 2, 3} and set(m.inline) == {3}  # the one in memory, by value
    assert files(store) == {m.files[c] for c in (0, 1, 2)}
    store[1] = state(1, 9.0)                    # the next round changes client 1 and adds client 7 ...
    store[7] = state(7)
    assert m.files[1] in files(store)           # ... the manifest's file of client 1 is kept
    store.load(m)                               # ... and the round is given up
    assert list(store) == [0, 1, 2, 3] and same(store[1], state(1)) and same(store[3], state(3))
    assert files(store) <= set(m.files.values())  # the given-up round's files are gone
    store[1] = state(1, 2.0)
    store[0] = state(0, 2.0)
    m2 = store.manifest()
    assert m.files[1] not in files(store) and m.files[0] not in files(store)
    assert files(store) == {m2.files[c] for c in m2.files if c not in m2.inline}


def test_a_snapshot_copies_a_round_s_changes_once(tmp_path):
    store = OwnStates(budget_bytes=10**9, directory=str(tmp_path / "a"))
    for c in range(5):
        store[c] = state(c)
    m = store.manifest()                        # every client changed: by value, nothing written
    assert not os.path.exists(store.directory) and set(m.inline) == set(range(5))
    for c in range(5):
        store[c] = state(c, 1.0)                # all train again (PSL at full participation) ...
    m = store.manifest()
    assert not os.path.exists(store.directory) and set(m.inline) == set(range(5))  # ... still no file
    store[0] = state(0, 2.0)                    # only client 0 trains: the others were copied
    m = store.manifest()                        # once and are written now
    assert set(m.inline) == {0} and files(store) == {m.files[c] for c in range(1, 5)}


def test_a_restarted_fed_server_reads_the_manifest_back_or_says_the_files_are_elsewhere(tmp_path):
    store = OwnStates(budget_bytes=0, directory=str(tmp_path / "a"))
    os.makedirs(store.directory)
    store[3] = state(3)
    store[4] = state(4)                         # client 3 goes to disk
    m = store.manifest()
    fresh = OwnStates()                         # a new process of the same node
    fresh.load(m)
    assert same(fresh[3], state(3)) and same(fresh[4], state(4))
    with pytest.raises(OwnStatesMissing, match="1 of 1 clients' kept states are not in"):
        OwnStates().load(OwnManifest(str(tmp_path / "elsewhere"), {3: "c3-x.npz"}))
    plain = OwnStates(budget_bytes=0)
    plain.load({5: state(5), 6: state(6)})      # a checkpoint read back
    assert same(plain[5], state(5)) and same(plain[6], state(6)) and plain.directory is not None
    plain.close()
    assert not os.path.exists(plain.directory)


def test_checkpoints_share_the_files_and_pruning_keeps_what_a_kept_one_names(tmp_path):
    run = tmp_path / "run"
    store = OwnStates(budget_bytes=2 * state_bytes(state(0)), directory=str(tmp_path / "fed"))
    os.makedirs(store.directory)
    names = {}
    for rnd in (1, 2, 3, 4):
        store[rnd] = state(rnd)                 # one more client each round, client 1 retrained
        store[1] = state(1, rnd)
        fed = own_state_files.for_checkpoint(run, rnd, {"fed": {"own": store.manifest(), "global": {}}, "servers": []})
        names[rnd] = fed["fed"]["own"][own_state_files.MARK]
    d = own_state_files.own_dir(run)
    npz = {f.name for f in d.glob("*.npz")}
    assert npz == set().union(*(set(n.values()) for n in names.values()))  # each state once, shared
    own_state_files.prune(run, [3, 4])
    left = {f.name for f in d.glob("*.npz")}
    assert left == set(names[3].values()) | set(names[4].values())
    assert names[2][1] not in left              # only round 2's checkpoint named it
    back = own_state_files.resolve(run, {"federation": {"fed": {"own": {own_state_files.MARK: names[4]}}}}, d / "x.pt")
    own = back["federation"]["fed"]["own"]
    assert same(own[1], state(1, 4)) and same(own[2], state(2)) and same(own[4], state(4))
    damaged = bytearray((d / names[4][4]).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF          # one byte changed inside the array: the zip's CRC-32 says so
    (d / names[4][4]).write_bytes(bytes(damaged))
    with pytest.raises(ConfigError, match=r"kept state .* which is damaged \(.*\); move x.pt out of") as e:
        own_state_files.resolve(run, {"federation": {"fed": {"own": {own_state_files.MARK: names[4]}}}}, d / "x.pt")
    assert "\n" not in str(e.value)
    (d / names[4][2]).unlink()
    with pytest.raises(Exception, match="kept state .* which is missing"):
        own_state_files.resolve(run, {"federation": {"fed": {"own": {own_state_files.MARK: names[4]}}}}, d / "x.pt")


def _tmp_own_dirs() -> set[str]:
    import tempfile

    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("raysfl-own-")}


def test_a_run_whose_kept_states_all_go_through_files_computes_the_same(quick):
    """PSL with half the clients a round, its kept models in memory (the default budget) or all
    but one on disk (budget 0): the same metrics, the checkpoints' states in checkpoints/own/,
    and the fed server's directory gone once the run is over."""
    import raysfl

    before = _tmp_own_dirs()
    kw = dict(algo="psl", clients=6, clients_per_round=3, rounds=4, seed=3, keep_checkpoints=2)
    mem = raysfl.run(quick(**kw))
    disk = raysfl.run(quick(resources={"client_actors": 2, "own_state_memory_mb": 0}, **kw))
    cols = ["round", "test_accuracy", "test_loss", "train_loss"]
    assert [[r[k] for k in cols] for r in disk.metrics] == [[r[k] for k in cols] for r in mem.metrics]
    own = own_state_files.own_dir(disk.run_dir)
    assert sorted(f.name for f in own.glob("round_*.json")) == ["round_0003.json", "round_0004.json"]
    assert len(list(own.glob("*.npz"))) >= 6  # every client trained by round 4; pruning kept what 3 and 4 name
    back = disk.client_state_dicts()
    assert sorted(back) == list(range(6))  # read back from the files
    assert _tmp_own_dirs() <= before


@pytest.mark.slow
def test_a_fed_server_killed_mid_round_goes_back_to_states_on_disk(quick):
    """The fed server killed in round 3 with its clients' models on disk: the round is redone
    from the snapshot's files, and the run ends where an uninterrupted one does (within 2
    points: the retried round draws the same clients but its actors restarted)."""
    import raysfl

    kw = dict(algo="psl", clients=6, clients_per_round=3, rounds=5, seed=3, local_steps=None, local_epochs=1,
              batch_size=32, lr=0.05)
    clean = raysfl.run(quick(**kw))
    res = raysfl.run(quick(resources={"client_actors": 2, "own_state_memory_mb": 0, "co_host": "off"},
                           faults="kill:fed:round=3:step=1", **kw))
    rows = res.metrics
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5] and rows[2]["retries"] == 1
    assert [r["test_accuracy"] for r in rows[:2]] == [r["test_accuracy"] for r in clean.metrics[:2]]
    assert abs(rows[-1]["test_accuracy"] - clean.final["test_accuracy"]) <= 0.02


@pytest.mark.slow
def test_a_run_resumed_from_kept_states_in_files_ends_as_an_uninterrupted_one(quick):
    """--resume reads the checkpoint's kept states back from checkpoints/own/ (budget 0: every
    one but the last went through a file): rounds 4-5 equal an uninterrupted run's."""
    import raysfl

    kw = dict(algo="psl", clients=6, clients_per_round=3, seed=1,
              resources={"client_actors": 2, "own_state_memory_mb": 0})
    full = raysfl.run(quick(rounds=5, name="full", **kw))
    part = raysfl.run(quick(rounds=3, name="part", **kw))
    res = raysfl.run(quick(rounds=5, name="part", resume=str(part.run_dir), **kw))
    assert [r["test_accuracy"] for r in res.metrics] == [r["test_accuracy"] for r in full.metrics]


def test_kept_state_directories_of_fed_servers_that_are_gone_are_removed(tmp_path):
    """A fed server killed without its teardown (its driver SIGKILLed) leaves its directory; the
    next one to write removes it. A live process's directory stays, and so does one that names
    no process."""
    import subprocess
    import sys

    from raysfl.own_states import PREFIX, remove_orphans

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)
    for name in (f"{PREFIX}{dead}-abc", f"{PREFIX}{os.getpid()}-mine", f"{PREFIX}{os.getppid()}-parent", f"{PREFIX}old"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "0.npz").write_bytes(b"x")
    assert remove_orphans(str(tmp_path)) == [str(tmp_path / f"{PREFIX}{dead}-abc")]
    assert sorted(os.listdir(tmp_path)) == sorted([f"{PREFIX}{os.getpid()}-mine", f"{PREFIX}{os.getppid()}-parent",
                                                   f"{PREFIX}old"])
