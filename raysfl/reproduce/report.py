"""A table's numbers and verdict: per row the metric's mean ± std over seeds, the paired
difference to the reference with Student's t at the table's own seed count, Holm-Bonferroni
across the rows the claim compares (rows with identical results counted once), the guards
(:mod:`raysfl.reproduce.guards`: a collapsed or diverging deciding row makes the table
inconclusive), each row's tuned settings and config diff; written as ``table.md`` and
``table.parquet`` with the raysfl version, commit and date that made them."""

from __future__ import annotations

import datetime
import json
import math
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from raysfl.reproduce import stats
from raysfl.reproduce.fairness import describe
from raysfl.reproduce.guards import K, RowHealth, row_health
from raysfl.paper_tables import Metric, Table


@dataclass
class RowResult:
    label: str
    values: list[float]          # the metric per seed
    censored: int                # seeds whose *_to target was never reached
    diffs: list[float]           # paired: row - reference, per seed
    sim_s: list[float]           # simulated seconds of the whole run, the table's cost model
    compute_s: list[float]       # ... compute only
    paper: str | None
    config_diff: str
    health: RowHealth = field(default_factory=RowHealth)
    tuned: dict = field(default_factory=dict)     # knob -> the value tuning chose
    grid: dict = field(default_factory=dict)      # knob -> the values tuning tried
    trials: int = 0                               # trials tuning ran for this row
    at_edge: tuple[str, ...] = ()                 # knobs still at the grid's edge after widening it once
    also: dict = field(default_factory=dict)      # label of a shown metric -> its values per seed
    runs_of: str | None = None   # not run: the row whose runs stand for it, as it learns alike by construction
    why_same: str = ""           # ... and why (raysfl.reproduce.fairness.same_by_construction)
    # the decision (decide()):
    decides: bool = False        # compared by the claim, and not a repeat of another compared row's results
    same_as: str | None = None   # the compared row whose results this row's repeat exactly
    test: stats.Paired | None = None
    level: float = math.nan      # the Holm level its test ran at
    t_crit: float = math.nan     # the critical |t| at that level and the seeds' degrees of freedom
    state: str = ""              # ok (decided the claim's way) | bad (the other way) | noise | "" (not compared)

    @property
    def mean(self) -> float:
        vals = [v for v in self.values if not math.isnan(v)]
        return statistics.mean(vals) if vals else math.nan

    @property
    def std(self) -> float:
        vals = [v for v in self.values if not math.isnan(v)]
        return statistics.stdev(vals) if len(vals) > 1 else 0.0

    @property
    def diff_mean(self) -> float:
        return statistics.mean(self.diffs) if self.diffs else math.nan

    @property
    def diff_se(self) -> float:
        return statistics.stdev(self.diffs) / math.sqrt(len(self.diffs)) if len(self.diffs) > 1 else math.nan

    @property
    def collapsed(self) -> bool:
        return bool(self.health.collapsed)


@dataclass
class Decision:
    verdict: str
    reasons: list[str]
    warnings: list[str]
    settle: dict[str, int]       # undecided row -> the seeds that would decide it (at most decide()'s most_seeds)


def learns(metric: Metric) -> bool:
    """Whether a table's metric depends on what the model learns (an accuracy, a time to a
    target); a table of simulated time alone does not, and its rows are not refused at chance."""
    return metric.read.endswith("_to") or "acc" in metric.column or "loss" in metric.column


def row_results(table: Table, seeds: list[int], runs: dict[str, list[list[dict]]], diffs: dict[str, dict],
                num_classes: int = 10, tuning: dict | None = None, same: dict | None = None) -> list[RowResult]:
    """Every row's values per seed, paired with the reference's, and its health; ``tuning``:
    {label: TuneResult-like with ``chosen``, ``grid``, ``trials``, ``at_edge``} where rows were tuned;
    ``same``: {label: (the row whose runs stand for it, why)} for rows not run
    (:func:`raysfl.reproduce.engine.same_rows`): their simulated clocks are not theirs, so not shown."""
    same = same or {}
    ref_vals = [table.metric_of(table.reference).value(rows)[0] for rows in runs[table.reference.label]]
    out = []
    for row in table.all_rows:
        metric = table.metric_of(row)
        vals = [metric.value(rows) for rows in runs[row.label]]
        values = [v for v, _ in vals]
        tuned = (tuning or {}).get(row.label)
        res = RowResult(
            row.label, values, sum(1 for _, c in vals if c), [v - r for v, r in zip(values, ref_vals)],
            [rows[-1]["sim_time_total_s"] if rows else math.nan for rows in runs[row.label]],
            [rows[-1].get("sim_compute_total_s", math.nan) if rows else math.nan for rows in runs[row.label]],
            row.paper, describe(diffs.get(row.label, {}), row) + (f"; reads {row.column}" if row.column else ""),
            health=row_health(runs[row.label], seeds, metric.column, num_classes, learns(metric)))
        if row.label in same:
            res.runs_of, res.why_same = same[row.label]
            res.sim_s = res.compute_s = [math.nan] * len(values)
            res.config_diff += f"; not run: the runs of {res.runs_of} stand for it ({res.why_same})"
        if tuned is not None:
            res.tuned, res.grid, res.trials, res.at_edge = (dict(tuned.chosen), dict(tuned.grid), tuned.trials,
                                                           tuple(tuned.at_edge))
        for shown in table.shown:
            m = shown if not row.column or shown.column != "test_accuracy" else Metric(
                shown.read, shown.k, shown.target, row.column)
            res.also[m.label] = [m.value(rows)[0] for rows in runs[row.label]]
        out.append(res)
    return out


def decide(table: Table, results: list[RowResult], n_seeds: int, untuned: bool = False,
           most_seeds: int = stats.MOST_SEEDS) -> Decision:
    """The claim's criterion on paired seeds. Each compared row (a row whose results repeat an
    earlier compared row's on every seed is counted once) gets Student's t on its per-seed
    advantage (the reference's, in the metric's favourable direction; ``not_worse``: shifted by
    the margin); Holm-Bonferroni over them at 5 %, two-sided. ``reproduced``: every compared
    row decided the claimed way (and, for ``better``, by at least the margin); ``contradicted``:
    some row decided the other way; ``not shown`` otherwise; ``inconclusive`` whenever the
    reference or a deciding row collapsed (at chance, or diverging) on some seed, or, where the
    metric is an accuracy at the end, is still climbing on most seeds (unconverged) -- a row
    counted once as a repeat of another's results is judged on its own runs too; no verdict
    with fewer seeds than the claim's ``min_seeds``, or where a tuned table's rows ran untuned
    (``untuned``: ``--no-tune``)."""
    claim, sign = table.claim, (1.0 if table.metric.higher_is_better else -1.0)
    by = {r.label: r for r in results}
    compared = [by[label] for label in table.compared()]
    seen: dict[tuple, str] = {}
    counted = {table.reference.label, *(r.label for r in compared)}
    for r in compared:
        if r.runs_of in counted:  # learns as a row already counted, by construction: not evidence of its own
            r.same_as = r.runs_of
            continue
        key = tuple(r.values)
        if key in seen and all(math.isfinite(v) for v in r.values):
            r.same_as = seen[key]
        else:
            seen.setdefault(key, r.label)
            r.decides = True
    deciding = [r for r in compared if r.decides]
    shift = -claim.margin if claim.kind == "not_worse" else 0.0
    for r in deciding:
        r.test = stats.paired([-sign * d for d in r.diffs], shift)
    holm = stats.holm([r.test.p for r in deciding])
    reasons, settle = [], {}
    for r, (rejected, level) in zip(deciding, holm):
        r.level, r.t_crit = level, stats.critical_t(level, r.test.df)
        adv = r.test.mean
        if rejected and r.test.t > 0:
            r.state = "ok" if claim.kind == "not_worse" or adv >= claim.margin else "noise"
        elif rejected and r.test.t < 0:
            r.state = "bad"
        else:
            r.state = "noise"
            need = stats.seeds_to_settle([-sign * d for d in r.diffs], shift, level, most_seeds)
            if need is not None and need > n_seeds:
                settle[r.label] = need
        reasons.append(f"vs {r.label}: reference advantage {_num(adv, table.metric)} ± {_num(r.test.se, table.metric)}"
                       f" (SE), t = {_t(r.test.t)} against {_t(r.t_crit)} (Holm level {level:.3g})")
    for r in compared:
        if r.same_as and r.runs_of == r.same_as:
            reasons.append(f"{r.label}: not run, the runs of {r.same_as} stand for it ({r.why_same}), counted once")
        elif r.same_as:
            reasons.append(f"{r.label}: the same results as {r.same_as} on every seed, counted once")
    warnings = _warnings(table, results, deciding, settle, n_seeds)
    if n_seeds < claim.min_seeds:
        return Decision(f"too few seeds ({n_seeds} < {claim.min_seeds}): no verdict", reasons, warnings, settle)
    if untuned:
        return Decision("untuned (--no-tune): no verdict", reasons, warnings, settle)
    # a row counted once as a repeat of another's numbers is still judged on its own runs: the
    # same finals can end a run whose loss diverged (a row that runs_of another is those runs)
    judged = [by[table.reference.label], *deciding, *(r for r in compared if r.same_as and r.runs_of is None)]
    broken = [f"{r.label} collapsed on seeds {', '.join(map(str, sorted(r.health.collapsed)))} "
              f"({next(iter(r.health.collapsed.values()))})" for r in judged if r.collapsed]
    if reads_convergence(table.metric):
        broken += [f"{r.label} still climbing over its last {K} rounds (unconverged)" for r in judged
                   if r.health.climbing and not r.collapsed]
    if broken:
        return Decision(f"inconclusive: {'; '.join(broken)}", reasons, warnings, settle)
    if deciding and all(r.state == "ok" for r in deciding):
        return Decision("reproduced", reasons, warnings, settle)
    if any(r.state == "bad" for r in deciding):
        return Decision("contradicted", reasons, warnings, settle)
    return Decision(f"not shown (Student's t at 5 %, Holm over {len(deciding)} row{'s' * (len(deciding) != 1)})",
                    reasons, warnings, settle)


def verdict(table: Table, results: list[RowResult], n_seeds: int) -> tuple[str, list[str]]:
    """(verdict, reasons): :func:`decide` without its warnings."""
    d = decide(table, results, n_seeds)
    return d.verdict, d.reasons


def reads_convergence(metric: Metric) -> bool:
    """Whether a table's metric is an accuracy at the end of training (final, mean of the last
    rounds, best), which a row still climbing has not reached; a time or a round count to a
    target is read when the target is reached."""
    return learns(metric) and not metric.read.endswith("_to")


def _warnings(table: Table, results: list[RowResult], deciding: list[RowResult], settle: dict, n: int) -> list[str]:
    out = []
    ref = results[0]
    if ref.health.climbing:
        out.append(f"the reference ({ref.label}) is still climbing over its last {K} rounds on most seeds: more "
                   f"rounds could change the table")
    for r in results:
        if r.runs_of is not None:  # its runs are another row's: said there
            continue
        if r is not ref and r.health.climbing and (r in deciding or not reads_convergence(table.metric)):
            out.append(f"{r.label} is still climbing over its last {K} rounds on most seeds")
        if r.health.barely_moved:
            first, last = r.health.barely_moved
            out.append(f"{r.label} barely moved from its start ({_pct(first)} after the first evaluated round, "
                       f"{_pct(last)} at the end)")
        if r.health.stale_eval is not None:
            out.append(f"{r.label}'s last evaluation is of the model built in round {r.health.stale_eval}, not the "
                       f"last round's (it evaluates periodically): the rounds cut its evaluation period")
        if r.collapsed and r is not ref and r not in deciding:
            role = f"counted once, as {r.same_as}" if r.same_as else "shown, not deciding"
            out.append(f"{r.label} ({role}) collapsed on seeds "
                       f"{', '.join(map(str, sorted(r.health.collapsed)))}: {next(iter(r.health.collapsed.values()))}")
        for knob in r.at_edge:
            out.append(f"{r.label}'s tuned {knob} ({r.tuned.get(knob):g}) is at the edge of its grid after widening "
                       f"it once: its best setting may lie beyond")
    for label, need in settle.items():
        out.append(f"{label} is undecided at {n} seeds; {need} seeds would decide a difference of this size "
                   f"and spread")
    return out


def _num(v: float, metric: Metric) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{100 * v:.1f} pts" if _is_accuracy(metric) else f"{v:.3g}"


def _t(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return "∞" if v == math.inf else "-∞" if v == -math.inf else f"{v:.2f}"


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %" if math.isfinite(v) else "—"


def _is_accuracy(metric: Metric) -> bool:
    return metric.higher_is_better and "acc" in metric.column


def _cell(values: list[float], metric: Metric) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "—"
    m, s = statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)
    if _is_accuracy(metric):
        return f"{100 * m:.1f} ± {100 * s:.1f}"
    return f"{m:.3g} ± {s:.2g}"


def _tuned_cell(r: RowResult) -> str:
    if not r.grid:
        return "—"
    return ", ".join(f"{k} {r.tuned[k]:g}" + (" (edge)" if k in r.at_edge else "") for k in r.grid if k in r.tuned)


def provenance() -> dict[str, str]:
    """The raysfl version, the git commit of the checkout it runs from (``-dirty`` with
    uncommitted changes; ``unknown`` outside a checkout) and the date (UTC)."""
    from raysfl import __version__

    root = Path(__file__).resolve().parents[2]
    commit = "unknown"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            commit = head.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10)
            if dirty.returncode == 0 and dirty.stdout.strip():
                commit += "-dirty"
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": __version__, "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


def markdown(table: Table, scale: str, seeds: list[int], results: list[RowResult], command: str,
             machine: str, settings_line: str, made: dict | None = None, tuning_line: str = "",
             untuned: bool = False, timing: str = "") -> str:
    metric = table.metric
    unit = " (%)" if _is_accuracy(metric) else ""
    d = decide(table, results, len(seeds), untuned)
    made = made or provenance()
    shown = [m.label for m in table.shown]
    lines = [f"# {table.paper}: {table.title}", "",
             f"{table.source}. Claim: {table.claim.text}", "",
             f"Command: `{command}`  ",
             f"Machine: {machine}  ",
             f"Made by: raysfl {made['version']}, commit {made['commit']}, {made['date']}  ",
             f"Scale: {scale}; seeds: {', '.join(map(str, seeds))}; shared settings: {settings_line}  ",
             f"Metric: {metric.label}{unit}, mean ± std over seeds; the difference to the reference is paired "
             f"(same seed: same partition, profiles and initial model), ± its standard error; t is Student's at "
             f"{len(seeds) - 1} degrees of freedom against the two-sided critical value at the row's Holm level.  "]
    if tuning_line:
        lines.append(f"Tuning: {tuning_line}  ")
    if timing:
        lines.append(f"Time on this machine: {timing}  ")
    lines += ["",
              f"| row | {metric.label}{unit} | paired difference to reference | t (critical) | decides | "
              + "".join(f"{s} | " for s in shown)
              + "paper | simulated s (cost model) | simulated s (compute only) | tuned | config diff vs reference |",
              "|---|---:|---:|---:|---|" + "---:|" * len(shown) + "---:|---:|---:|---|---|"]
    for r in results:
        is_ref = r.label == table.reference.label
        diff = "—" if is_ref else f"{_num(r.diff_mean, metric)} ± {_num(r.diff_se, metric)}"
        t = "—" if r.test is None else f"{_t(r.test.t)} ({_t(r.t_crit)})"
        cens = f" ({r.censored} never reached)" if r.censored else ""
        broken = (f" ✗ collapsed on seed{'s' * (len(r.health.collapsed) > 1)} "
                  f"{', '.join(map(str, sorted(r.health.collapsed)))}") if r.collapsed else ""
        decides = ("reference" if is_ref else "yes" if r.decides else f"no (= {r.same_as})" if r.same_as
                   else "no (shown)")
        also = "".join(f"{_cell(r.also.get(s, []), next(m for m in table.shown if m.label == s))} | " for s in shown)
        lines.append(f"| {r.label}{' (reference)' if is_ref else ''} | {_cell(r.values, metric)}{cens}{broken} | "
                     f"{diff} | {t} | {decides} | {also}{r.paper or '—'} | {_plain(r.sim_s)} | {_plain(r.compute_s)} | "
                     f"{_tuned_cell(r)} | {r.config_diff} |")
    lines += ["", f"**Verdict: {d.verdict}.** " + "; ".join(d.reasons) + "."]
    if d.warnings:
        lines += ["", "Warnings: " + "; ".join(d.warnings) + "."]
    lines += ["", f"At the paper's scale: `raysfl reproduce {table.paper} --table {table.name} --scale paper --download`"
              + (f" ({table.paper_hours})." if table.paper_hours else ".")]
    if table.notes:
        lines += ["", " ".join(table.notes.split())]
    return "\n".join(lines) + "\n"


def _plain(values: list[float]) -> str:
    vals = [v for v in values if not math.isnan(v)]
    return f"{statistics.mean(vals):.3g}" if vals else "—"


def parquet_rows(table: Table, scale: str, seeds: list[int], results: list[RowResult],
                 made: dict | None = None, untuned: bool = False) -> list[dict]:
    """One row per (table row, seed): the value and paired difference, and the row's decision
    (``verdict`` of the table, ``decides``, ``t``, ``t_critical``, ``p``, ``collapsed``), its
    tuning (``tuned``, ``grid`` as JSON) and who made it."""
    d = decide(table, results, len(seeds), untuned)
    made = made or provenance()
    out = []
    for r in results:
        t = r.test
        for seed, value, diff, sim, comp in zip(seeds, r.values, r.diffs, r.sim_s, r.compute_s):
            out.append({"paper": table.paper, "table": table.name, "scale": scale, "row": r.label,
                        "reference": r.label == table.reference.label, "seed": seed, "metric": table.metric.label,
                        "value": value, "paired_difference": diff, "sim_time_s": sim, "sim_compute_s": comp,
                        "paper_figure": r.paper, "config_diff": r.config_diff, "verdict": d.verdict,
                        "decides": r.decides, "same_as": r.same_as, "state": r.state or None,
                        "t": t.t if t else math.nan, "t_critical": r.t_crit, "p": t.p if t else math.nan,
                        "holm_level": r.level, "collapsed": r.collapsed,
                        "collapsed_seed": seed in r.health.collapsed, "why_collapsed": r.health.collapsed.get(seed),
                        "tuned": json.dumps(r.tuned, sort_keys=True), "grid": json.dumps(r.grid, sort_keys=True),
                        "trials": r.trials, "raysfl_version": made["version"], "commit": made["commit"],
                        "date": made["date"]})
    return out


def write(table: Table, scale: str, seeds: list[int], results: list[RowResult], out_dir: Path, command: str,
          machine: str, settings_line: str, tuning_line: str = "", untuned: bool = False, timing: str = "") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    made = provenance()
    md = out_dir / "table.md"
    md.write_text(markdown(table, scale, seeds, results, command, machine, settings_line, made, tuning_line, untuned,
                           timing))
    pq.write_table(pa.Table.from_pylist(parquet_rows(table, scale, seeds, results, made, untuned)),
                   out_dir / "table.parquet")
    return md

