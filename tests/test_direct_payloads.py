"""Direct payloads (``--direct-payloads``): smashed data and gradients handed from actor to
actor through the object store, the driver passing only references. The path changes; what a
run computes does not."""

import time

import numpy as np
import pytest

import raysfl

TIMING = ("wall", "time_s", "sim_", "startup")


def _rows(res):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in res.metrics]


def test_a_handed_off_payload_is_fetched_and_one_lost_with_its_maker_counts_as_its_death(ray_session):
    """The driver holds only a reference; fetch unwraps it. A payload belongs to the actor that
    put it (Ray's ownership): once its maker dies, fetching it may still find it in its node's
    store for a while, but Ray then reports it lost, and fetch gives DEAD -- never an error, so
    the round goes on without it as it does without its sender (docs/architecture.md)."""
    ray = ray_session
    from raysfl.runtime.refs import DEAD, fetch, hand_off

    @ray.remote(num_cpus=0)
    class Maker:
        def make(self, direct, n):
            out = hand_off([{"step": i} for i in range(n)], direct)  # one payload per return
            return out if n > 1 else out[0]

        def big(self):
            return hand_off([{"smashed": np.ones(50_000, dtype=np.float32)}], True)[0]  # 200 KB

    a = Maker.remote()
    one, many = a.make.remote(True, 1), a.make.options(num_returns=2).remote(True, 2)
    assert isinstance(ray.get(one), ray.ObjectRef)  # the driver holds a reference, not the payload
    assert fetch([one, *many]) == [{"step": 0}, {"step": 0}, {"step": 1}]
    assert fetch([a.make.remote(False, 1)]) == [{"step": 0}]  # not direct: the value itself
    small, big = a.make.remote(True, 1), a.big.remote()
    ray.get([small, big])  # the payloads are made and put; then their maker dies before anyone fetches them
    ray.kill(a)
    with pytest.raises(ray.exceptions.RayActorError):  # wait until it is gone
        for _ in range(100):
            ray.get(a.make.remote(False, 1))
            time.sleep(0.1)
    got = fetch([big])[0]  # found in its node's store, or already known lost: either, never an error
    assert got is DEAD or float(got["smashed"].sum()) == 50_000.0
    for _ in range(300):  # Ray learns that the owner died within a second or so
        if (got := fetch([small])[0]) is DEAD:
            break
        assert got == {"step": 0}
        time.sleep(0.1)
    assert got is DEAD


@pytest.mark.parametrize("algo", ["splitfed_v2", pytest.param("fed_pairing", marks=pytest.mark.slow)])  # ~35 s on CI
def test_direct_payloads_change_the_path_not_the_results(quick, algo):
    off = raysfl.run(quick(algo=algo, resources={"client_actors": 2, "direct_payloads": "off"}))
    on = raysfl.run(quick(algo=algo, resources={"client_actors": 2, "direct_payloads": "on"}))
    assert _rows(on) == _rows(off)
    assert on.metrics[-1]["bytes_smashed_up"] > 0


def test_a_client_actor_killed_as_a_round_starts_fails_the_same_clients_on_either_path(quick):
    """Killed before any of its work in the round, the actor hands off nothing, so the two paths
    lose the same: the same clients fail, the same rows follow. (A kill after a step races with
    the server's fetch of that step's payloads when they are the actor's own objects:
    docs/architecture.md, "Direct payloads".)"""
    faults = "kill:client:round=2:index=0"
    off = raysfl.run(quick(algo="psl", faults=faults, resources={"client_actors": 2, "direct_payloads": "off"}))
    on = raysfl.run(quick(algo="psl", faults=faults, resources={"client_actors": 2, "direct_payloads": "on"}))
    assert off.metrics[1]["failed_clients"] == 2  # the killed actor's two clients
    assert _rows(on) == _rows(off)


def test_auto_is_on_only_where_the_cluster_has_more_than_one_node(monkeypatch):
    import ray

    from raysfl.runtime.placement import resolve_direct_payloads

    cfg = raysfl.config_from_kwargs(algo="psl")
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    assert resolve_direct_payloads(cfg).resources.direct_payloads == "off"
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}, {"Alive": False}])
    assert resolve_direct_payloads(cfg).resources.direct_payloads == "on"
    mine = raysfl.config_from_kwargs(algo="psl", resources={"direct_payloads": "off"})
    assert resolve_direct_payloads(mine).resources.direct_payloads == "off"  # the user's choice stands


def test_a_bad_direct_payloads_value_is_refused_in_one_line():
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match="unknown resources.direct_payloads 'yes'; allowed: auto, on, off"):
        validate(raysfl.config_from_kwargs(algo="psl", resources={"direct_payloads": "yes"}))
