"""A table's numbers and verdict from its runs: mean ± std per row, the paired difference to the
reference ± its standard error (the same seeds: the same partition, profiles and initial model),
the paper's figure, each row's config diff, the time on the table's one cost model and on the
compute-only clock, and the verdict the claim's criterion gives. Written as ``table.md`` and
``table.parquet``."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from raysfl.reproduce.fairness import describe
from raysfl.reproduce.tables import Metric, Table


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

    @property
    def mean(self) -> float:
        return statistics.mean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.values) if len(self.values) > 1 else 0.0

    @property
    def diff_mean(self) -> float:
        return statistics.mean(self.diffs) if self.diffs else math.nan

    @property
    def diff_se(self) -> float:
        return statistics.stdev(self.diffs) / math.sqrt(len(self.diffs)) if len(self.diffs) > 1 else math.nan


def row_results(table: Table, seeds: list[int], runs: dict[str, list[list[dict]]], diffs: dict[str, dict]) -> list[RowResult]:
    ref_vals = [table.metric_of(table.reference).value(rows)[0] for rows in runs[table.reference.label]]
    out = []
    for row in table.all_rows:
        vals = [table.metric_of(row).value(rows) for rows in runs[row.label]]
        values = [v for v, _ in vals]
        out.append(RowResult(
            row.label, values, sum(1 for _, c in vals if c), [v - r for v, r in zip(values, ref_vals)],
            [rows[-1]["sim_time_total_s"] if rows else math.nan for rows in runs[row.label]],
            [rows[-1].get("sim_compute_total_s", math.nan) if rows else math.nan for rows in runs[row.label]],
            row.paper, describe(diffs.get(row.label, {}), row) + (f"; reads {row.column}" if row.column else "")))
    return out


def verdict(table: Table, results: list[RowResult], n_seeds: int) -> tuple[str, list[str]]:
    """(verdict, one reason per compared row) from the claim's criterion on paired seeds:
    ``reproduced`` (every compared row decided the claimed way, beyond two standard errors),
    ``contradicted`` (some row decided the other way), ``not shown`` (within noise), or
    ``too few seeds`` (fewer than the claim's ``min_seeds``)."""
    claim, sign = table.claim, (1.0 if table.metric.higher_is_better else -1.0)
    by = {r.label: r for r in results}
    reasons, states = [], []
    for label in table.compared():
        r = by[label]
        adv = -sign * r.diff_mean  # the reference's advantage over this row, in the favourable direction
        se = r.diff_se
        if claim.kind == "better":
            ok = adv >= claim.margin and (math.isnan(se) or adv > 2 * se) and adv > 0
            bad = adv < 0 and not math.isnan(se) and -adv > 2 * se
        else:  # not_worse
            ok = adv > -claim.margin and (math.isnan(se) or adv + claim.margin > 2 * se)
            bad = adv < -claim.margin and not math.isnan(se) and -(adv + claim.margin) > 2 * se
        states.append("ok" if ok else "bad" if bad else "noise")
        reasons.append(f"vs {label}: reference advantage {_num(adv, table.metric)} ± {_num(se, table.metric)} (SE)")
    if n_seeds < claim.min_seeds:
        return f"too few seeds ({n_seeds} < {claim.min_seeds}): no verdict", reasons
    if states and all(s == "ok" for s in states):
        return "reproduced", reasons
    if any(s == "bad" for s in states):
        return "contradicted", reasons
    return "not shown (within two standard errors)", reasons


def _num(v: float, metric: Metric) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return f"{100 * v:.1f} pts" if metric.higher_is_better and "accuracy" in metric.column else f"{v:.3g}"


def _cell(values: list[float], metric: Metric) -> str:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "—"
    m, s = statistics.mean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)
    if metric.higher_is_better and "accuracy" in metric.column:
        return f"{100 * m:.1f} ± {100 * s:.1f}"
    return f"{m:.3g} ± {s:.2g}"


def markdown(table: Table, scale: str, seeds: list[int], results: list[RowResult], command: str,
             machine: str, settings_line: str) -> str:
    metric = table.metric
    unit = " (%)" if metric.higher_is_better and "accuracy" in metric.column else ""
    v, reasons = verdict(table, results, len(seeds))
    lines = [f"# {table.paper}: {table.title}", "",
             f"{table.source}. Claim: {table.claim.text}", "",
             f"Command: `{command}`  ",
             f"Machine: {machine}  ",
             f"Scale: {scale}; seeds: {', '.join(map(str, seeds))}; shared settings: {settings_line}  ",
             f"Metric: {metric.label}{unit}, mean ± std over seeds; the difference to the reference is paired "
             f"(same seed: same partition, profiles and initial model), ± its standard error.", "",
             f"| row | {metric.label}{unit} | paired difference to reference | paper | simulated s (cost model) | "
             f"simulated s (compute only) | config diff vs reference |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in results:
        is_ref = r.label == table.reference.label
        diff = "—" if is_ref else f"{_num(r.diff_mean, metric)} ± {_num(r.diff_se, metric)}"
        cens = f" ({r.censored} never reached)" if r.censored else ""
        lines.append(f"| {r.label}{' (reference)' if is_ref else ''} | {_cell(r.values, metric)}{cens} | {diff} | "
                     f"{r.paper or '—'} | {_plain(r.sim_s)} | {_plain(r.compute_s)} | {r.config_diff} |")
    lines += ["", f"**Verdict: {v}.** " + "; ".join(reasons) + "."]
    lines += ["", f"At the paper's scale: `raysfl reproduce {table.paper} --table {table.name} --scale paper --download`"
              + (f" ({table.paper_hours})." if table.paper_hours else ".")]
    if table.notes:
        lines += ["", " ".join(table.notes.split())]
    return "\n".join(lines) + "\n"


def _plain(values: list[float]) -> str:
    vals = [v for v in values if not math.isnan(v)]
    return f"{statistics.mean(vals):.3g}" if vals else "—"


def parquet_rows(table: Table, scale: str, seeds: list[int], results: list[RowResult]) -> list[dict]:
    out = []
    for r in results:
        for seed, value, d, sim, comp in zip(seeds, r.values, r.diffs, r.sim_s, r.compute_s):
            out.append({"paper": table.paper, "table": table.name, "scale": scale, "row": r.label,
                        "reference": r.label == table.reference.label, "seed": seed, "metric": table.metric.label,
                        "value": value, "paired_difference": d, "sim_time_s": sim, "sim_compute_s": comp,
                        "paper_figure": r.paper, "config_diff": r.config_diff})
    return out


def write(table: Table, scale: str, seeds: list[int], results: list[RowResult], out_dir: Path, command: str,
          machine: str, settings_line: str) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "table.md"
    md.write_text(markdown(table, scale, seeds, results, command, machine, settings_line))
    pq.write_table(pa.Table.from_pylist(parquet_rows(table, scale, seeds, results)), out_dir / "table.parquet")
    return md
