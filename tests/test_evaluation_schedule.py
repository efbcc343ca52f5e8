"""A table's runs evaluate the rounds its metric and its guards read (raysfl/reproduce/schedule.py):
which rounds, that every row gets the same ones, that evaluating fewer rounds changes no
training, and that runs an earlier version evaluated in every round are read back (or go on)
and read at the table's rounds."""

from __future__ import annotations

import json
import math

import pytest

from raysfl.config import round_set
from raysfl.paper_tables import Claim, Metric, Row, Table
from raysfl.reproduce.schedule import eval_rounds, every_round

SCALES = {"small": {"dataset": "digits", "rounds": 30, "clients": 4, "batch_size": 16, "local_steps": 2},
          "paper": {"dataset": "cifar10", "rounds": 100}}
SHARED = {"partition": "dirichlet", "alpha": 0.5, "lr": 0.005, "server_lr": 0.01, "momentum": 0.9, "cut": 1}


def table(metric=Metric("final"), rows=(), shown=()) -> Table:
    return Table(paper="test", name="t", title="t", source="nowhere", reference=Row("GAPSL", {"algo": "gapsl"}),
                 rows=tuple(rows), metric=metric, claim=Claim("the reference wins"), shared=SHARED, scales=SCALES,
                 shown=tuple(shown))


def test_a_table_evaluates_round_1_every_kth_and_its_last_2k_rounds_or_every_round_where_it_reads_the_whole_run():
    assert eval_rounds(table(), 50) == "1,5,10,15,20,25,30,35,40,41-50"
    assert round_set(eval_rounds(table(Metric("mean_last", k=5)), 30)) == {1, 5, 10, 15, 20, *range(21, 31)}
    assert eval_rounds(table(Metric("mean_last", k=15)), 40) == "1,5,10,15,20,25,26-40"  # a mean longer than 2k
    assert eval_rounds(table(), 12) == "1,3-12" and eval_rounds(table(), 11) == ""  # every round anyway: ""
    for whole in (Metric("best"), Metric("rounds_to", target=0.9), Metric("sim_time_to", target=0.9)):
        assert eval_rounds(table(whole), 50) == ""
    assert eval_rounds(table(shown=(Metric("rounds_to", target=0.9),)), 50) == ""  # a figure shown reads it all


def test_every_row_of_a_table_evaluates_the_same_rounds_and_no_diff_shows_them():
    from raysfl.reproduce.engine import plan

    planned = plan(table(rows=[Row("GAPSL, Non-GDA", {"gapsl": {"gda": "none"}})]), "small", [0, 1])
    assert {c.eval_rounds for cfgs in planned.configs.values() for c in cfgs} == {"1,5,10,15,20,21-30"}
    assert "eval" not in str(planned.diffs)
    from raysfl.reproduce.command import settings_line

    assert "evaluated in rounds 1,5,10,15,20,21-30 (ours" in settings_line(planned.configs["GAPSL"][0])
    rounds_to = plan(table(Metric("rounds_to", target=0.9)), "small", [0])
    assert rounds_to.configs["GAPSL"][0].eval_rounds == ""


def test_a_run_kept_evaluating_every_round_is_read_back_at_the_table_s_rounds(tmp_path):
    """A cache an earlier version wrote holds runs evaluated in every round: a table that now
    evaluates fewer reads them back, nothing run, and reads every row at its own rounds."""
    from raysfl.reproduce.engine import cached, plan, run_planned
    from raysfl.run_key import cache_keys

    planned = plan(table(), "small", [0])
    cfg = planned.configs["GAPSL"][0]
    dense = [{"round": r, "train_loss": 1.0 / r, "test_accuracy": r / 40, "test_loss": 2.0 / r} for r in range(1, 31)]
    key = cache_keys(every_round(cfg))[0]
    assert key not in cache_keys(cfg)
    (tmp_path / f"{key}.json").write_text(json.dumps({"config": every_round(cfg).to_dict(), "metrics": dense}))
    assert cached(cfg, tmp_path)
    said = []
    rows = run_planned(planned, tmp_path, say=said.append)["GAPSL"][0]
    assert said == ["reproduce test/t: 1 runs (1 cached), 1 at a time"]
    assert [r["round"] for r in rows if math.isfinite(r["test_accuracy"])] == [1, 5, 10, 15, 20, *range(21, 31)]
    assert [r["round"] for r in rows if math.isfinite(r["test_loss"])] == [1, 5, 10, 15, 20, *range(21, 31)]
    assert [r["train_loss"] for r in rows] == [r["train_loss"] for r in dense]  # training read whole


@pytest.mark.usefixtures("ray_session")
def test_a_run_cut_off_by_a_version_that_evaluated_every_round_goes_on_as_it_began(tmp_path, capsys):
    """A table's run cut off while it evaluated every round (in ``runs/`` under that run's key)
    goes on from its checkpoint when the table now asks for fewer rounds' evaluation; it is kept
    as what it is, a run evaluated in every round, and read at the table's rounds."""
    import dataclasses

    import raysfl
    from raysfl.reproduce.engine import cached, run_cached
    from raysfl.resolve import validate
    from raysfl.run_key import cache_keys

    dense = validate(raysfl.config_from_kwargs(algo="psl", clients=4, rounds=14, local_steps=1, batch_size=16,
                                               lr=0.05, resources={"client_actors": 2}))
    sparse = dataclasses.replace(dense, eval_rounds=eval_rounds(table(), 14))
    assert sparse.eval_rounds == "1,5-14"
    key = cache_keys(dense)[0]
    runs = tmp_path / "runs"
    cut = dataclasses.replace(dense, progress=False, checkpoint_every=1, keep_checkpoints=1, out=str(runs), name=key)
    raysfl.run(cut, callbacks=[lambda row: row["round"] == 2])
    capsys.readouterr()
    rows = run_cached(sparse, tmp_path)
    assert f"psl, seed 0: going on from round 2 ({runs / key})" in capsys.readouterr().err
    assert all(math.isfinite(r["test_accuracy"]) for r in rows)  # every round evaluated, as it began
    assert cached(dense, tmp_path) and cached(sparse, tmp_path) and not (runs / key).exists()


ALGOS = ["fedavg", "fedprox", "sl", "splitfed_v1", "splitfed_v2", "psl", "epsl", "flex_sfl", "super_sfl", "gapsl",
         "fed_pairing", "besplit"]


@pytest.mark.parametrize("algo", [a if a == "gapsl" else pytest.param(a, marks=pytest.mark.slow) for a in ALGOS])
def test_evaluating_fewer_rounds_changes_no_round_s_training_or_evaluation(quick, algo):
    """The premise of a table's schedule and of a tuning trial's ``--eval-rounds``: every
    algorithm's rounds train the same whichever rounds it evaluates, and the rounds it evaluates
    score the same (every column of every round equal, the evaluation's columns NaN where a
    round is not evaluated; wall-clock time aside)."""
    import raysfl

    kw = dict(algo=algo, rounds=4, model="cnn", lr=0.05, checkpoint_every=0, clients=8 if algo == "flex_sfl" else 4)
    every = raysfl.run(quick(**kw)).metrics
    some = raysfl.run(quick(**kw, eval_rounds="2")).metrics
    assert [r["round"] for r in some if math.isfinite(r["test_accuracy"])] == [2, 4]
    skipped = 0
    for a, b in zip(every, some):
        for k, va in a.items():
            vb = b[k]
            if k.startswith("wall_time"):
                continue
            if isinstance(vb, float) and math.isnan(vb) and not (isinstance(va, float) and math.isnan(va)):
                skipped += a["round"] in (1, 3)  # not evaluated there: NaN
                assert a["round"] in (1, 3), (k, a["round"])
                continue
            same = va == vb or (isinstance(va, float) and math.isnan(va) and math.isnan(vb))
            assert same, (algo, a["round"], k, va, vb)
    assert skipped >= 4  # test accuracy and loss, rounds 1 and 3, at least
