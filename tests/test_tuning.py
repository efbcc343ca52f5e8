"""Tuning (``raysfl tune``, ``raysfl reproduce``'s tuning): runs that read a validation split held
out of the training data and never the test split, tuning seeds apart from the evaluation
seeds, the declared grids, Tune's successive halving one bracket per row, and a search that
finds the better learning rate."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raysfl.errors import ConfigError
from raysfl.tuning import grid as grids
from raysfl.tuning.rules import check_reads_validation, check_seeds_apart

ROOT = Path(__file__).resolve().parents[1]


def test_the_validation_split_is_held_out_of_the_training_split_and_takes_the_test_split_s_place():
    from raysfl.data import load_dataset
    from raysfl.data.arrays import with_validation

    ds = load_dataset("digits")
    val = with_validation(ds, 0.2)
    assert val.num_train + val.num_test == ds.num_train  # every sample of it came from the training split
    assert val.num_test == int(np.ceil(0.2 * ds.num_train))
    train_rows = {r.tobytes() for r in val.x_train.reshape(val.num_train, -1)}
    held = [r.tobytes() for r in val.x_test.reshape(val.num_test, -1)]
    original = {r.tobytes() for r in ds.x_train.reshape(ds.num_train, -1)}
    assert all(h in original for h in held)
    assert len(set(held) & train_rows) <= len([h for h in held if held.count(h) > 1]) + 5  # digits repeats a few
    assert not any(np.shares_memory(val.x_test, a) for a in (ds.x_test, ds.y_test))
    counts = np.bincount(val.y_test, minlength=10)
    assert counts.min() >= 0.8 * counts.max()  # stratified
    again = with_validation(ds, 0.2)
    assert np.array_equal(again.y_test, val.y_test)  # fixed, whatever the run's seed
    assert with_validation(ds, 0.0) is ds


def test_validation_outside_its_range_is_refused_in_one_line():
    import raysfl
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"validation must be a share of the training split in \[0, 0.5\]"):
        validate(raysfl.config_from_kwargs(validation=0.9))


@pytest.mark.usefixtures("ray_session")
def test_a_run_with_a_validation_split_never_reads_the_test_split(tmp_path):
    """Data whose test labels are all wrong (each digit labelled as the next): a run that reads
    the test split scores near zero; the same run with a validation split scores as it learned."""
    import raysfl
    from raysfl.data import load_dataset

    ds = load_dataset("digits")
    data = raysfl.custom_dataset(ds.x_train, ds.y_train, ds.x_test, (ds.y_test + 1) % 10, name="wrongtest",
                                 mean=ds.mean, std=ds.std, scale=ds.scale)
    base = dict(algo="splitfed_v2", clients=4, rounds=4, local_epochs=1.0, lr=0.05, out=str(tmp_path),
                progress=False, checkpoint_every=0, resources={"client_actors": 2})
    on_test = raysfl.run(raysfl.config_from_kwargs(**base), data=data).final["test_accuracy"]
    on_val = raysfl.run(raysfl.config_from_kwargs(**base, validation=0.2), data=data).final["test_accuracy"]
    assert on_val > 0.6 and on_test < 0.2, (on_val, on_test)


def test_tuning_refuses_a_run_that_would_read_the_test_split_and_seeds_it_is_judged_on():
    import raysfl
    from raysfl.resolve import validate
    from raysfl.paper_tables import Metric
    from raysfl.tuning.search import tune_rows

    cfg = validate(raysfl.config_from_kwargs(algo="psl", seed=1000))
    with pytest.raises(ConfigError, match=r"^row 'PSL': tuning reads a validation split held out of the training "
                                          r"data, but this run has validation 0 and would read the test split"):
        tune_rows({"PSL": [cfg]}, {"PSL": {"lr": (0.1,)}}, {"PSL": Metric()})  # before Ray or anything runs
    check_reads_validation(validate(raysfl.config_from_kwargs(validation=0.2)))
    with pytest.raises(ConfigError, match=r"share seed\(s\) 1001 with the evaluation seeds"):
        check_seeds_apart([1000, 1001], [0, 1, 1001])
    check_seeds_apart([1000, 1001], [0, 1, 2, 3, 4])


def test_a_table_whose_tuning_would_read_the_test_split_is_refused_before_any_run():
    from dataclasses import replace

    from raysfl.algorithms.gapsl.tables import MAIN
    from raysfl.reproduce.engine import tuning_configs

    rows = tuning_configs(MAIN, "small")
    assert all(c.validation == 0.2 and c.seed >= 1000 for cfgs in rows.values() for c in cfgs)
    assert {c.seed for c in rows["GAPSL"]} == {1000, 1001}
    broken = replace(MAIN, tuning=replace(MAIN.tuning, validation=0.0))
    with pytest.raises(ConfigError, match=r"row 'GAPSL': tuning reads a validation split"):
        tuning_configs(broken, "small")


def test_reproduce_refuses_evaluation_seeds_that_are_tuning_seeds_in_one_line():
    out = subprocess.run([sys.executable, "-m", "raysfl", "reproduce", "gapsl", "--table", "main", "--seeds",
                          "0,1000"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "tuning seeds 1000, 1001 share seed(s) 1000 with the evaluation seeds" in out.stderr


def test_tune_refuses_a_column_its_runs_do_not_write_in_one_line():
    """(The algorithm's columns are declared on its roles, which import torch: this refusal is
    not among the instant ones of tests/test_startup_imports.py.)"""
    out = subprocess.run([sys.executable, "-m", "raysfl", "tune", "--grid", "lr=0.1", "--column", "nope"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--column nope: a splitfed_v1 run with these settings does not write it; it writes: test_accuracy" in out.stderr


def test_grids_parse_order_widen_and_span():
    assert grids.parse_values("lr", "0.1,0.01") == (0.1, 0.01)
    assert grids.parse_values("lr", "log:0.001:0.1:3") == pytest.approx((0.001, 0.01, 0.1))
    with pytest.raises(ConfigError, match="--grid lr=0.1,x: allowed"):
        grids.parse_values("lr", "0.1,x")
    assert grids.parse_grid(["lr=0.1,0.01", "momentum=0,0.9"]) == {"lr": (0.1, 0.01), "momentum": (0.0, 0.9)}
    with pytest.raises(ConfigError, match="names 'lr' twice"):
        grids.parse_grid(["lr=0.1", "lr=0.2"])
    assert grids.order((0.1, 0.01, 0.05), 0.05) == (0.05, 0.1, 0.01)
    assert grids.widened("lr", (0.01, 0.1), 0.1) == pytest.approx(1.0)
    assert grids.widened("lr", (0.01, 0.1), 0.01) == pytest.approx(0.001)
    assert grids.widened("lr", (0.01, 0.03, 0.1), 0.03) is None and grids.widened("momentum", (0, 0.9), 0.9) is None
    grids.check_span("lr", (0.005, 0.00158, 0.0005, 0.0158))
    with pytest.raises(ConfigError, match="at least 4 positive values over at least 1.5 decades"):
        grids.check_span("lr", (0.01, 0.02, 0.03, 0.05))


def test_successive_halving_s_first_rung_is_a_ninth_of_the_rounds_and_not_before_round_3():
    from raysfl.tuning.rules import grace

    assert [grace(r) for r in (1, 3, 5, 6, 20, 30, 40, 50)] == [1, 1, 2, 3, 3, 3, 4, 5]


def test_a_trial_evaluates_the_rounds_before_each_of_tune_s_rungs_and_no_other():
    """The rungs are Tune's own ASHA milestones (and the last round); a trial judged by the mean
    of the last k evaluations evaluates the k rounds up to each, one judged by the final value
    the rung itself, one that reads the whole run every round."""
    from ray.tune.schedulers import AsyncHyperBandScheduler

    from raysfl.config import round_set
    from raysfl.paper_tables import Metric
    from raysfl.tuning.rules import REDUCTION, grace, rounds_read, rungs

    for rounds in range(2, 130):
        asha = AsyncHyperBandScheduler(time_attr="training_iteration", max_t=rounds, grace_period=grace(rounds),
                                       reduction_factor=REDUCTION)
        milestones = {int(m) for m, _ in asha._brackets[0]._rungs}
        assert rungs(rounds) == sorted(milestones | {rounds}), rounds
    assert rounds_read(Metric("mean_last", k=5), 50) == "1-5,11-15,41-45,46-50"
    assert round_set(rounds_read(Metric("mean_last", k=5), 50)) == {*range(1, 6), *range(11, 16), *range(41, 51)}
    assert rounds_read(Metric("final"), 50) == "5,15,45,50"
    assert rounds_read(Metric("mean_last", k=5), 50, halving=False) == "46-50"  # a widening: the end alone
    assert rounds_read(Metric("best"), 50) == rounds_read(Metric("rounds_to", target=0.9), 50) == ""


@pytest.mark.usefixtures("ray_session")
def test_a_run_evaluates_only_the_rounds_eval_rounds_names_and_the_last_with_the_same_scores(tmp_path):
    """``--eval-rounds``: the rounds named and the last are evaluated, the others not, and the
    scores of the rounds evaluated are those of a run evaluated every round (evaluation does not
    touch training), where every client keeps a model of its own."""
    import math

    import raysfl

    base = dict(algo="psl", clients=4, rounds=5, local_steps=2, batch_size=16, lr=0.05, out=str(tmp_path),
                progress=False, checkpoint_every=0, resources={"client_actors": 2})
    every = raysfl.run(raysfl.config_from_kwargs(**base)).metrics
    some = raysfl.run(raysfl.config_from_kwargs(**base, eval_rounds="1-2,4")).metrics
    assert [r["round"] for r in some if math.isfinite(r["test_accuracy"])] == [1, 2, 4, 5]
    for a, b in zip(every, some):
        assert a["train_loss"] == b["train_loss"], a["round"]
        if math.isfinite(b["test_accuracy"]):
            assert (a["test_accuracy"], a["test_loss"]) == (b["test_accuracy"], b["test_loss"]), a["round"]


@pytest.mark.parametrize("kwargs, says", [
    ({"eval_rounds": "5-3"}, "eval-rounds: '5-3': rounds count from 1, and a range goes up"),
    ({"eval_rounds": "1,x"}, "eval-rounds: 'x' is not a round or a range of rounds"),
    ({"eval_rounds": "0"}, "eval-rounds: '0': rounds count from 1"),
    ({"eval_rounds": "1-3", "eval_every": 2}, "give eval-every (2) or eval-rounds ('1-3'), not both"),
])
def test_eval_rounds_that_name_no_rounds_or_come_with_eval_every_are_refused_in_one_line(kwargs, says):
    import raysfl
    from raysfl.resolve import validate

    with pytest.raises(ConfigError) as e:
        validate(raysfl.config_from_kwargs(**kwargs))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_knob_a_row_does_not_read_is_left_out_of_its_grid():
    import raysfl
    from raysfl.resolve import validate
    from raysfl.tuning.search import row_grid

    grid = {"lr": (0.1, 0.01), "server_lr": (0.1, 0.01)}
    fedavg = validate(raysfl.config_from_kwargs(algo="fedavg", lr=0.01))
    psl = validate(raysfl.config_from_kwargs(algo="psl", lr=0.01, server_lr=0.1))
    assert row_grid(fedavg, grid) == {"lr": (0.01, 0.1)}  # FedAvg has no server; its own lr first
    assert row_grid(psl, grid) == {"lr": (0.01, 0.1), "server_lr": (0.1, 0.01)}


def test_a_table_of_your_own_with_a_narrow_grid_is_refused_in_one_line_before_anything_runs():
    """The grid rule holds for any table ``raysfl reproduce`` tunes, not only the declared ones
    (a test of those alone left a table of yours free to tune over a hair's width)."""
    from raysfl.paper_tables import Claim, Metric, Row, Table, Tuning
    from raysfl.reproduce.engine import check_grids

    def table(factors):
        return Table(paper="mine", name="narrow", title="t", source="nowhere", reference=Row("ref", {"algo": "psl"}),
                     rows=(Row("SL", {"algo": "sl"}),), metric=Metric("final"), claim=Claim("ref wins"),
                     scales={"small": {"dataset": "digits", "rounds": 2}, "paper": {"dataset": "cifar10", "rounds": 100}},
                     tuning=Tuning(factors={"lr": factors}))

    wide = table((1.0, 0.316, 0.1, 0.0316))
    check_grids(wide, "small")
    narrow = table((1.0, 0.5, 0.25, 0.125))  # 0.9 decades
    with pytest.raises(ConfigError, match=r"^mine/narrow, row 'ref': the lr grid \[.*\] must hold at least 4 "
                                          r"positive values over at least 1.5 decades$"):
        check_grids(narrow, "small")


def test_every_declared_table_tunes_each_row_on_the_same_grid_of_at_least_4_values_over_1_5_decades():
    """The grid holds the paper's own lr at both scales (SuperSFL's paper names none)."""
    from raysfl.reproduce import papers, tables_of
    from raysfl.reproduce.fairness import resolve

    tuned = 0
    for paper in papers():
        for t in tables_of(paper):
            if t.tuning is None:
                assert t.untuned
                continue
            tuned += 1
            paper_lr = resolve(t, t.reference, "paper", 0).lr
            for scale in ("small", "paper"):
                cfg = resolve(t, t.reference, scale, 0)
                g = t.tuning.grid(cfg)
                for knob in ("lr", "server_lr"):
                    if knob in g:
                        grids.check_span(knob, g[knob])
                if paper != "super_sfl":
                    assert paper_lr in g["lr"], (paper, t.name, scale, g["lr"])
                for row in t.rows:  # every row the same factors of the same shared value
                    assert t.tuning.grid(resolve(t, row, scale, 0))["lr"] == g["lr"]
    assert tuned >= 15


class _Trial:
    def __init__(self, tid, row):
        self.trial_id, self.config = tid, {"trial": {"row": row, "knobs": {}}}


def test_successive_halving_runs_one_bracket_per_row():
    """A row's settings compete only with each other: a slow row's first setting is not stopped
    because another row scored higher at the same rung."""
    from ray.tune.schedulers import TrialScheduler

    from raysfl.tuning.schedulers import GroupedASHA

    s = GroupedASHA(group="row", time_attr="training_iteration", max_t=9, grace_period=1, reduction_factor=3)
    s.set_search_properties("score", "max")
    fast = [_Trial(f"f{i}", "fast") for i in range(3)]
    slow = _Trial("s0", "slow")
    for t in [*fast, slow]:
        s.on_trial_add(None, t)
    for t, score in zip(fast, (0.9, 0.8, 0.85)):
        s.on_trial_result(None, t, {"training_iteration": 1, "score": score})
    assert s.on_trial_result(None, slow, {"training_iteration": 1, "score": 0.2}) == TrialScheduler.CONTINUE
    late = _Trial("f3", "fast")
    s.on_trial_add(None, late)
    assert s.on_trial_result(None, late, {"training_iteration": 1, "score": 0.3}) == TrialScheduler.STOP


def test_raysfl_tune_finds_the_better_learning_rate_and_saves_it(tmp_path):
    """A tiny grid on a few rounds: lr 0.1 learns digits, 3e-4 barely moves, 1000 diverges; tune
    says so, on the validation split (the first rung at round 3: after one round both may sit
    at chance), and writes the best as a config file that runs on the test split. A diverged
    trial says so, not its stand-in worst score."""
    out = subprocess.run([sys.executable, "-m", "raysfl", "tune", "--algo", "splitfed_v2", "--clients", "4",
                          "--rounds", "6", "--local-steps", "3", "--batch-size", "16", "--grid", "lr=0.0003,0.1,1000",
                          "--seeds", "1", "--out", str(tmp_path), "--name", "t"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "best: lr 0.1 (" in out.stdout and "on the validation split (0.2 of the training data)" in out.stdout
    saved = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert saved["chosen"] == {"lr": 0.1} and saved["split"] == "validation" and saved["seeds"] == [1000]
    scores = {t["knobs"]["lr"]: t["score"] for t in saved["table"]}
    assert scores[0.1] > scores[0.0003] + 0.1
    assert "Failed to fetch metrics" not in out.stderr  # Tune's ResultGrid, without its loggers' files
    assert "| 1000 | 1 | diverged |" in out.stdout and "lr 1000: diverged in round 1" in out.stdout + out.stderr
    best = json.loads((tmp_path / "t" / "best.json").read_text())
    assert best["lr"] == 0.1 and best["validation"] == 0.0 and best["seed"] == 0


_AFTER_RUNS = """
import raysfl
from raysfl.paper_tables import Metric
from raysfl.resolve import validate
from raysfl.runtime.many_runs import start_local_ray
from raysfl.tuning.search import tune_rows

cfg = validate(raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=2, local_steps=2, batch_size=16,
                                         validation=0.2, seed=1000, progress=False, checkpoint_every=0, out={out!r}))
start_local_ray([cfg], 1)
raysfl.run(cfg)  # its actors wait in this process's pool, holding their CPUs
res = tune_rows({{"r": [cfg]}}, {{"r": {{"lr": (0.05, 0.01)}}}}, {{"r": Metric()}}, say=lambda _: None)
print("chosen", res["r"].chosen)
"""


@pytest.mark.slow
def test_tuning_after_runs_in_the_same_process_does_not_wait_for_their_idle_actors(tmp_path):
    """``raysfl reproduce gapsl`` runs a table's runs, then tunes the next table in the same
    process: the trials must not wait for CPUs that the first table's idle actors hold."""
    out = subprocess.run([sys.executable, "-c", _AFTER_RUNS.format(out=str(tmp_path))], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0 and "chosen {'lr':" in out.stdout, out.stderr[-2000:]


_JOURNAL = """
import json, sys
from pathlib import Path
import raysfl
from raysfl.paper_tables import Metric
from raysfl.resolve import validate
from raysfl.tuning.search import tune_rows

cache = Path(sys.argv[1])
cfg = validate(raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=4, local_steps=2, batch_size=16,
                                         validation=0.2, seed=1000, progress=False, checkpoint_every=0,
                                         out=str(cache / "runs")))
out = []
for attempt in range(3):
    lines = []
    res = tune_rows({"r": [cfg]}, {"r": {"lr": (0.1, 0.0003)}}, {"r": Metric()}, cache=cache, say=lines.append)["r"]
    for f in cache.glob("tune-*.json"):
        f.unlink()  # the row's result forgotten, as if the search had been stopped before its end
    journals = sorted(cache.glob("trials-*/*.json"), key=lambda p: -len(json.loads(p.read_text())["reports"]))
    if attempt == 0:  # cut the longest journal back to its first round: a trial interrupted after it
        data = json.loads(journals[0].read_text())
        cut = {"knobs": data["knobs"], "kept": 1, "had": len(data["reports"])}
        journals[0].write_text(json.dumps({**data, "reports": data["reports"][:1]}))
    out.append({"chosen": res.chosen, "table": [[t["knobs"], t["rounds"], t["score"]] for t in res.table],
                "lines": [ln for ln in lines if ln.startswith("  tune ")], "journals": len(journals),
                "seconds": res.seconds})
print(json.dumps({"runs": out, "cut": cut}))
"""


@pytest.mark.slow  # three small searches (~1.5 minutes here)
def test_a_search_started_again_reads_its_trials_rounds_back_and_runs_only_what_is_past_them(tmp_path):
    """Each trial keeps a journal of its rounds in the cache. A search started again (the row's
    result gone, as after an interrupt) reads every journaled round back; a trial whose journal
    was cut after round 1 runs again from round 1, catches up silently, and reports the same
    scores as the first search did."""
    proc = subprocess.run([sys.executable, "-c", _JOURNAL, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    first, second, third = res["runs"]
    assert first["journals"] >= 2 and res["cut"]["had"] > 1  # a trial per setting (and the widened one's)
    assert not any("(read back)" in ln for ln in first["lines"])
    cut = json.dumps(res["cut"]["knobs"], sort_keys=True)
    for t in second["lines"]:  # the untouched trial read back, the cut one run on from where its journal ended
        assert ("(read back)" in t) != (f"lr {res['cut']['knobs']['lr']:g}:" in t), (t, cut)
    assert second["table"] == first["table"] and second["chosen"] == first["chosen"]  # the same rounds, the same scores
    assert all("(read back)" in t for t in third["lines"]) and third["table"] == first["table"]
    # each search started again counts the seconds of those before it (the table's "tuning N s")
    assert first["seconds"] < second["seconds"] < third["seconds"]


def test_a_search_s_seconds_carry_over_the_invocations_that_ran_it_counted_once_per_search(tmp_path):
    """A search stopped and started again counts the time it had spent (kept beside its rows'
    trials); rows searched together share the largest count they had, so a table's sum of its
    searches' seconds counts each once."""
    from raysfl.tuning.search import SearchClock

    a, b = tmp_path / "trials-a", tmp_path / "trials-b"
    a.mkdir()
    (a / SearchClock.NAME).write_text("100.0\n")  # row a was searched for 100 s before; row b never
    clock = SearchClock({"a": a, "b": b})
    assert 100.0 <= clock.seconds() < 130.0
    clock.keep()
    kept = [float((d / SearchClock.NAME).read_text()) for d in (a, b)]
    assert kept[0] == kept[1] >= 100.0
    assert SearchClock({"b": b}).seconds() >= kept[1]  # read back by the next invocation
    assert clock.whole and SearchClock({"a": a, "b": b}).whole
    (b / SearchClock.NAME).write_text("not a number")
    assert SearchClock({"b": b}).seconds() < 30.0  # unreadable: counted from here, not an error
    assert SearchClock({}).seconds() < 30.0 and SearchClock({}).whole  # no cache: this invocation alone
    # a search whose trials a version without the count journaled: counted from here, as a part,
    # and still a part for the invocations after
    c = tmp_path / "trials-c"
    c.mkdir()
    (c / "0123456789abcdef.json").write_text("{}")
    begun = SearchClock({"c": c})
    assert not begun.whole and begun.seconds() < 30.0
    begun.keep()
    assert (c / SearchClock.NAME).read_text().split()[1] == "part"
    assert not SearchClock({"c": c}).whole and not SearchClock({"a": a, "c": c}).whole



@pytest.mark.slow  # three small trials, in this process (~30 s)
@pytest.mark.usefixtures("ray_session")
def test_a_trial_cut_off_goes_on_from_its_runs_checkpoints_with_the_scores_of_an_uninterrupted_one(tmp_path,
                                                                                                   capsys):
    """A trial with a cache keeps its seeds' runs beside its journal, checkpointed. Cut off after
    round 3 of 4 (its runs stopped, nothing cleaned up, as when its process is killed), the trial
    started again reads rounds 1-3 back, resumes its runs from their round-3 checkpoints for
    round 4, and reports what an uninterrupted trial reports; its runs' directory goes when it
    ends."""
    import raysfl
    from raysfl.paper_tables import Metric
    from raysfl.resolve import validate
    from raysfl.tuning.search import in_trial
    from raysfl.tuning.trial import TrialRuns, journal_path

    cfgs = [in_trial(validate(raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=4, local_steps=2,
                                                        batch_size=16, validation=0.2, seed=s, progress=False,
                                                        resources={"client_actors": 2}))) for s in (1000, 1001)]
    config = {"trial": {"row": "r", "knobs": {"lr": 0.05}}}

    def trial(cache):
        t = object.__new__(TrialRuns)  # the Trainable without Tune around it
        t.setup(config, configs={"r": cfgs}, metrics={"r": Metric("mean_last", k=2)},
                journals={"r": str(cache / "trials-r")})
        return t

    whole = trial(tmp_path / "a")
    reports = [whole.step() for _ in range(4)]
    whole._end()
    cut = trial(tmp_path / "b")
    [cut.step() for _ in range(3)]
    for r in cut.runs:
        r.stop()  # killed: no clean-up
    runs = journal_path({"r": str(tmp_path / "b" / "trials-r")}, "r", {"lr": 0.05}).with_name(
        journal_path({"r": "x"}, "r", {"lr": 0.05}).stem + "-runs")
    assert sorted(p.name for p in runs.iterdir()) == ["seed1000", "seed1001"]
    # a copy whose seed-1001 run directory is damaged: that seed runs again from round 1, said
    # in one line, and the trial still reports what the uninterrupted one does
    shutil.copytree(tmp_path / "b", tmp_path / "c")
    (tmp_path / "c" / runs.relative_to(tmp_path / "b") / "seed1001" / "config.json").write_text("{damaged")
    capsys.readouterr()
    damaged = trial(tmp_path / "c")
    steps = [damaged.step() for _ in range(4)]
    said = capsys.readouterr().err
    assert "raysfl tune: cannot go on from" in said and "its config.json is unreadable" in said
    assert [bool(r.cfg.resume) for r in damaged.runs] == [True, False]
    keys = ("score", "round", "values", "done")
    assert [{k: s[k] for k in keys} for s in steps] == [{k: r[k] for k in keys} for r in reports]
    damaged._end()
    again = trial(tmp_path / "b")
    steps = [again.step() for _ in range(4)]
    assert [s.get("read_back", False) for s in steps] == [True, True, True, False]
    assert all(r.cfg.resume for r in again.runs)  # from the checkpoints, not from round 1
    assert [{k: s[k] for k in keys} for s in steps] == [{k: r[k] for k in keys} for r in reports]
    again._end()
    assert not runs.exists()


def test_a_table_says_at_least_where_a_search_was_saved_before_its_seconds_carried_over():
    """A tuning a version before the search's clock saved counts only the invocation that
    finished it: the table's cost line says "at least" then, and not for tunings counted whole."""
    from raysfl.reproduce.command import first_cost
    from raysfl.tuning.search import TuneResult

    whole = TuneResult("a", {"lr": 0.1}, {"lr": [0.1]}, 1, seconds=100.0, seconds_whole=True)
    older = TuneResult("b", {"lr": 0.1}, {"lr": [0.1]}, 1, seconds=40.0)
    runs = {"a": [[{"wall_time_s": 2.0}, {"wall_time_s": 3.0}]]}
    assert first_cost({"a": whole}, runs) == "; where run: tuning 100 s, rounds 5 s one after the other"
    said = first_cost({"a": whole, "b": older}, runs)
    assert said.startswith("; where run: tuning at least 140 s (part of a search begun by a version before 2026-11-29")
    assert said.endswith(", rounds 5 s one after the other")
    assert TuneResult(**{k: v for k, v in older.to_dict().items() if k != "seconds_whole"}).seconds_whole is False


def test_a_trial_s_run_evaluates_each_round_before_the_next_starts(quick):
    """A trial's rows pace the search (SteppedRun waits in the callback): with the evaluation
    overlapping the next round (--eval-overlap), round 1's row would come only once round 2 had
    trained, and a trial stopped there would have trained a round for nothing."""
    from raysfl.tuning.trial import SteppedRun

    run = SteppedRun(quick(algo="fedavg", rounds=3, resources={"client_actors": 2, "eval_overlap": "on"}))
    try:
        row = run.next_row()
        assert row["round"] == 1 and row["test_accuracy"] == row["test_accuracy"]  # evaluated
        assert run.cfg.resources.eval_overlap == "off"
    finally:
        run.stop()
    assert run.rows.get(timeout=60) is None  # the run ended at the stop, after round 1
