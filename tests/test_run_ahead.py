"""The next round submitted behind a round's aggregation (``--run-ahead``, ours; on by default):
the rows, the client rows and the checkpoints are those of submitting it after the aggregation's
answer, but for the wall-clock columns; a callback that stops the run, and a round that fails
after the next one was submitted, leave what they leave without it."""

from __future__ import annotations

import numpy as np
import pytest

import raysfl
from raysfl import checkpoint
from raysfl.metrics import read_rows
from raysfl.runtime import federation, run_ahead

from checkpoint_arrays import checkpoint_arrays

WALL = ("wall_time_s", "wall_time_total_s")
# psl: kept states resident in the client actors, its evaluation overlapping the next round;
# flex_sfl: the fed server hands its edge servers their merged state inside the aggregation (eq. 26)
CASES = {"psl": dict(algo="psl", clients=4, local_steps=2, eval_overlap="on"),
         "flex_sfl": dict(algo="flex_sfl", clients=6, local_steps=1, eval_overlap="off")}


def config(tmp_path, name: str, mode: str, **kw):
    case = dict(CASES[name])
    overlap = case.pop("eval_overlap")
    return raysfl.config_from_kwargs(
        rounds=3, batch_size=16, seed=1, checkpoint_every=1, keep_checkpoints=0, progress=False,
        out=str(tmp_path / f"{name}-{mode}"), **case, **kw,
        resources={"client_actors": 2, "eval_overlap": overlap, "run_ahead": mode})


def same_run(a, b) -> None:
    """Rows, client rows and checkpoints equal, but for the wall-clock columns."""
    assert [list(r) for r in a.metrics] == [list(r) for r in b.metrics]
    for x, y in zip(a.metrics, b.metrics):
        for k in x:
            if k not in WALL:
                assert x[k] == y[k] or (x[k] != x[k] and y[k] != y[k]), (x["round"], k)
    assert read_rows(a.run_dir / "clients.parquet") == read_rows(b.run_dir / "clients.parquet")
    assert checkpoint.rounds_saved(a.run_dir) == checkpoint.rounds_saved(b.run_dir)
    for rnd in checkpoint.rounds_saved(a.run_dir):
        x, y = checkpoint_arrays(a.run_dir, rnd), checkpoint_arrays(b.run_dir, rnd)
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), (rnd, k)


@pytest.fixture
def watched(monkeypatch):
    """Counts the rounds submitted ahead, and whether the servers' first calls waited for the
    aggregation before them."""
    seen = {"ahead": [], "after": []}
    submit_ahead, submit_round = run_ahead.submit_ahead, federation.Federation.submit_round

    def counting(exp, fed, rnd, *args):
        seen["ahead"].append(rnd + 1)
        return submit_ahead(exp, fed, rnd, *args)

    def noting(self, rnd, *args, after=None, **kw):
        if after is not None:
            seen["after"].append(rnd)
        return submit_round(self, rnd, *args, after=after, **kw)

    monkeypatch.setattr(run_ahead, "submit_ahead", counting)
    monkeypatch.setattr(federation.Federation, "submit_round", noting)
    return seen


@pytest.mark.parametrize("name", list(CASES))
def test_running_ahead_writes_the_rows_and_checkpoints_of_waiting(name, tmp_path, ray_session, watched):
    res = raysfl.run(config(tmp_path, name, "on"))
    assert watched["ahead"] == [2, 3]  # every round after the first went behind the one before
    if name == "flex_sfl":
        assert watched["after"]  # its edge servers' calls waited for the merged state (rounds that merge, eq. 26)
    watched["ahead"].clear()
    off = raysfl.run(config(tmp_path, name, "off"))
    assert watched["ahead"] == []
    same_run(res, off)


def test_a_planner_whose_figures_read_its_last_plan_does_not_run_ahead(tmp_path, ray_session, watched):
    """FedPairing's simulated times read the pairs it planned last (``plans_ahead = False``):
    planning round r+1 before round r's row would give round r the next round's links."""
    res = raysfl.run(raysfl.config_from_kwargs(algo="fed_pairing", clients=4, rounds=3, local_steps=1, batch_size=16,
                                               seed=1, progress=False, out=str(tmp_path),
                                               resources={"client_actors": 2, "run_ahead": "on"}))
    assert [r["round"] for r in res.metrics] == [1, 2, 3]
    assert watched["ahead"] == []


def test_a_callback_that_stops_the_run_undoes_the_round_submitted_ahead(tmp_path, ray_session, watched):
    """Rounds evaluated at once (``--eval-overlap off``): round 3 was submitted behind round 2's
    aggregation when round 2's row stops the run; the run ends with round 2's row and
    checkpoint, and the federation goes back to round 2's end for the next run of the process."""
    def stop_at_2(row):
        return row["round"] == 2

    kw = dict(CASES["psl"], eval_overlap="off")
    runs = {}
    for mode in ("on", "off"):
        cfg = raysfl.config_from_kwargs(rounds=3, batch_size=16, seed=1, checkpoint_every=1, keep_checkpoints=0,
                                        progress=False, out=str(tmp_path / mode),
                                        **{k: v for k, v in kw.items() if k != "eval_overlap"},
                                        resources={"client_actors": 2, "eval_overlap": "off", "run_ahead": mode})
        runs[mode] = raysfl.run(cfg, callbacks=[stop_at_2])
    assert 3 in watched["ahead"]  # round 3 had gone behind round 2
    for res in runs.values():
        assert res.stopped and [r["round"] for r in res.metrics] == [1, 2]
    same_run(runs["on"], runs["off"])


def test_a_round_that_fails_after_the_next_went_ahead_is_retried_as_without_it(tmp_path, ray_session, watched,
                                                                              monkeypatch):
    """Round 2's snapshot not confirmed (as when an actor restarted before giving it), once:
    round 3, already submitted behind round 2's aggregation, is abandoned, round 2 is rolled
    back and retried, and the run's rows and checkpoints are those of the same failure without
    running ahead."""
    confirm = federation.Federation.confirm_snapshot
    failed = []

    def fails_once_at_2(self):
        if self._snap_round_pending == 2 and len(failed) < len(runs) + 1:
            failed.append(2)
            self._snap_refs, self._clean = None, False
            raise federation.FedServerLost("round 2's snapshot not confirmed (test)")
        return confirm(self)

    monkeypatch.setattr(federation.Federation, "confirm_snapshot", fails_once_at_2)
    runs = {}
    for mode in ("on", "off"):
        runs[mode] = raysfl.run(config(tmp_path, "psl", mode))
        assert failed == [2] * len(runs)
    assert watched["ahead"].count(3) == 2  # round 3 went ahead of round 2 twice: abandoned, then again
    for res in runs.values():
        assert [r["round"] for r in res.metrics] == [1, 2, 3]
        assert res.metrics[1]["retries"] == 1
    same_run(runs["on"], runs["off"])


def test_an_unknown_run_ahead_is_refused_in_one_line():
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"unknown resources.run_ahead 'early'; allowed: on, off"):
        validate(raysfl.config_from_kwargs(algo="psl", resources={"run_ahead": "early"}))


def fail_once_at_round_2(monkeypatch, where: str) -> list:
    """Round 2 fails once per run, as when the fed server is lost: in its aggregation (after
    the fed server aggregated, before the driver reads the answer) or in its snapshot's
    confirmation. Returns the list the failures are noted in (one entry per run)."""
    failed: list = []

    def once(fed) -> bool:  # marked on the run's federation (an id() could be a finished run's, reused)
        if getattr(fed, "_failed_in_test", False):
            return False
        fed._failed_in_test = True
        failed.append(2)
        return True

    if where == "aggregate":
        aggregate = federation.Federation.aggregate

        def lost_answer(self, flight, *args, **kw):
            out = aggregate(self, flight, *args, **kw)
            if flight.rnd == 2 and once(self):
                self._clean = False
                raise federation.FedServerLost("the aggregation's answer lost (test)")
            return out

        monkeypatch.setattr(federation.Federation, "aggregate", lost_answer)
    else:
        confirm = federation.Federation.confirm_snapshot

        def not_confirmed(self):  # the stamps name another incarnation of the fed server than the one expected
            if self._snap_refs is not None and self._snap_round_pending == 2 and once(self):
                expected, self.incarnations[-1] = self.incarnations[-1], "a restarted fed server (test)"
                try:
                    return confirm(self)
                finally:
                    self.incarnations[-1] = expected
            return confirm(self)

        monkeypatch.setattr(federation.Federation, "confirm_snapshot", not_confirmed)
    return failed


@pytest.mark.parametrize("where", ["aggregate", "confirm"])
def test_a_failed_round_goes_back_to_the_snapshot_before_it_fetched_or_not(where, tmp_path, ray_session, watched,
                                                                          monkeypatch):
    """No checkpoints, so nothing fetched the snapshots (on one node they are refs, fetched only
    when needed): round 2 failing after its own snapshot was asked for -- behind its
    aggregation, with round 3 gone ahead, or after it -- goes back to round 1's, as a run that
    fetched round 1's (``--snapshot-refs off``) and one that does not run ahead do."""
    failed = fail_once_at_round_2(monkeypatch, where)
    runs = {}
    for name, refs, ahead in (("refs", "on", "on"), ("values", "off", "on"), ("in_turn", "on", "off")):
        cfg = raysfl.config_from_kwargs(
            algo="psl", clients=4, local_steps=2, rounds=3, batch_size=16, seed=1, checkpoint_every=0, progress=False,
            out=str(tmp_path / name), resources={"client_actors": 2, "eval_overlap": "on", "snapshot_refs": refs,
                                                 "run_ahead": ahead})
        runs[name] = raysfl.run(cfg)
        assert failed == [2] * len(runs)
    assert 3 in watched["ahead"]
    for res in runs.values():
        assert [r["round"] for r in res.metrics] == [1, 2, 3] and res.metrics[1]["retries"] == 1
    same_run(runs["refs"], runs["in_turn"])
    same_run(runs["values"], runs["in_turn"])
