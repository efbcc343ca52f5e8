"""A round's evaluation overlapping the next round's training (``--eval-overlap``, ours; on by
default on one node): the rows, the checkpoints and what the callbacks see are those of evaluating each
round before the next one starts, but for the wall-clock columns. Faults during the overlap are
in tests/test_faults.py (``during_deferred_evaluation``)."""

from __future__ import annotations

import numpy as np
import pytest

import raysfl
from raysfl import checkpoint
from raysfl.metrics import read_rows

from checkpoint_arrays import checkpoint_arrays

RUN = dict(algo="psl", clients=4, rounds=3, local_steps=2, batch_size=16, seed=1, checkpoint_every=1,
           keep_checkpoints=0)
WALL = ("wall_time_s", "wall_time_total_s")
ON = {"client_actors": 2, "eval_overlap": "on"}  # as auto on one node; said, so that the test holds on a cluster too


@pytest.fixture(scope="module")
def at_once(tmp_path_factory, ray_session):
    """The run with each round evaluated before the next starts."""
    out = tmp_path_factory.mktemp("at_once")
    return raysfl.run(raysfl.config_from_kwargs(out=str(out), progress=False, resources={
        "client_actors": 2, "eval_overlap": "off"}, **RUN))


def test_overlap_writes_the_rows_and_checkpoints_of_evaluating_at_once(quick, at_once):
    seen = []
    res = raysfl.run(quick(resources=ON, **RUN), callbacks=[seen.append])
    assert [r["round"] for r in seen] == [1, 2, 3]  # every row reached the callbacks, in order
    mine, theirs = res.metrics, at_once.metrics
    assert [list(r) for r in mine] == [list(r) for r in theirs]  # the same columns in the same order
    for a, b in zip(mine, theirs):
        for k in a:
            if k not in WALL:
                assert a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]), (a["round"], k)
    assert not np.isnan([r["test_accuracy"] for r in mine]).any()  # every round was evaluated
    clients_a = read_rows(res.run_dir / "clients.parquet")
    clients_b = read_rows(at_once.run_dir / "clients.parquet")
    assert clients_a == clients_b
    for rnd in range(1, RUN["rounds"] + 1):
        a, b = checkpoint_arrays(res.run_dir, rnd), checkpoint_arrays(at_once.run_dir, rnd)
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), (rnd, k)


def test_a_callback_that_stops_at_a_round_gets_its_row_and_checkpoint_and_nothing_after(quick, at_once):
    """The next round has trained by the time a deferred row reaches the callbacks: stopping
    there undoes it. The run ends with round 2's row and checkpoint, as without the overlap."""
    seen = []

    def stop_at_2(row):
        seen.append(row["round"])
        return row["round"] == 2

    res = raysfl.run(quick(resources=ON, **RUN), callbacks=[stop_at_2])
    assert seen == [1, 2] and res.stopped
    assert [r["round"] for r in res.metrics] == [1, 2]
    assert checkpoint.rounds_saved(res.run_dir) == [1, 2]
    a, b = checkpoint_arrays(res.run_dir, 2), checkpoint_arrays(at_once.run_dir, 2)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert res.metrics[1]["test_accuracy"] == at_once.metrics[1]["test_accuracy"]


def test_a_fed_server_that_dies_while_evaluating_is_a_loss_and_the_evaluation_is_asked_again(ray_session):
    """The deferred evaluation's own death path: FedServerLost (the round is rolled back and
    retried), the round still pending, and its evaluation asked again at the next dispatch."""
    import os

    import ray

    from raysfl.runtime.federation import Federation, FedServerLost

    @ray.remote(max_restarts=0)
    class DiesEvaluating:
        def evaluate(self, rnd):
            os._exit(1)

    fed = object.__new__(Federation)  # only what the deferred evaluation touches
    fed.fed, fed._deferred, fed._deferred_ref, fed._clean = DiesEvaluating.remote(), 2, None, True
    with pytest.raises(FedServerLost):
        fed.deferred_result(timeout=60)
    assert fed.deferred == 2 and fed._deferred_ref is None and not fed._clean
