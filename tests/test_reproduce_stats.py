"""A verdict a reviewer accepts: Student's t at the table's own seed count, Holm-Bonferroni across
the rows a claim compares, rows with identical results counted once, and no verdict on a
collapsed or diverging row (the table is then inconclusive)."""

from __future__ import annotations

import math

import pytest

from raysfl.reproduce import stats
from raysfl.reproduce.guards import collapse, diverging, row_health
from raysfl.reproduce.report import RowResult, decide, parquet_rows, row_results
from raysfl.paper_tables import Claim, Metric, Row, Table

SCALES = {"small": {"dataset": "digits", "rounds": 2}, "paper": {"dataset": "cifar10", "rounds": 100}}


@pytest.mark.parametrize("q,df,printed", [(0.975, 1, 12.706), (0.975, 4, 2.776), (0.975, 9, 2.262),
                                          (0.975, 19, 2.093), (0.95, 4, 2.132), (0.995, 4, 4.604)])
def test_the_t_quantile_is_the_printed_tables(q, df, printed):
    assert stats.t_quantile(q, df) == pytest.approx(printed, abs=5e-4)
    assert stats.t_cdf(stats.t_quantile(q, df), df) == pytest.approx(q, abs=1e-9)


def test_a_paired_t_on_known_numbers():
    """Differences 1..5: mean 3, se sqrt(2.5/5), t 4.243 on 4 degrees of freedom, p 0.0132 (two-sided)."""
    p = stats.paired([1, 2, 3, 4, 5])
    assert (p.mean, p.df) == (3.0, 4) and p.t == pytest.approx(4.2426, abs=1e-4) and p.p == pytest.approx(0.013236,
                                                                                                         abs=1e-6)
    shifted = stats.paired([1, 2, 3, 4, 5], shift=3.0)
    assert shifted.t == 0 and shifted.p == 1.0
    same = stats.paired([0.1, 0.1, 0.1])
    assert same.t == math.inf and same.p == 0.0  # the same difference on every seed: no spread


def test_holm_tests_the_smallest_p_at_alpha_over_m_and_stops_at_the_first_failure():
    assert stats.holm([0.01, 0.04, 0.03]) == [(True, pytest.approx(0.05 / 3)), (False, 0.05), (False, 0.025)]
    assert [r for r, _ in stats.holm([0.01, 0.02, 0.03])] == [True, True, True]  # 0.0167, 0.025, 0.05
    assert [r for r, _ in stats.holm([0.02, 0.001])] == [True, True]
    assert [r for r, _ in stats.holm([0.03, 0.03])] == [False, False]  # 0.03 > 0.025 stops it
    assert stats.holm([math.nan, 0.001]) == [(False, 0.05), (True, 0.025)]
    assert stats.critical_t(0.05, 4) == pytest.approx(2.776, abs=5e-4)


def test_seeds_to_settle_reads_how_many_seeds_a_difference_of_this_spread_needs():
    # mean 1, sd 1: t = sqrt(n) passes 2.776 (n=5) only from n = 7 (t 2.65 < 2.447? no: critical at df 6 = 2.447)
    vals = [0.0, 2.0, 1.0, 0.0, 2.0]
    need = stats.seeds_to_settle(vals, 0.0, 0.05, 10)
    assert need is not None and 5 < need <= 10
    assert math.sqrt(need) / math.sqrt(sum((v - 1) ** 2 for v in vals) / 4) > stats.critical_t(0.05, need - 1)
    assert stats.seeds_to_settle([0.01, -0.01, 0.0, 0.02, -0.02], 0.0, 0.05, 10) is None  # a mean of zero never


def _table(rows, claim=None, metric=Metric("final")):
    return Table(paper="test", name="t", title="t", source="nowhere", reference=Row("ref", {"algo": "gapsl"}),
                 rows=tuple(Row(label, {"algo": "psl"}) for label in rows), metric=metric,
                 claim=claim or Claim("the reference wins"), scales=SCALES)


def _runs(final: float, rounds: int = 12, loss: float = 0.3, start: float = 0.3) -> list[dict]:
    """A run's metrics rows: accuracy from ``start`` to ``final`` by round 6, then flat; loss falling."""
    return [{"round": r, "test_accuracy": start + (final - start) * min(1.0, r / 6), "train_loss": loss + 1.0 / r,
             "sim_time_total_s": float(r), "participants": 10} for r in range(1, rounds + 1)]


def _results(table, finals: dict[str, list[float]], collapsed: dict | None = None):
    runs = {label: [_runs(v) for v in vals] for label, vals in finals.items()}
    for label, seeds in (collapsed or {}).items():
        for s in seeds:
            runs[label][s] = _runs(0.1, start=0.1)  # at chance all along
    n = len(next(iter(finals.values())))
    return row_results(table, list(range(n)), runs, {label: {} for label in finals}, num_classes=10)


REF = [0.90, 0.91, 0.92, 0.90, 0.93]


def test_a_difference_beyond_two_standard_errors_but_short_of_students_t_is_not_shown():
    """Five seeds: the threshold is t(0.975, 4) = 2.78 standard errors, not 2 (the old rule called
    this one contradicted: t = -2.44)."""
    other = [r + d for r, d in zip(REF, (0.016, 0.002, 0.018, -0.001, 0.010))]  # ahead by 0.009, t = -2.41
    t = _table(["PSL"])
    res = _results(t, {"ref": REF, "PSL": other})
    d = decide(t, res, 5)
    psl = res[1]
    assert psl.test.t == pytest.approx(-2.41, abs=0.01) and psl.t_crit == pytest.approx(2.776, abs=1e-3)
    assert abs(psl.diff_mean) > 2 * psl.diff_se  # what the old rule read as decided
    assert d.verdict.startswith("not shown") and psl.state == "noise"
    assert "PSL" in d.settle and 5 < d.settle["PSL"] <= 10  # 10 seeds would decide it: reproduce runs them


def test_the_seeds_that_would_settle_a_row_are_looked_for_up_to_most_seeds():
    """``--most-seeds N`` above the default is taken at its word: a row that 10 seeds would leave
    undecided but more would decide gets that many (they were capped at 10, so the flag did
    nothing above it), and an N short of them leaves it as it is."""
    other = [r + d for r, d in zip(REF, (0.012, -0.004, 0.016, -0.006, 0.010))]
    t = _table(["PSL"])
    res = _results(t, {"ref": REF, "PSL": other})
    assert "PSL" not in decide(t, res, 5).settle  # more than the default 10 would be needed
    need = decide(t, res, 5, most_seeds=30).settle["PSL"]
    assert 10 < need <= 30
    assert "PSL" not in decide(t, res, 5, most_seeds=need - 1).settle


def test_seeds_added_to_settle_a_row_skip_the_tuning_seeds():
    """The seeds ``raysfl reproduce`` adds follow the largest one given, but never a tuning seed:
    a table is not judged on a seed its settings were chosen on."""
    from raysfl.reproduce.stats import more_seeds
    from raysfl.tuning.rules import tuning_seeds

    tuning = tuning_seeds(3)
    given = [tuning[0] - 2, tuning[0] - 1]
    added = more_seeds(given, 6, tuning)
    assert added[:2] == given and len(added) == 6 and not set(added) & set(tuning)
    assert added[2:] == [tuning[-1] + 1, tuning[-1] + 2, tuning[-1] + 3, tuning[-1] + 4]
    assert more_seeds([0, 1, 2, 3, 4], 10, tuning) == list(range(10))


def test_holm_across_the_compared_rows_decides_a_reproduction_only_when_every_row_passes():
    t = _table(["A", "B"])
    clear = [v - 0.10 for v in REF]
    marginal = [r - d for r, d in zip(REF, (0.02, 0.002, 0.025, 0.006, 0.012))]  # t 3.16, p 0.034
    res = _results(t, {"ref": REF, "A": clear, "B": marginal})
    d = decide(t, res, 5)
    a, b = res[1], res[2]
    assert 0.025 < b.test.p < 0.05
    assert a.level == pytest.approx(0.025) and b.level == pytest.approx(0.05)  # A first, then B at 0.05
    assert a.state == b.state == "ok" and d.verdict == "reproduced"
    both = _results(t, {"ref": REF, "A": marginal, "B": list(marginal)[::-1]})
    assert decide(t, both, 5).verdict.startswith("not shown")  # the first at 0.025 fails: Holm stops there
    worse = _results(t, {"ref": REF, "A": clear, "B": [r + 0.1 for r in REF]})
    assert decide(t, worse, 5).verdict == "contradicted"


def test_rows_with_identical_results_count_once():
    """SplitFed V1 and FedAvg at the same settings give the same numbers by construction: one
    row of evidence, not two (Holm over one row, not two)."""
    t = _table(["SplitFed", "FedAvg", "FedProx"])
    same = [v - 0.05 for v in REF]
    res = _results(t, {"ref": REF, "SplitFed": same, "FedAvg": list(same), "FedProx": [v - 0.06 for v in REF]})
    d = decide(t, res, 5)
    by = {r.label: r for r in res}
    assert by["SplitFed"].decides and not by["FedAvg"].decides and by["FedAvg"].same_as == "SplitFed"
    assert by["FedProx"].decides and {by["SplitFed"].level, by["FedProx"].level} == {0.025, 0.05}
    assert "FedAvg: the same results as SplitFed on every seed, counted once" in "; ".join(d.reasons)
    assert d.verdict == "reproduced"
    rows = parquet_rows(t, "small", list(range(5)), res, made={"version": "v", "commit": "c", "date": "d"})
    assert {r["row"]: r["decides"] for r in rows} == {"ref": False, "SplitFed": True, "FedAvg": False, "FedProx": True}


def test_a_seed_at_chance_makes_the_table_inconclusive_whatever_the_numbers():
    t = _table(["PSL"])
    res = _results(t, {"ref": REF, "PSL": [v - 0.3 for v in REF]}, collapsed={"PSL": [3]})
    d = decide(t, res, 5)
    assert d.verdict.startswith("inconclusive: PSL collapsed on seeds 3 (at chance")
    res = _results(t, {"ref": REF, "PSL": [v + 0.05 for v in REF]}, collapsed={"ref": [0, 4]})
    assert decide(t, res, 5).verdict.startswith("inconclusive: ref collapsed on seeds 0, 4")
    # a row the claim does not compare is marked, and does not decide the table
    t2 = _table(["PSL", "SL"], claim=Claim("the reference beats PSL", rows=("PSL",)))
    res = _results(t2, {"ref": REF, "PSL": [v - 0.1 for v in REF], "SL": [v - 0.1 for v in REF]},
                   collapsed={"SL": [1]})
    d = decide(t2, res, 5)
    assert d.verdict == "reproduced" and any("SL (shown, not deciding) collapsed on seeds 1" in w for w in d.warnings)
    rows = parquet_rows(t2, "small", list(range(5)), res, made={"version": "v", "commit": "c", "date": "d"})
    assert {r["row"] for r in rows if r["collapsed"]} == {"SL"}
    assert [r["seed"] for r in rows if r["collapsed_seed"]] == [1]


def test_a_diverging_loss_counts_as_collapsed():
    rows = _runs(0.9)
    assert diverging(rows) is None and collapse(rows, "test_accuracy", 10) is None
    nan = [dict(r) for r in rows]
    nan[7]["train_loss"] = float("nan")
    assert diverging(nan) == "non-finite training loss in round 8"
    rising = [dict(r, train_loss=0.3 if r["round"] <= 7 else 0.3 * 2 ** ((r["round"] - 7) / 3)) for r in rows]
    assert "training loss rising over the last 5 rounds" in diverging(rising)
    noisy = [dict(r, train_loss=0.3 + 0.05 * (-1) ** r["round"]) for r in rows]  # oscillates, does not rise
    assert diverging(noisy) is None
    small = [dict(r, train_loss=0.04 if r["round"] <= 7 else 0.04 + 0.005 * (r["round"] - 7)) for r in rows]
    assert diverging(small) is None  # +50 % of a converged loss, 0.02 in all: not a divergence
    h = row_health([rows, rising], [0, 1], "test_accuracy", 10)
    assert list(h.collapsed) == [1]


def test_a_run_that_dies_after_learning_counts_as_collapsed():
    """BESplit at lr 0.158 on digits, seed 0: 0.99 by round 30, then a constant 0.18 with a flat
    loss: neither at chance nor a rising loss, yet its end is no accuracy of the method."""
    learnt = [0.2 + 0.035 * r for r in range(1, 21)] + [0.99] * 10
    died = learnt + [0.18] * 10
    rows = [{"round": i + 1, "test_accuracy": v, "train_loss": 2.83 if v == 0.18 else 0.1} for i, v in enumerate(died)]
    assert diverging(rows) is None and collapse(rows, "test_accuracy", 10) == (
        "fell from test_accuracy 0.990 to 0.180 over its last 5 evaluations")
    wobbly = [dict(r, test_accuracy=0.8 if r["round"] % 2 else 0.6) for r in rows]  # swings, keeps most: not fallen
    assert collapse(wobbly, "test_accuracy", 10) is None
    early = [dict(r, test_accuracy=0.15) for r in rows[:12]]  # never learnt: the at-chance guard's case, not this one
    assert collapse(early, "test_accuracy", 10).startswith("at chance")


def test_a_reference_still_climbing_and_a_row_that_barely_moved_are_warned_about():
    t = _table(["PSL"])
    climbing = [{"round": r, "test_accuracy": 0.3 + 0.05 * r, "train_loss": 1.0 / r, "sim_time_total_s": 1.0}
                for r in range(1, 13)]
    flat = [{"round": r, "test_accuracy": 0.13 + 0.001 * r, "train_loss": 2.0, "sim_time_total_s": 1.0}
            for r in range(1, 13)]
    res = row_results(t, [0, 1], {"ref": [climbing, climbing], "PSL": [flat, flat]}, {}, num_classes=10)
    d = decide(t, res, 2)
    assert any(w.startswith("the reference (ref) is still climbing") for w in d.warnings)
    assert any(w.startswith("PSL barely moved from its start") for w in d.warnings)


def test_an_evaluation_period_the_last_round_cuts_is_warned_about():
    """FLEX-SFL evaluates W_global, built every tau_G rounds: after 5 rounds its accuracy is round 4's model."""
    t = _table(["PSL"])
    rows = [dict(r, w_global_round=4 * (r["round"] // 4)) for r in _runs(0.9, rounds=5)]
    res = row_results(t, [0], {"ref": [rows], "PSL": [_runs(0.8, rounds=5)]}, {}, num_classes=10)
    d = decide(t, res, 1)
    assert any("last evaluation is of the model built in round 4" in w for w in d.warnings)


def test_the_table_parquet_describes_itself(tmp_path):
    import pyarrow.parquet as pq

    from raysfl.reproduce.report import write

    t = _table(["PSL"])
    res = _results(t, {"ref": REF, "PSL": [v - 0.1 for v in REF]})

    class Tuned:
        chosen, grid, trials, at_edge = {"lr": 0.005}, {"lr": [0.005, 0.0016, 0.0005, 0.016]}, 4, []
    res = row_results(t, list(range(5)), {r.label: [_runs(v) for v in r.values] for r in res},
                      {"ref": {}, "PSL": {}}, 10, {"ref": Tuned(), "PSL": Tuned()})
    md = write(t, "small", list(range(5)), res, tmp_path / "t", "cmd", "machine", "settings", "the tuning")
    rows = pq.read_table(md.parent / "table.parquet").to_pylist()
    for col in ("verdict", "decides", "t", "t_critical", "tuned", "grid", "collapsed", "raysfl_version", "commit",
                "date", "trials"):
        assert col in rows[0], col
    psl = [r for r in rows if r["row"] == "PSL"]
    assert psl[0]["verdict"] == "reproduced" and psl[0]["decides"] and psl[0]["t_critical"] == pytest.approx(2.776,
                                                                                                           abs=1e-3)
    assert psl[0]["tuned"] == '{"lr": 0.005}' and '"lr": [0.005' in psl[0]["grid"] and psl[0]["trials"] == 4
    text = md.read_text()
    assert "Made by: raysfl " in text and "Tuning: the tuning" in text and "| lr 0.005 |" in text


def test_an_untuned_run_of_a_tuned_table_gives_no_verdict():
    t = _table(["PSL"])
    res = _results(t, {"ref": REF, "PSL": [v - 0.1 for v in REF]})
    assert decide(t, res, 5, untuned=True).verdict == "untuned (--no-tune): no verdict"


def test_results_per_seed_carry_the_row_s_own_figures():
    r = RowResult("x", [0.1, 0.2], 0, [0.0, 0.1], [1.0, 1.0], [1.0, 1.0], None, "")
    assert r.mean == pytest.approx(0.15) and not r.collapsed


def test_a_deciding_row_still_climbing_at_the_end_leaves_an_accuracy_table_inconclusive():
    """Unconverged: an accuracy read at the end of training is not a verdict while a deciding
    row is still climbing; a rounds-to-target read is (the target is reached or not)."""
    climbing = [{"round": r, "test_accuracy": 0.3 + 0.05 * r, "train_loss": 1.0 / r, "sim_time_total_s": 1.0}
                for r in range(1, 13)]
    flat = _runs(0.95)
    t = _table(["PSL"])
    res = row_results(t, list(range(5)), {"ref": [flat] * 5, "PSL": [climbing] * 5}, {}, num_classes=10)
    assert decide(t, res, 5).verdict == "inconclusive: PSL still climbing over its last 5 rounds (unconverged)"
    to = _table(["PSL"], metric=Metric("rounds_to", target=0.5))
    res = row_results(to, list(range(5)), {"ref": [flat] * 5, "PSL": [climbing] * 5}, {}, num_classes=10)
    assert not decide(to, res, 5).verdict.startswith("inconclusive")


def test_the_seed_rule_simulation_adds_seeds_as_reproduce_does():
    """``scripts/seed_extension_error.py`` walks a row through reproduce's rule: a difference the
    first 5 seeds leave undecided is looked at again with the seeds its spread asks for (and can
    then be called significant), and never with ``--most-seeds 0``."""
    import sys
    from pathlib import Path

    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from seed_extension_error import ends_significant

    diffs = np.array([0.9, -0.2, 1.1, 0.1, 0.6, 0.8, 0.7, 0.9, 0.6, 0.8])
    assert stats.paired(list(diffs[:5])).p > stats.ALPHA  # undecided at 5
    assert ends_significant(diffs, 5, 0) == (False, 5)
    hit, used = ends_significant(diffs, 5, 10)
    assert hit and 5 < used <= 10
    assert ends_significant(np.array([1.0, 1.1, 0.9, 1.05, 0.95]), 5, 10) == (True, 5)
    # each look at a stricter level: the same row needs more seeds, or is not called at all
    assert ends_significant(diffs, 5, 10, level=0.001) == (False, 5)


def test_a_per_client_model_stuck_on_its_clients_commonest_class_is_at_chance_on_their_splits():
    """Under a strong label skew a constant prediction per client scores its split's commonest
    class's share on the clients' own test splits, far above 1.5 / classes: read against the
    run's floor of that column (``chance_aux_local`` for ``acc_aux_local``) it is at chance;
    the same run without the column (made before it existed) is read against 1 / classes, and
    neither the global test set nor a shared model's column reads it."""
    stuck = [{"round": r, "acc_aux_local": 0.62, "chance_aux_local": 0.60, "test_accuracy_local": 0.62,
              "chance_local": 0.18, "test_accuracy": 0.62, "train_loss": 1.0} for r in range(1, 13)]
    assert collapse(stuck, "acc_aux_local", 10) == "at chance (acc_aux_local 0.620 <= chance_aux_local 0.600 + 0.5 / 10)"
    learnt = [dict(r, acc_aux_local=0.95) for r in stuck]
    assert collapse(learnt, "acc_aux_local", 10) is None
    older = [{k: v for k, v in r.items() if k != "chance_aux_local"} for r in stuck]
    assert collapse(older, "acc_aux_local", 10) is None
    assert collapse(stuck, "test_accuracy", 10) is None  # 0.62 on the global test set has learnt
    assert collapse(stuck, "test_accuracy_local", 10) is None  # one model for all: its floor is 0.18
    assert collapse([dict(r, test_accuracy_local=0.2) for r in stuck], "test_accuracy_local", 10).startswith(
        "at chance (test_accuracy_local 0.200 <= chance_local 0.180")
    mine = [dict(r, test_balanced_acc_local=0.2) for r in stuck]  # a metric of yours: no floor of its own
    assert collapse(mine, "test_balanced_acc_local", 10) is None
    # fallen and barely moved read the same floor: 0.99 -> 0.70 keeps under half of the gain over 0.6
    fallen = [dict(r, acc_aux_local=0.99 if r["round"] <= 6 else 0.70) for r in stuck]
    assert collapse(fallen, "acc_aux_local", 10).startswith("fell from acc_aux_local 0.990 to 0.700")
    assert row_health([stuck], [0], "acc_aux_local", 10).barely_moved == (0.62, 0.62)
    assert row_health([learnt], [0], "acc_aux_local", 10).barely_moved is None


def test_a_row_counted_once_as_a_repeat_is_still_judged_on_its_own_runs():
    """Two compared rows with the same finals on every seed count once in the test, but each
    row's runs keep their own guards: a repeat whose loss diverged makes the table inconclusive."""
    t = _table(["SplitFed", "FedAvg"])
    res = _results(t, {"ref": REF, "SplitFed": [v - 0.1 for v in REF], "FedAvg": [v - 0.1 for v in REF]})
    assert decide(t, res, 5).verdict == "reproduced"
    runs = {"ref": [_runs(v) for v in REF], "SplitFed": [_runs(v - 0.1) for v in REF],
            "FedAvg": [_runs(v - 0.1) for v in REF]}
    runs["FedAvg"][2] = [dict(r, train_loss=0.3 if r["round"] <= 7 else 0.3 * 2 ** ((r["round"] - 7) / 3))
                         for r in runs["FedAvg"][2]]
    res = row_results(t, list(range(5)), runs, {label: {} for label in runs}, num_classes=10)
    d = decide(t, res, 5)
    assert res[2].same_as == "SplitFed" and not res[2].decides
    assert d.verdict.startswith("inconclusive: FedAvg collapsed on seeds 2 (training loss rising")
    assert any(w.startswith("FedAvg (counted once, as SplitFed) collapsed on seeds 2") for w in d.warnings)
    assert decide(t, res, 5, untuned=True).verdict.startswith("untuned")  # no verdict: the warning still says it


def test_chance_on_the_clients_splits_is_what_a_constant_prediction_scores_there():
    import numpy as np

    from raysfl.runtime.fed_actor import ClientViews

    labels = np.array([0, 0, 0, 1, 2, 2, 3, 3, 3, 3])
    views = ClientViews([np.array([0, 1, 2, 3]), np.array([], np.int64), np.array([4, 5, 6, 7, 8, 9])], None)
    # models of each client's own: each split's commonest class (the client with no split left out)
    assert views.chance(labels, own_models=True) == pytest.approx((3 / 4 + 4 / 6) / 2)
    # one model for all: one class, the best on average (0: 3/4 and 0; 3: 0 and 4/6)
    assert views.chance(labels) == pytest.approx(3 / 8)
    assert views.chance(labels, clients=[2], own_models=True) == pytest.approx(4 / 6)
    assert math.isnan(ClientViews([], None).chance(labels))


def test_the_floor_script_sets_a_published_tables_rows_against_their_seeds_floors(tmp_path, capsys):
    """``scripts/local_chance_floor.py`` computes each seed's floors from the table's reference
    config and names the rows at or under theirs plus 0.5 / classes."""
    import sys
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    from raysfl.reproduce import tables_of
    from raysfl.reproduce.fairness import resolve
    from raysfl.runtime.experiment import local_chance

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from local_chance_floor import main

    table = next(t for t in tables_of("besplit") if t.name == "kappa01")
    floors = [local_chance(resolve(table.at_scale("small"), table.reference, "small", s)) for s in (0, 1)]
    own = [local_chance(resolve(table.at_scale("small"), table.reference, "small", s), own_models=True)
           for s in (0, 1)]
    assert 0.1 < max(floors) < 0.3 < min(own)  # kappa 0.1: a class of each client's own far above one for all
    metric = "mean test_accuracy_local of the last 5 evaluated rounds"
    rows = [("BESplit-G", 0, 0.95), ("BESplit-G", 1, 0.96), ("FedProx", 0, floors[0] + 0.04),
            ("FedProx", 1, floors[1] + 0.06)]
    (tmp_path / "besplit" / "kappa01").mkdir(parents=True)
    pq.write_table(pa.table({"row": [r for r, _, _ in rows], "seed": [s for _, s, _ in rows],
                             "value": [v for _, _, v in rows], "metric": [metric] * 4, "scale": ["small"] * 4}),
                   tmp_path / "besplit" / "kappa01" / "table.parquet")
    assert main(["--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"one class for all {floors[0]:.3f}, {floors[1]:.3f}; each client's commonest {own[0]:.3f}" in out
    assert f"FedProx (test_accuracy_local), seed 0: {floors[0] + 0.04:.3f} <= {floors[0] + 0.05:.3f}" in out
    assert "seed 1:" not in out and "BESplit-G" not in out  # 0.06 above the floor: above the line


def test_a_cached_run_whose_data_set_cannot_be_read_keeps_its_rows_and_says_so_once(tmp_path):
    import dataclasses

    import raysfl
    from raysfl.reproduce.engine import with_local_chance
    from raysfl.resolve import validate

    cfg = dataclasses.replace(validate(raysfl.config_from_kwargs(algo="besplit", local_test_fraction=0.2)),
                              dataset="fashion_mnist", data_root=str(tmp_path / "nothing here"))
    rows = [{"round": 1, "test_accuracy_local": 0.5}]
    said, floors = [], {}
    assert with_local_chance(rows, cfg, floors, said.append) == rows
    assert with_local_chance(rows, dataclasses.replace(cfg, seed=1), floors, said.append) == rows
    assert len(said) == 1 and said[0].startswith("raysfl reproduce: ") and "read 1 / classes there" in said[0]
