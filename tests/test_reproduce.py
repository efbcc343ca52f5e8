"""``raysfl reproduce``: a table's rows are resolved and checked to change one thing before any
run; the engine caches by resolved config; the report's verdict follows the declared criterion
on paired seeds; docs/results.md is written from the tables."""

from __future__ import annotations

import json
import math
import re

import pytest

from raysfl.errors import ConfigError
from raysfl.reproduce import papers, tables_of
from raysfl.reproduce.fairness import ConfoundedRow, check_table, describe
from raysfl.reproduce.report import RowResult, row_results, verdict
from raysfl.paper_tables import Claim, Metric, Row, Table

SMALL = {"small": {"dataset": "digits", "rounds": 2, "clients": 4, "batch_size": 16, "local_steps": 2},
         "paper": {"dataset": "cifar10", "rounds": 100}}
SHARED = {"partition": "dirichlet", "alpha": 0.5, "lr": 0.005, "server_lr": 0.01, "momentum": 0.9, "cut": 1}


def table(rows, shared=SHARED, reference=Row("GAPSL", {"algo": "gapsl"}), claim=None) -> Table:
    return Table(paper="test", name="t", title="t", source="nowhere", reference=reference, rows=tuple(rows),
                 metric=Metric("final"), claim=claim or Claim("the reference wins"), shared=shared, scales=SMALL)


def test_a_row_that_differs_in_an_undeclared_setting_is_refused():
    """PSL's own lr (raysfl's 0.05) against GAPSL's paper lr (0.005): a confound, named."""
    t = table([Row("PSL", {"algo": "psl", "psl": {"server_reduction": "sum", "round_steps": "equal"}})],
              shared={k: v for k, v in SHARED.items() if k != "lr"})
    with pytest.raises(ConfoundedRow, match=r"row 'PSL' differs from its reference in what it does not declare "
                                            r"\(lr: 0.005 in 'GAPSL', 0.05 here"):
        check_table(t, "small")


def test_a_row_that_differs_in_an_undeclared_facet_is_refused_and_declaring_it_is_accepted():
    """PSL's published reduction (mean) and steps (each its own epoch) against GAPSL's (sum, equal):
    refused unless the row says it compares them; the diff then names them."""
    plain = Row("PSL", {"algo": "psl"})
    with pytest.raises(ConfoundedRow, match=r"facet.round_steps: 'equal' in 'GAPSL', 'epoch' here"):
        check_table(table([plain]), "small")
    declared = Row("PSL", {"algo": "psl"}, compares=("server_reduction", "round_steps"))
    diffs = check_table(table([declared]), "small")
    # besides each algorithm's own knobs (they come with the algorithm), only what it declares
    assert {k for k in diffs["PSL"] if not k.startswith("algo_params.")} == {
        "algo", "facet.server_reduction", "facet.round_steps"}
    assert describe(diffs["PSL"], declared) == "algo=psl; facet.round_steps=epoch; facet.server_reduction=mean"
    matched = Row("PSL matched", {"algo": "psl", "psl": {"server_reduction": "sum", "round_steps": "equal"}})
    assert describe(check_table(table([matched]), "small")["PSL matched"], matched) == "algo=psl; server_reduction=sum"


def test_a_row_changing_a_shared_setting_must_declare_it():
    """A row that sets a shared setting declares it by setting it; the user's overrides apply to
    every row alike and are no confound."""
    t = table([Row("GAPSL, lr 0.01", {"lr": 0.01})])
    assert check_table(t, "small")["GAPSL, lr 0.01"] == {"lr": (0.005, 0.01)}
    assert check_table(t, "small", overrides={"rounds": 3, "dataset": "mnist5k"})["GAPSL, lr 0.01"] == {
        "lr": (0.005, 0.01)}


def test_every_declared_paper_table_is_fair_at_both_scales():
    """The tables the papers' packages declare pass their own fairness check (paper scale
    resolves without its data: nothing is loaded)."""
    n = 0
    for paper in papers():
        for t in tables_of(paper):
            for scale in ("small", "paper"):
                check_table(t, scale)
            n += 1
    assert n >= 3


def test_an_invalid_row_names_its_table_and_row():
    with pytest.raises(ConfigError, match=r"test/t, row 'bad': .*k_min"):
        check_table(table([Row("bad", {"gapsl": {"k_min": 2.0}})]), "small")


def _result(label, values, ref):
    return RowResult(label, values, 0, [v - r for v, r in zip(values, ref)], [1.0] * len(values),
                     [1.0] * len(values), None, "")


@pytest.mark.parametrize("ref,other,seeds,expected", [
    ([0.90, 0.91, 0.92, 0.90, 0.93], [0.80, 0.82, 0.81, 0.80, 0.83], 5, "reproduced"),
    ([0.80, 0.82, 0.81, 0.80, 0.83], [0.90, 0.91, 0.92, 0.90, 0.93], 5, "contradicted"),
    ([0.90, 0.80, 0.92, 0.80, 0.93], [0.85, 0.85, 0.85, 0.85, 0.86], 5, "not shown"),
    ([0.90, 0.91], [0.80, 0.82], 2, "too few seeds"),
])
def test_the_verdict_follows_the_criterion_on_paired_seeds(ref, other, seeds, expected):
    t = table([Row("PSL", {"algo": "psl"}, compares=("server_reduction", "round_steps"))])
    results = [_result("GAPSL", ref, ref), _result("PSL", other, ref)]
    assert verdict(t, results, seeds)[0].startswith(expected)


def test_rounds_to_target_counts_a_run_that_never_reaches_it_as_censored():
    m = Metric("rounds_to", target=0.5)
    rows = [{"round": r, "test_accuracy": a, "sim_time_total_s": r * 2.0} for r, a in [(1, 0.1), (2, 0.6), (3, 0.7)]]
    assert m.value(rows) == (2.0, False)
    assert m.value(rows[:1]) == (1.0, True)
    assert not m.higher_is_better
    assert math.isclose(Metric("mean_last", k=2).value(rows)[0], 0.65)


def test_bytes_to_target_sums_what_was_sent_up_and_down_until_the_target_round():
    """Table I of SuperSFL: megabytes sent before the target accuracy (an unevaluated round's
    bytes count too)."""
    m = Metric("bytes_to", target=0.6)
    rows = [{"round": 1, "test_accuracy": 0.1, "bytes_up": 1e6, "bytes_down": 2e6},
            {"round": 2, "test_accuracy": math.nan, "bytes_up": 1e6, "bytes_down": 0.0},
            {"round": 3, "test_accuracy": 0.65, "bytes_up": 0.5e6, "bytes_down": 0.5e6},
            {"round": 4, "test_accuracy": 0.9, "bytes_up": 9e6, "bytes_down": 9e6}]
    assert m.value(rows) == (5.0, False)
    assert m.value(rows[:2]) == (4.0, True)  # never reached: everything sent, flagged
    assert not m.higher_is_better and m.label == "MB sent (up + down) to test_accuracy 0.6"


@pytest.mark.usefixtures("ray_session")
def test_a_table_runs_once_writes_its_diffs_and_reads_its_runs_back_from_the_cache(tmp_path):
    from raysfl.reproduce.command import run_one, write_results
    from raysfl.reproduce.engine import plan

    t = table([Row("GAPSL, Non-GDA", {"gapsl": {"gda": "none"}})], claim=Claim("GDA helps"))
    planned = plan(t, "small", [0, 1])
    md = run_one(planned, tmp_path / "cache", tmp_path / "out", 1, "raysfl reproduce test --seeds 2")
    text = md.read_text()
    assert "| GAPSL, Non-GDA | " in text and "| gda=none |" in text and "| reference |" in text
    assert "too few seeds (2 < 5)" in text
    import pyarrow.parquet as pq

    rows = pq.read_table(md.parent / "table.parquet").to_pylist()
    assert {(r["row"], r["seed"]) for r in rows} == {(lab, s) for lab in ("GAPSL", "GAPSL, Non-GDA") for s in (0, 1)}
    ref = {r["seed"]: r["value"] for r in rows if r["reference"]}
    for r in rows:
        assert math.isclose(r["paired_difference"], r["value"] - ref[r["seed"]])
    said = []
    from raysfl.reproduce.engine import run_planned

    again = run_planned(plan(t, "small", [0, 1]), tmp_path / "cache", say=said.append)
    assert said == ["reproduce test/t: 4 runs (4 cached), 1 at a time"]  # nothing ran again
    assert len(again["GAPSL"]) == 2
    results = tmp_path / "results.md"
    (tmp_path / "out" / "gapsl").mkdir()
    (md.parent).rename(tmp_path / "out" / "gapsl" / "main")  # stands in for GAPSL's main table
    write_results(tmp_path / "out", results)
    text = results.read_text()
    assert "GAPSL, Non-GDA" in text and "no number here is copied by hand" in text
    assert "Not run at this version. Command: `raysfl reproduce gapsl --table ablations --seeds 5`" in text


def test_row_results_pair_by_seed():
    t = table([Row("B", {"lr": 0.01})])
    runs = {"GAPSL": [[{"round": 1, "test_accuracy": 0.5, "sim_time_total_s": 1.0}]] * 2,
            "B": [[{"round": 1, "test_accuracy": 0.7, "sim_time_total_s": 2.0}],
                  [{"round": 1, "test_accuracy": 0.4, "sim_time_total_s": 2.0}]]}
    res = {r.label: r for r in row_results(t, [0, 1], runs, {"B": {"lr": (0.005, 0.01)}})}
    assert res["B"].diffs == pytest.approx([0.2, -0.1]) and res["B"].config_diff == "lr=0.01"


def test_docs_results_md_is_what_the_committed_tables_give(tmp_path):
    """docs/results.md is generated, never edited: rewriting it from docs/results/reproduce must
    change nothing (a table committed without ``--results`` would leave it stale)."""
    from pathlib import Path

    from raysfl.reproduce.command import write_results

    docs = Path(__file__).resolve().parents[1] / "docs"
    fresh = tmp_path / "results.md"
    write_results(docs / "results" / "reproduce", fresh)
    assert fresh.read_text() == (docs / "results.md").read_text(), (
        "docs/results.md is stale: rewrite it with `raysfl reproduce ... --out docs/results/reproduce "
        "--results docs/results.md`")


def test_a_row_that_names_a_column_is_read_there_and_paired_with_the_reference():
    """BESplit-A is another column of BESplit's run: the reference reads ``acc_aux_local``,
    the baselines the table's column, each the table's way, and the cell says what it reads."""
    t = table([Row("FedAvg", {"algo": "fedavg"})],
              reference=Row("BESplit-A", {"algo": "besplit"}, column="acc_aux_local"))
    clock = {"round": 1, "sim_time_total_s": 1.0}
    runs = {"BESplit-A": [[{**clock, "test_accuracy": 0.2, "acc_aux_local": 0.9}]] * 2,
            "FedAvg": [[{**clock, "test_accuracy": 0.7, "acc_aux_local": 0.1}], [{**clock, "test_accuracy": 0.6}]]}
    res = {r.label: r for r in row_results(t, [0, 1], runs, {"FedAvg": {"algo": ("besplit", "fedavg")}})}
    assert res["BESplit-A"].values == [0.9, 0.9] and res["BESplit-A"].config_diff == "reference; reads acc_aux_local"
    assert res["FedAvg"].values == [0.7, 0.6] and res["FedAvg"].diffs == pytest.approx([-0.2, -0.3])
    assert t.metric_of(t.reference).column == "acc_aux_local" and t.metric_of(t.rows[0]) is t.metric


def test_besplit_a_tables_read_the_auxiliary_models_of_a_run_that_trains_them():
    from raysfl.algorithms.besplit.tables import MAIN, MAIN_A

    assert MAIN_A.reference.column == "acc_aux_local" and MAIN_A.reference.settings["besplit"]["dtd"] is True
    baselines = MAIN.claim.rows
    assert MAIN_A.claim.rows == baselines and len(baselines) == 3
    assert ([r.settings for r in MAIN_A.rows if r.label in baselines]
            == [r.settings for r in MAIN.rows if r.label in baselines])  # the same baseline runs


def test_a_row_reading_a_column_its_run_does_not_write_is_refused_before_any_run():
    """BESplit-A's column without DTD (no auxiliary models) would read NaN for every seed."""
    from raysfl.algorithms.besplit.tables import MAIN_A
    from raysfl.reproduce.engine import plan

    assert plan(MAIN_A, "small", [0]).configs["BESplit-A"][0].algo_params.dtd is True
    broken = Table(**{**MAIN_A.__dict__, "reference": Row("BESplit-A", {"algo": "besplit", "besplit": {"dtd": False}},
                                                            column="acc_aux_local")})
    with pytest.raises(ConfigError, match="reads column 'acc_aux_local', which a besplit run with these settings "
                                          "does not write"):
        plan(broken, "small", [0])


@pytest.mark.slow
@pytest.mark.usefixtures("ray_session")
def test_a_tuned_table_runs_each_row_at_the_values_its_tuning_chose_and_reads_them_back(tmp_path):
    """Tuning first (one tuning seed, the validation split), then the evaluation seeds at each
    row's chosen lr: the diff shows it, table.parquet records it with its grid, and a second run
    reads both the tuning and the runs back from the cache."""
    import pyarrow.parquet as pq

    from raysfl.reproduce.command import run_one
    from raysfl.reproduce.engine import plan
    from raysfl.paper_tables import HALF_DECADES, Tuning

    t = Table(paper="test", name="tuned", title="t", source="nowhere", reference=Row("GAPSL", {"algo": "gapsl"}),
              rows=(Row("PSL", {"algo": "psl", "psl": {"server_reduction": "sum", "round_steps": "equal"}}),),
              metric=Metric("final"), claim=Claim("the reference wins"), shared=SHARED, scales=SMALL,
              tuning=Tuning(factors={"lr": HALF_DECADES}, seeds=1))
    said = []
    md = run_one(plan(t, "small", [0, 1]), tmp_path / "cache", tmp_path / "out", 1, "cmd --seeds 2", tune=True,
                 say=said.append)
    rows = pq.read_table(md.parent / "table.parquet").to_pylist()
    tuned = {r["row"]: json.loads(r["tuned"]) for r in rows}
    assert set(tuned) == {"GAPSL", "PSL"} and all(set(v) == {"lr"} for v in tuned.values())
    assert all(json.loads(r["grid"])["lr"][0] == 0.005 for r in rows)  # the shared lr first, then its multiples
    text = md.read_text()
    assert "Tuning: each row's lr in {0.005, 0.00158, 0.0005, 0.0158}" in text and "tuning seeds 1000" in text
    assert any(s.startswith("tune: 2 row(s), 8 settings on 1 tuning seeds") for s in said)
    assert len(list((tmp_path / "cache").glob("tune-*.json"))) == 2
    first = re.search(r"where run: tuning (\d+) s, rounds (\d+) s one after the other", text)
    assert first and int(first.group(1)) > 0 and int(first.group(2)) > 0
    again = []
    md2 = run_one(plan(t, "small", [0, 1]), tmp_path / "cache", tmp_path / "out2", 1, "cmd --seeds 2", tune=True,
                  say=again.append)
    assert not any(s.startswith("tune:") for s in again)  # read back
    assert "reproduce test/tuned: 4 runs (4 cached), 1 at a time" in again
    # a table read back from the cache still says what it cost where it was run
    assert "0 of 4 run here" in md2.read_text() and first.group(0) in md2.read_text()


@pytest.mark.usefixtures("ray_session")
def test_a_run_that_diverges_is_a_collapsed_result_not_a_failed_table(tmp_path):
    """A row's lr that blows up on one seed must not lose the table: the run's rows up to the
    round its loss went non-finite are kept (and cached), and the guards call it collapsed."""
    import raysfl
    from raysfl.reproduce.engine import run_cached
    from raysfl.reproduce.guards import collapse, diverging
    from raysfl.resolve import validate

    cfg = validate(raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=4, local_steps=3, batch_size=16,
                                             lr=1e30, momentum=0.9, resources={"client_actors": 2}))
    rows = run_cached(cfg, tmp_path)
    assert rows and rows[-1]["train_loss"] == math.inf and len(rows) <= 4
    assert diverging(rows).startswith("non-finite training loss in round") and collapse(rows, "test_accuracy", 10)
    kept = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert kept["diverged_in_round"] == rows[-1]["round"]
    assert run_cached(cfg, tmp_path)[-1]["train_loss"] == math.inf  # read back, not run again


def test_runs_and_tunings_cached_before_issue_46_s_settings_are_found(tmp_path):
    """Issue 46 added settings to every config (schedules, target bins, metrics of your own, warm
    starts). A cache written before them names each run by a hash of a config without them;
    at their defaults those runs are still read back, runs and tunings alike (found missing
    when FLEX-SFL's rounds_to table started a tuning its main table had cached)."""
    import hashlib

    import raysfl
    from raysfl.reproduce.engine import cached, run_cached
    from raysfl.resolve import validate
    from raysfl.run_key import BOOKKEEPING, ISSUE_46_SETTINGS, LATER_SETTINGS, cache_key, cache_keys

    cfg = validate(raysfl.config_from_kwargs(algo="fedavg", clients=4, rounds=2, progress=False))
    old = {k: v for k, v in cfg.to_dict().items()
           if k not in BOOKKEEPING and k != "resources" and k not in ISSUE_46_SETTINGS}
    old = {k: v for k, v in old.items() if not (k in LATER_SETTINGS and v == LATER_SETTINGS[k])}
    before = hashlib.sha256(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:20]
    assert cache_keys(cfg) == [cache_key(cfg), before]
    rows = [{"round": 1, "test_accuracy": 0.5}, {"round": 2, "test_accuracy": 0.75}]
    (tmp_path / f"{before}.json").write_text(json.dumps({"config": old, "metrics": rows}))
    assert cached(cfg, tmp_path) and run_cached(cfg, tmp_path) == rows  # read back, nothing run
    from raysfl.tuning.search import cache_key as row_key
    from raysfl.tuning.search import tune_rows

    tuning = validate(raysfl.config_from_kwargs(algo="fedavg", clients=4, rounds=2, progress=False, validation=0.2,
                                                seed=1000))
    grid, metric = {"lr": (0.1, 0.01)}, Metric()
    older = row_key([tuning], grid, metric, ISSUE_46_SETTINGS)
    assert older != row_key([tuning], grid, metric)
    (tmp_path / f"tune-{older}.json").write_text(json.dumps({"row": "r", "chosen": {"lr": 0.01}, "grid": {"lr": [0.1, 0.01]},
                                                            "trials": 2}))
    res = tune_rows({"r": [tuning]}, {"r": grid}, {"r": metric}, cache=tmp_path, say=lambda _: None)["r"]
    assert res.from_cache and res.chosen == {"lr": 0.01}  # no search started


def test_a_table_s_runs_say_how_long_is_left_at_the_pace_so_far():
    from raysfl.reproduce.engine import left

    assert left([100.0], [], 1, 2) == ", about 3 min left"
    assert left([3600.0], [], 1, 2) == ", about 2.0 h left"
    assert left([50.0], [], 1, 0) == "" and left([], [], 1, 3) == ""
    # two at a time, 14 min a run: when the first of 35 ends, the second has run as long
    assert left([842.0], [842.0], 2, 34) == ", about 3.9 h left"
    # and when the third ends, the fourth is most of the way: the estimate stays steady
    assert left([842.0, 872.0, 748.0], [718.0], 2, 32) == ", about 3.5 h left"
    assert left([60.0], [200.0], 2, 2) == ", about 0 min left"  # a slow run in flight: never negative


@pytest.mark.usefixtures("ray_session")
def test_a_table_s_run_cut_off_goes_on_from_its_last_round_and_gives_the_rows_of_an_uninterrupted_one(tmp_path,
                                                                                                     capsys):
    """A run of a table lives in the cache while it runs, checkpointed every round: cut off after
    round 2 (here: a callback stops it), the next call goes on from round 2, its rows are those of
    an uninterrupted run, and its directory goes once they are kept."""
    import dataclasses

    import raysfl
    from raysfl.reproduce.engine import cached, run_cached
    from raysfl.resolve import validate
    from raysfl.run_key import cache_keys

    cfg = validate(raysfl.config_from_kwargs(algo="psl", clients=4, rounds=4, local_steps=2, batch_size=16, lr=0.05,
                                             resources={"client_actors": 2}))
    whole = run_cached(cfg, tmp_path / "a")
    key = cache_keys(cfg)[0]
    runs = tmp_path / "b" / "runs"
    cut = dataclasses.replace(cfg, progress=False, checkpoint_every=1, keep_checkpoints=1, out=str(runs), name=key)
    raysfl.run(cut, callbacks=[lambda row: row["round"] == 2])
    assert not cached(cfg, tmp_path / "b") and (runs / key / "checkpoints").is_dir()
    capsys.readouterr()
    again = run_cached(cfg, tmp_path / "b")
    assert f"psl, seed 0: going on from round 2 ({runs / key})" in capsys.readouterr().err
    assert [r["round"] for r in again] == [1, 2, 3, 4]
    for a, b in zip(whole, again):
        assert (a["train_loss"], a["test_accuracy"], a["test_loss"]) == (b["train_loss"], b["test_accuracy"],
                                                                         b["test_loss"]), a["round"]
    assert cached(cfg, tmp_path / "b") and not (runs / key).exists()
    assert not (tmp_path / "a" / "runs" / key).exists()


def test_a_damaged_run_directory_is_refused_in_one_line_so_that_the_run_starts_again(tmp_path):
    """``api.resume_point``, which a table's runs and tuning trials go on from: no checkpoint, no
    resume point; every round checkpointed, the rows and nothing to resume; a damaged
    metrics.parquet or config.json, a ConfigError naming the file (the caller then runs it again
    from round 1)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raysfl.api import resume_point
    from raysfl.errors import ConfigError

    d = tmp_path / "run"
    (d / "checkpoints").mkdir(parents=True)
    (d / "config.json").write_text("{not json")
    assert resume_point(d, 4) is None
    (d / "checkpoints" / "round_0002.pt").write_bytes(b"")
    pq.write_table(pa.Table.from_pylist([{"round": 1, "train_loss": 2.0}, {"round": 2, "train_loss": 1.5},
                                         {"round": 3, "train_loss": 1.0}]), d / "metrics.parquet")
    done = resume_point(d, 2)
    assert done.round == 2 and done.config is None and [r["round"] for r in done.rows] == [1, 2]
    with pytest.raises(ConfigError, match=r"its config.json is unreadable .* this run directory was damaged"):
        resume_point(d, 4)
    (d / "metrics.parquet").write_text("garbage")
    with pytest.raises(ConfigError, match=r"its metrics.parquet is unreadable \(.*\); this run directory was damaged"):
        resume_point(d, 2)


def test_an_interrupted_table_stops_its_runs_in_threads_and_starts_no_more(tmp_path, monkeypatch):
    """``--parallel 2``: the runs go on in threads, which a signal never reaches. Ctrl-C (a
    KeyboardInterrupt in the main thread) sets the table's stop event, which the runs in
    progress obey after their round, and the runs not started are never started."""
    import os
    import signal
    import threading
    import time
    import types

    import raysfl
    from raysfl.reproduce import engine
    from raysfl.resolve import validate

    cfgs = [validate(raysfl.config_from_kwargs(algo="psl", clients=4, rounds=2, seed=s)) for s in range(4)]
    ran, obeyed = [], []
    both = threading.Barrier(2)

    def fake_run(cfg, cache, stop=None):
        ran.append(cfg.seed)
        both.wait(10)  # both runs in progress
        if cfg.seed == 0:
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: Python raises it in the main thread alone
        obeyed.append(stop.wait(10))
        raise KeyboardInterrupt  # what run_cached raises once its run stopped

    monkeypatch.setattr(engine, "run_cached", fake_run)
    monkeypatch.setattr(engine, "start_local_ray", lambda configs, at_once: False)
    planned = engine.Planned(table=types.SimpleNamespace(paper="p", name="t"), scale="small", seeds=[0, 1, 2, 3],
                             configs={"row": cfgs})
    said = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, whatever ran before
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.run_planned(planned, tmp_path, parallel=2, say=said.append)
    finally:
        signal.signal(signal.SIGINT, before)
    assert sorted(ran) == [0, 1] and obeyed == [True, True]
    assert "raysfl reproduce: stopping the runs in progress after their current round" in said


@pytest.mark.usefixtures("ray_session")
def test_a_table_s_run_told_to_stop_checkpoints_its_round_and_goes_on_from_it(tmp_path, capsys):
    """The stop event of an interrupted table (above) stops a real run after its round, as a
    signal would: it is not cached, its round is checkpointed, and the table's next invocation
    goes on from that round to the rows of an uninterrupted run."""
    import threading

    import raysfl
    from raysfl.reproduce.engine import cached, run_cached
    from raysfl.resolve import validate
    from raysfl.run_key import cache_keys

    cfg = validate(raysfl.config_from_kwargs(algo="psl", clients=4, rounds=3, local_steps=2, batch_size=16, lr=0.05,
                                             resources={"client_actors": 2}))
    whole = run_cached(cfg, tmp_path / "a")
    stop = threading.Event()
    stop.set()
    with pytest.raises(KeyboardInterrupt):
        run_cached(cfg, tmp_path / "b", stop)
    key = cache_keys(cfg)[0]
    assert not cached(cfg, tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b" / "runs" / key / "checkpoints").glob("round_*.pt")) == [
        "round_0001.pt"]
    capsys.readouterr()
    again = run_cached(cfg, tmp_path / "b")
    assert "going on from round 1" in capsys.readouterr().err
    assert [(r["round"], r["train_loss"], r["test_accuracy"]) for r in again] == [
        (r["round"], r["train_loss"], r["test_accuracy"]) for r in whole]


def _cfg(**kw):
    import raysfl
    from raysfl.resolve import validate

    return validate(raysfl.config_from_kwargs(**{"dataset": "digits", "clients": 4, "rounds": 2, "lr": 0.05, **kw}))


def test_splitfed_v1_and_fedavg_learn_alike_by_construction_only_at_the_same_settings():
    """SplitFed V1 is FedAvg on the whole model at any cut (tests/algorithms/baselines:
    test_splitfed_v1_equals_fedavg); anything that changes an update, or lets the simulated clock
    choose the clients, breaks it, and so does another algorithm."""
    from raysfl.reproduce.fairness import same_by_construction

    fedavg = _cfg(algo="fedavg")
    assert same_by_construction(fedavg, _cfg(algo="splitfed_v1", cut=2)).startswith("SplitFed V1 is FedAvg")
    assert same_by_construction(_cfg(algo="splitfed_v1", cut=1), _cfg(algo="splitfed_v1", cut=2))
    assert same_by_construction(fedavg, _cfg(algo="fedavg")) is None  # the same row twice: nothing to say
    for other in (_cfg(algo="splitfed_v1", lr=0.1), _cfg(algo="splitfed_v1", server_lr=0.01),
                  _cfg(algo="splitfed_v1", transfer_dtype="bfloat16"), _cfg(algo="splitfed_v1", sim_deadline_s=5.0),
                  _cfg(algo="splitfed_v1", splitfed_v1={"server_updates": 10}), _cfg(algo="splitfed_v2"),
                  _cfg(algo="fedprox"), _cfg(algo="splitfed_v1", momentum=0.5)):
        assert same_by_construction(fedavg, other) is None, other.algo


def test_declared_tables_run_a_row_that_learns_as_an_earlier_one_once_but_not_where_they_read_the_clock():
    from raysfl.reproduce.engine import same_rows
    from raysfl.reproduce.fairness import resolve

    def same(paper, name):
        t = next(t for t in tables_of(paper) if t.name == name).at_scale("small")
        return {k: rep for k, (rep, _) in same_rows(t, {r.label: resolve(t, r, "small", 0) for r in t.all_rows}).items()}

    assert same("flex_sfl", "main") == {"SplitFed V1, cut 2": "SplitFed V1, cut 1", "FedAvg": "SplitFed V1, cut 1"}
    assert same("besplit", "main") == {"FedAvg": "SplitFed"}
    assert same("fed_pairing", "time") == {}  # simulated seconds: SplitFed sends smashed data, FedAvg a model
    assert same("flex_sfl", "time_to") == {}


def test_a_row_that_learns_as_an_earlier_one_takes_its_tuning_and_runs_and_counts_once(tmp_path):
    import pyarrow.parquet as pq

    from raysfl.reproduce.command import run_one
    from raysfl.reproduce.engine import plan
    from raysfl.paper_tables import Tuning

    t = Table(paper="test", name="same", title="t", source="nowhere", reference=Row("SplitFed V2", {"algo": "splitfed_v2"}),
              rows=(Row("SplitFed V1", {"algo": "splitfed_v1"}), Row("FedAvg", {"algo": "fedavg"}, compares=("server_reduction",)),
                    Row("SplitFed V1, cut 2", {"algo": "splitfed_v1", "cut": 2})),
              metric=Metric("final"), claim=Claim("the reference wins"), shared={"lr": 0.05, "cut": 1}, scales=SMALL,
              tuning=Tuning(factors={"lr": (1.0, 0.1)}, seeds=1))
    said = []
    md = run_one(plan(t, "small", [0, 1]), tmp_path / "cache", tmp_path / "out", 1, "cmd --seeds 2", tune=True,
                 say=said.append)
    assert any(s.startswith("tune: 2 row(s), 4 settings") for s in said)  # V2 and V1; the others take V1's
    assert "reproduce test/same: 4 runs (0 cached), 1 at a time" in said
    rows = {(r["row"], r["seed"]): r for r in pq.read_table(md.parent / "table.parquet").to_pylist()}
    for label in ("FedAvg", "SplitFed V1, cut 2"):
        for seed in (0, 1):
            r, v1 = rows[(label, seed)], rows[("SplitFed V1", seed)]
            assert r["value"] == v1["value"] and r["tuned"] == v1["tuned"] and r["same_as"] == "SplitFed V1"
            assert not r["decides"] and math.isnan(r["sim_time_s"])  # its own clock is not known: not shown
    assert rows[("SplitFed V1", 0)]["decides"]
    text = md.read_text()
    assert "FedAvg: not run, the runs of SplitFed V1 stand for it (SplitFed V1 is FedAvg" in text
    assert "FedAvg takes SplitFed V1's (it learns alike by construction)" in text
    assert "2 of 4 run here" not in text and "4 of 4 run here" in text
