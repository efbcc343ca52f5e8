"""Updates summed by their client actor (``--update-sums``, ours): where the aggregation is FedAvg
as it stands, a client actor sends one weighted sum per server instead of every client's state,
and the fed server adds the sums -- the same average, but for the order of float64 additions."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from raysfl.aggregation import UpdateSum, sum_updates, weighted_average


def _update(client: int, weight: float, seed: int, keys=("blocks.0.w", "blocks.0.n")):
    rng = np.random.default_rng(seed)
    state = {}
    for k in keys:
        state[k] = (np.array(rng.integers(0, 50), np.int64) if k.endswith(".n")
                    else rng.normal(size=(3, 4)).astype(np.float32))
    return SimpleNamespace(client=client, state=state, weight=weight)


def test_sums_give_the_average_of_the_states_they_sum():
    """Six clients on two client actors, two cuts (block 1 held by three of them), an integer
    buffer: the average of the actors' sums is the clients' average, to the float32 it is cast
    to (both sum in float64)."""
    deep = ("blocks.0.w", "blocks.0.n", "blocks.1.w")
    ups = [_update(0, 14.0, 0), _update(1, 3.0, 1, deep), _update(2, 32.0, 2), _update(3, 7.0, 3, deep),
           _update(4, 9.0, 4, deep), _update(5, 1.0, 5)]
    base = {"blocks.0.w": np.zeros((3, 4), np.float32), "blocks.0.n": np.array(0, np.int64),
            "blocks.1.w": np.zeros((3, 4), np.float32), "blocks.2.w": np.ones(2, np.float32)}
    plain = weighted_average([(u.state, u.weight) for u in ups], base=base)
    actors = [sum_updates(ups[:3], dict.fromkeys(range(3), 0)), sum_updates(ups[3:], dict.fromkeys(range(3, 6), 0))]
    # actor 0: clients 0 and 2 share their keys (one sum), client 1 alone in its set; actor 1: 3 and 4 summed, 5 alone
    assert sorted(tuple(s.clients) for a in actors for s in a if isinstance(s, UpdateSum)) == [(0, 2), (3, 4)]
    items = [u if isinstance(u, UpdateSum) else (u.state, u.weight) for a in actors for u in a]
    summed = weighted_average(items, base=base)
    assert set(summed) == set(plain)
    for k in plain:
        assert summed[k].dtype == plain[k].dtype
        np.testing.assert_allclose(summed[k], plain[k], rtol=1e-6)
    np.testing.assert_array_equal(summed["blocks.2.w"], base["blocks.2.w"])  # held by nobody


def test_the_average_adds_as_it_did_before_sums():
    """Unsummed states average to the very bits of ``sum(v.astype(float64) * (w / total))``, the
    average before sums (``add_scaled`` only drops its temporaries)."""
    ups = [_update(c, w, c) for c, w in enumerate([14.0, 3.0, 32.0, 7.0])]
    out = weighted_average([(u.state, u.weight) for u in ups])
    total = sum(u.weight for u in ups)
    for k in ("blocks.0.w", "blocks.0.n"):
        acc = np.zeros(np.shape(ups[0].state[k]))
        for u in ups:
            acc += u.state[k].astype(np.float64) * (u.weight / total)
        ref = np.rint(acc).astype(np.int64) if k.endswith(".n") else acc.astype(np.float32)
        assert out[k].dtype == ref.dtype and np.array_equal(out[k], ref)


def test_only_clients_of_one_group_with_positive_weights_are_summed():
    ups = [_update(0, 2.0, 0), _update(1, 2.0, 1), _update(2, 5.0, 2), _update(3, 0.0, 3), _update(4, 1.0, 4)]
    out = sum_updates(ups, {0: 0, 1: 1, 2: 0, 3: 0, 4: 1})  # clients 0 and 2 on server 0, 1 and 4 on server 1
    sums = sorted((s.clients, s.weight) for s in out if isinstance(s, UpdateSum))
    assert sums == [([0, 2], 7.0), ([1, 4], 3.0)]
    assert [u.client for u in out if not isinstance(u, UpdateSum)] == [3]  # weight 0: the fallback counts it once
    for s in out:
        if isinstance(s, UpdateSum):
            assert all(v.dtype == np.float64 for v in s.weighted.values())
            assert s.dtypes["blocks.0.w"] == np.float32 and s.dtypes["blocks.0.n"] == np.int64


def test_a_sum_weighs_its_updates_as_the_aggregator_does():
    """FedPairing's plain average (every update weight one, Sec. II-A.3): summed with weight one."""
    from raysfl.algorithms.fed_pairing.algorithm import PlainAverage

    ups = [_update(0, 14.0, 0), _update(1, 3.0, 1), _update(2, 32.0, 2)]
    plain = weighted_average([(u.state, 1.0) for u in ups])
    (s,) = sum_updates(ups, dict.fromkeys(range(3), 0), PlainAverage.update_weight)
    assert s.weight == 3.0
    summed = weighted_average([s])
    for k in plain:
        np.testing.assert_allclose(summed[k], plain[k], rtol=1e-6)


def test_a_sum_is_aggregated_whole_or_not_at_all():
    from raysfl.runtime.fed_actor import counted

    s = UpdateSum([3, 5], {}, 2.0, {})
    assert counted(s, None) and counted(s, {1, 3, 5}) and not counted(s, {1, 2})
    with pytest.raises(RuntimeError, match=r"clients \[3, 5\] are aggregated only in part \(\[5\]\)"):
        counted(s, {5})


def test_which_aggregators_take_sums():
    import raysfl.algorithms as algorithms
    from raysfl.algorithms.roles.aggregator import Aggregator

    takes = {name for name, algo in algorithms.ALGORITHMS.items() if algo.aggregator.takes_sums()}
    assert {"splitfed_v1", "splitfed_v2", "sl", "fedavg", "fedprox", "fed_pairing"} <= takes
    assert not takes & {"psl", "epsl", "gapsl", "flex_sfl", "super_sfl", "besplit"}

    class Median(Aggregator):  # a role of yours that averages its own way sees every client's update
        def average(self, global_state, updates):
            return global_state

    assert not Median.takes_sums()


@pytest.mark.parametrize("algo", ["splitfed_v2", "fedavg", "fed_pairing"])
def test_a_run_with_summed_updates_matches_one_without(quick, monkeypatch, algo):
    """The client actors send sums (seen in what they return), and the run's rows are those of
    the run where every client's update travels; it learns. The CNN throughout: the average
    summed in another order may differ in the last place of a float32, and FedPairing's default
    ResNet-18 at this learning rate grows that into 2e-4 of the next round's training loss."""
    import ray

    import raysfl
    from raysfl.runtime import federation

    seen = []
    run_group = federation.Federation._run_group

    def recording(self, *args, **kw):
        out = run_group(self, *args, **kw)
        seen.extend(type(u).__name__ for res in ray.get(out[0]) for u in res)
        return out

    monkeypatch.setattr(federation.Federation, "_run_group", recording)
    rows = {}
    for mode in ("off", "on"):
        seen.clear()
        cfg = quick(algo=algo, model="cnn", clients=6, rounds=3, local_steps=None, local_epochs=1, batch_size=32,
                    lr=0.05, resources={"client_actors": 2, "update_sums": mode})
        rows[mode] = raysfl.run(cfg).metrics
        assert set(seen) == ({"UpdateSum"} if mode == "on" else {"ClientUpdate"})
    for a, b in zip(rows["off"], rows["on"]):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-6)
        assert b["test_loss"] == pytest.approx(a["test_loss"], rel=1e-6)
    assert rows["on"][-1]["test_accuracy"] > 0.6 and rows["on"][-1]["train_loss"] < rows["on"][0]["train_loss"]


def test_summed_updates_survive_a_killed_client_actor(quick):
    """A client actor killed mid-round takes its sum with it; the round goes on with the other's."""
    import raysfl

    res = raysfl.run(quick(algo="splitfed_v2", clients=6, rounds=4, local_steps=None, local_epochs=1,
                           batch_size=32, lr=0.05, faults="kill:client:round=2:step=1:index=1",
                           resources={"client_actors": 2, "update_sums": "on"}))
    rows = res.metrics
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["failures"] >= 1
    assert rows[-1]["test_accuracy"] > 0.6 and rows[-1]["train_loss"] < rows[0]["train_loss"]


def test_an_unknown_update_sums_is_refused_in_one_line():
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"unknown resources.update_sums 'maybe'; allowed: on, off"):
        validate(raysfl.config_from_kwargs(algo="splitfed_v2", resources={"update_sums": "maybe"}))
