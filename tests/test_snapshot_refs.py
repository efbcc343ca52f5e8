"""A snapshot by reference (``--snapshot-refs``, issue 44): the clients' kept states that came as a
round's updates are named in the snapshot by the objects they came in, not copied into the
object store again (raysfl.own_states.OwnStates.came_from, OwnManifest.by_value)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from raysfl.own_states import OwnStates


def state(c: int, v: float = 0.0) -> dict:
    return {"w": np.full((8, 8), c + v, dtype=np.float32), "b": np.arange(3.0) + c}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def arrive(ray, store: OwnStates, clients: list[int], v: float):
    """One client actor's updates of ``clients``, through the object store as the fed server
    gets them; each kept as it came and noted as coming from that object."""
    ref = ray.put([SimpleNamespace(client=c, state=state(c, v)) for c in clients])
    for j, u in enumerate(ray.get(ref)):
        store[u.client] = u.state
        store.came_from(u.client, u.state, (ref, j))
    return ref


def test_a_manifest_names_the_states_that_came_as_updates_by_their_object(ray_session, tmp_path):
    ray = ray_session
    store = OwnStates(budget_bytes=10**9, directory=str(tmp_path / "a"))
    ref = arrive(ray, store, [0, 1, 2], 1.0)
    store[3] = state(3)                                   # built here (not an update as it came): by value
    store.came_from(4, state(4), (ref, 0))                # a client without that state: nothing noted
    m = store.manifest()
    assert set(m.refs) == {0, 1, 2} and set(m.inline) == {3} and set(m.files) == {0, 1, 2, 3}
    assert m.refs[1] == (ref, 1)
    full = m.by_value()
    assert not full.refs and all(same(full.inline[c], state(c, 1.0 if c < 3 else 0.0)) for c in range(4))
    store[1] = state(1, 5.0)                              # client 1 changes; 0, 2 and 3 do not: written now,
    m2 = store.manifest()                                 # so that no round's object is kept for them
    assert not m2.refs and set(m2.inline) == {1}
    assert sorted(m2.files[c] for c in (0, 2, 3)) == sorted(f.name for f in (tmp_path / "a").iterdir())
    del ref
    fresh = OwnStates(budget_bytes=10**9)
    fresh.load(ray.get(ray.put(m)))                      # the round given up: the manifest holds the objects alive
    assert all(same(fresh[c], state(c, 1.0 if c < 3 else 0.0)) for c in range(4))


def test_a_state_written_for_the_memory_budget_is_named_by_its_file(ray_session, tmp_path):
    ray = ray_session
    one = sum(v.nbytes for v in state(0).values())
    store = OwnStates(budget_bytes=2 * one, directory=str(tmp_path))
    arrive(ray, store, [0, 1, 2, 3], 0.5)                 # the two least recent go to files
    m = store.manifest()
    assert set(m.refs) == {2, 3} and not m.inline and set(m.files) == {0, 1, 2, 3}
    back = OwnStates(budget_bytes=10**9)
    back.load(m)
    assert all(same(back[c], state(c, 0.5)) for c in range(4))


@pytest.mark.parametrize("setting", ["on", "off"])
def test_the_fed_server_names_a_round_s_updates_by_reference_where_asked(ray_session, setting):
    """PSL's fed server in this process, two rounds of updates: with ``snapshot_refs`` on its
    snapshot names every kept state by the client actor's object, off by value; the state put
    back from either is the same, and a round after it is aggregated as before."""
    import dataclasses

    import raysfl
    from raysfl.data import load_dataset
    from raysfl.resolve import validate_run
    from raysfl.runtime.experiment import prepare
    from raysfl.algorithms.roles.aggregator import block_of
    from raysfl.algorithms.roles.context import ClientUpdate
    from raysfl.runtime.fed_actor import ClientViews, FedActor

    ray = ray_session
    cfg, algo = validate_run(raysfl.config_from_kwargs(algo="psl", clients=3, model="cnn"))
    cfg = dataclasses.replace(cfg, resources=dataclasses.replace(cfg.resources, snapshot_refs=setting,
                                                                 direct_payloads="off"))
    ds = load_dataset("digits")
    p = prepare(cfg, algo, ds)
    fed = FedActor()
    fed.setup("test", cfg, p.spec, p.ctx, p.planner.shared(), ds, ClientViews([], np.ones((3, 10))))
    start = fed.dispatch([{c: 2 for c in range(3)}])["global"]

    def updates(v: float) -> list:
        return [ClientUpdate(c, {k: a + v * (c + 1) for k, a in start.items() if block_of(k) < 2}, 1.0)
                for c in range(3)]

    fed.aggregate(1, None, [], [ray.put(updates(0.1)[:2]), ray.put(updates(0.1)[2:])])
    snap = ray.get(ray.put(fed.get_state()))             # as the driver holds it
    own = snap["own"]
    if setting == "on":
        assert set(own.refs) == {0, 1, 2} and not own.inline
    else:
        assert not own.refs and set(own.inline) == {0, 1, 2}
    kept = {c: {k: np.array(v) for k, v in fed.role.own[c].items()} for c in range(3)}
    fed.aggregate(2, None, [], [ray.put(updates(0.2))])  # a round that is then given up
    fed.load_state(snap)
    for c in range(3):
        assert same(fed.role.own[c], kept[c])


def test_auto_is_on_on_one_node_where_the_updates_come_back_through_the_driver():
    import dataclasses

    import raysfl
    from raysfl.runtime.placement import resolve_snapshot_refs

    def resolved(nodes: int, **res) -> str:
        cfg = raysfl.config_from_kwargs(algo="psl")
        cfg = dataclasses.replace(cfg, resources=dataclasses.replace(cfg.resources, **res))
        return resolve_snapshot_refs(cfg, nodes).resources.snapshot_refs

    assert resolved(1, direct_payloads="off") == "on"
    assert resolved(1, direct_payloads="on") == "off"    # the updates are then the client actors' own objects
    assert resolved(2, direct_payloads="off") == "off"   # objects on the client actors' nodes: a lost node
    assert resolved(1, direct_payloads="off", snapshot_refs="off") == "off"  # the user's choice stands


def _rows(res) -> list:
    return [(r["round"], r["test_accuracy"], r["test_loss"], r["train_loss"], r.get("retries")) for r in res.metrics]


def test_a_psl_run_by_reference_computes_and_checkpoints_what_one_by_value_does(quick):
    """PSL with half its clients a round (states that do not change are written at the next
    snapshot), checkpoints every round: the same rows, and the last checkpoint's kept states
    (written from the fetched objects) equal to those of a run that copies them."""
    import raysfl

    kw = dict(algo="psl", clients=6, clients_per_round=3, rounds=4, seed=5)
    got = {s: raysfl.run(quick(resources={"client_actors": 2, "snapshot_refs": s}, name=s, **kw)) for s in ("on", "off")}
    assert _rows(got["on"]) == _rows(got["off"])
    on, off = got["on"].client_state_dicts(), got["off"].client_state_dicts()
    assert sorted(on) == sorted(off) == list(range(6))
    for c in on:
        assert on[c].keys() == off[c].keys() and all(np.array_equal(on[c][k], off[c][k]) for k in on[c]), c


def test_the_driver_fetches_a_snapshot_every_round_by_value_only(quick, monkeypatch):
    """Without checkpoints (a tuning trial), a snapshot by reference (one node) is not fetched
    into the driver unless needed; by value (a cluster's default) it is, a round after it was
    taken, so that it outlives the fed server's node (docs/reliability.md, "Snapshots")."""
    import raysfl
    from raysfl.runtime.federation import Federation

    fetched, fetch = [], Federation.snapshot.fget

    def counting(self):
        if self._snap_refs is not None:
            fetched[-1] += 1
        return fetch(self)

    monkeypatch.setattr(Federation, "snapshot", property(counting, Federation.snapshot.fset))
    for setting in ("on", "off"):
        fetched.append(0)
        raysfl.run(quick(algo="psl", rounds=4, checkpoint_every=0, name=setting,
                         resources={"client_actors": 2, "snapshot_refs": setting}))
    assert fetched == [0, 4]  # by value: the start's and rounds 1-3's, each after the next round's calls


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill:fed:round=2:step=1", "kill:server:round=3:step=1"])
def test_a_round_retried_from_a_snapshot_by_reference_ends_as_one_by_value(quick, fault):
    """A fed server or a server killed mid-round: the round goes back to the snapshot, whose
    kept states a restarted fed server fetches from the client actors' objects (the driver's
    snapshot holds them alive); the rows equal a run whose snapshot copies them."""
    import raysfl

    kw = dict(algo="psl", clients=6, rounds=4, seed=2, faults=fault)
    got = {s: raysfl.run(quick(resources={"client_actors": 2, "snapshot_refs": s, "co_host": "off"}, name=s, **kw))
           for s in ("on", "off")}
    assert [r["retries"] for r in got["on"].metrics] == [r["retries"] for r in got["off"].metrics]
    assert sum(r["retries"] for r in got["on"].metrics) == 1
    assert _rows(got["on"]) == _rows(got["off"])


def test_a_bad_value_is_one_line():
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate_run

    with pytest.raises(ConfigError, match=r"unknown resources.snapshot_refs 'maybe'; allowed: auto, on, off"):
        validate_run(raysfl.config_from_kwargs(algo="psl", resources={"snapshot_refs": "maybe"}))
