"""What a paper's table is, declared as data: a reference row, rows that each name their
deltas from it, the metric and when it is read, the paper's figures and the claim's criterion.

Each paper's package declares its tables in its own ``tables.py`` (``TABLES``); the harness
(:mod:`raysfl.reproduce.engine`) resolves every row, refuses a row that differs from its
reference in anything it does not declare (:mod:`raysfl.reproduce.fairness`), runs the rows
over paired seeds and writes the table (:mod:`raysfl.reproduce.report`). No torch here: the
list of tables is instant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

SCALES = ("small", "paper")
READS = ("final", "mean_last", "best", "rounds_to", "sim_time_to", "compute_time_to", "bytes_to")


@dataclass(frozen=True)
class Metric:
    """The number a table compares, read from a run's ``metrics.parquet`` rows.

    ``read``: ``final`` (test accuracy after the last round), ``mean_last`` (mean test
    accuracy of the last ``k`` evaluated rounds), ``best``, ``rounds_to`` / ``sim_time_to`` /
    ``compute_time_to`` / ``bytes_to`` (the round, simulated seconds on the table's cost model,
    simulated compute-only seconds, or megabytes sent up and down so far, when test accuracy
    first reaches ``target``; a run that never reaches it counts as its whole length, flagged
    in the table)."""

    read: str = "final"
    k: int = 5
    target: float | None = None
    column: str = "test_accuracy"

    def __post_init__(self):
        if self.read not in READS:
            raise ValueError(f"unknown read '{self.read}'; allowed: {', '.join(READS)}")
        if self.read.endswith("_to") and self.target is None:
            raise ValueError(f"metric '{self.read}' needs a target")

    @property
    def higher_is_better(self) -> bool:
        # a *_to read is a time or a round count, and so is a clock column (``sim_time_total_s``)
        return not (self.read.endswith("_to") or self.column.endswith("_s"))

    @property
    def learning_only(self) -> bool:
        """Whether the metric reads only what a run learns (an accuracy or a loss, at the end or
        the round it reaches a target), not its simulated clock or its bytes: two runs that learn
        alike then give the same figure (:func:`raysfl.reproduce.fairness.same_by_construction`)."""
        return (self.read in ("final", "mean_last", "best", "rounds_to") and not self.column.endswith("_s")
                and ("acc" in self.column or "loss" in self.column))

    @property
    def label(self) -> str:
        if self.read == "final":
            return f"{self.column} after the last round"
        if self.read == "mean_last":
            return f"mean {self.column} of the last {self.k} evaluated rounds"
        if self.read == "best":
            return f"best {self.column}"
        what = {"rounds_to": "rounds", "sim_time_to": "simulated s (the table's cost model)",
                "compute_time_to": "simulated compute-only s", "bytes_to": "MB sent (up + down)"}[self.read]
        return f"{what} to {self.column} {self.target:g}"

    def value(self, rows: list[dict]) -> tuple[float, bool]:
        """(the value, whether it is censored: a ``*_to`` target never reached)."""
        ev = [r for r in rows if _finite(r.get(self.column))]
        if self.read == "final":
            return (ev[-1][self.column] if ev else math.nan), False
        if self.read == "mean_last":
            last = ev[-self.k:]
            return (sum(r[self.column] for r in last) / len(last) if last else math.nan), False
        if self.read == "best":
            return (max(r[self.column] for r in ev) if ev else math.nan), False
        if self.read == "bytes_to":  # megabytes sent up and down up to and including the round
            sent, at = 0.0, {}
            for r in rows:
                sent += float(r.get("bytes_up", 0) or 0) + float(r.get("bytes_down", 0) or 0)
                at[r["round"]] = sent / 1e6
            clock = lambda r: at[r["round"]]  # noqa: E731
        else:
            column = {"rounds_to": "round", "sim_time_to": "sim_time_total_s",
                      "compute_time_to": "sim_compute_total_s"}[self.read]
            clock = lambda r: float(r[column])  # noqa: E731
        for r in ev:
            if r[self.column] >= self.target:
                return clock(r), False
        return (clock(rows[-1]) if rows else math.nan), True


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


@dataclass(frozen=True)
class Row:
    """One row: ``settings`` are its deltas from the table's reference row (``algo``, an
    algorithm's knobs under its name, any shared setting); ``compares`` names the facets of an
    algorithm (:meth:`raysfl.algorithms.spec.Algorithm.facets`: server reduction, step
    schedule, cost model) the row changes on purpose; ``paper``: the paper's figure for it;
    ``column``: the metric's column for this row where it is not the table's (BESplit-A is
    another column of BESplit's run, ``acc_aux_local``), read the table's way."""

    label: str
    settings: dict = field(default_factory=dict)
    compares: tuple[str, ...] = ()
    paper: str | None = None
    note: str = ""
    column: str | None = None


@dataclass(frozen=True)
class Claim:
    """The paper's claim about the table and the criterion that decides it from paired seeds.

    ``kind="better"``: the reference row beats each row of ``rows`` (default: every other
    row): its mean paired difference is at least ``margin`` in the metric's favourable
    direction and its t statistic beyond Student's two-sided critical value at the seed count
    and the row's Holm level (:func:`raysfl.reproduce.report.decide`). ``kind="not_worse"``:
    the reference is at most ``margin`` worse than each row, by the same test. Verdicts need
    at least ``min_seeds`` seeds (DEVELOPERS.md: five)."""

    text: str
    kind: str = "better"
    rows: tuple[str, ...] = ()
    margin: float = 0.0
    min_seeds: int = 5


HALF_DECADES = (1.0, 10 ** -0.5, 0.1, 10 ** 0.5)  # multiples of a row's own lr: 1.5 decades, its own value first


def _sig(v: float) -> float:
    """Three significant digits: grid values that read as they are (0.00158, not 0.0015811388)."""
    return float(f"{v:.3g}")


@dataclass(frozen=True)
class Tuning:
    """How every row of a table is tuned (:mod:`raysfl.tuning`), the same way for each row.

    ``factors``: knob -> multiples of the row's own resolved value (``lr``; ``server_lr``: its
    server lr, else its lr), searched on a log scale; ``values``: knob -> values (``momentum``);
    ``paper``: knob -> the paper's own value where the scale runs another (BESplit's lr 1e-4),
    added to the grid. A knob a row's algorithm does not read is left out of its grid (FedAvg
    has no server lr). ``metric``: what the choice is judged by, where not the table's (a table
    that reads other figures of another table's runs is tuned as that table is); ``seeds``
    tuning seeds (1000, 1001, ...), ``validation`` the share of the training split they
    evaluate on."""

    factors: dict = field(default_factory=lambda: {"lr": HALF_DECADES})
    values: dict = field(default_factory=dict)
    paper: dict = field(default_factory=dict)
    metric: Metric | dict | None = None  # a Metric, or {scale: Metric}
    seeds: int = 2
    validation: float = 0.2

    def grid(self, cfg) -> dict[str, tuple[float, ...]]:
        """The grid for a row resolved as ``cfg``: its own value of each knob first."""
        out = {}
        for knob, factors in self.factors.items():
            own = cfg.server_lr if knob == "server_lr" and cfg.server_lr is not None else (
                cfg.lr if knob in ("lr", "server_lr") else getattr(cfg, knob))
            vals = [_sig(own * f) for f in factors]
            out[knob] = tuple(vals)
        for knob, vals in self.values.items():
            own = getattr(cfg, knob, None)
            out[knob] = tuple(sorted(vals, key=lambda v: v != own))
        for knob, v in self.paper.items():
            if v not in out.get(knob, ()):
                out[knob] = (*out.get(knob, ()), v)
        return out


@dataclass(frozen=True)
class Table:
    """A paper's table. The settings of a row at a scale are ``scales[scale]``, then
    ``shared``, then the reference row's settings, then the row's own (a row that changes the
    algorithm drops the reference's knobs)."""

    paper: str
    name: str
    title: str
    source: str                       # where in the paper: "Table II, Sec. IV-B"
    reference: Row
    rows: tuple[Row, ...]
    metric: Metric
    claim: Claim
    shared: dict = field(default_factory=dict)
    scales: dict = field(default_factory=dict)  # {"small": {...}, "paper": {...}}
    paper_hours: str = ""             # the paper scale's cost on a GPU node, in words
    notes: str = ""
    tuning: Tuning | None = field(default_factory=Tuning)  # None: not tuned (``untuned`` says why)
    untuned: str = ""                 # why a table is not tuned (its metric does not depend on the lr)
    shown: tuple[Metric, ...] = ()    # figures shown beside the metric, not deciding (SuperSFL's final accuracy)
    scale_metric: dict = field(default_factory=dict)  # {scale: Metric} where a scale reads another (a target)

    def __post_init__(self):
        labels = [self.reference.label, *(r.label for r in self.rows)]
        if len(set(labels)) != len(labels):
            raise ValueError(f"{self.paper}/{self.name}: a row label is used twice: {labels}")
        missing = [s for s in SCALES if s not in self.scales]
        if missing:
            raise ValueError(f"{self.paper}/{self.name}: no settings for scale(s) {missing}")
        unknown = [r for r in self.claim.rows if r not in labels]
        if unknown:
            raise ValueError(f"{self.paper}/{self.name}: the claim names unknown rows {unknown}")
        if self.tuning is None and not self.untuned:
            raise ValueError(f"{self.paper}/{self.name}: a table that is not tuned says why (untuned=...)")

    def at_scale(self, scale: str) -> "Table":
        """The table as ``scale`` reads it: its metric there (where the scale has its own), and
        its tuning's (a tuning metric given per scale)."""
        out = replace(self, metric=self.scale_metric[scale]) if scale in self.scale_metric else self
        if out.tuning is not None and isinstance(out.tuning.metric, dict):
            out = replace(out, tuning=replace(out.tuning, metric=out.tuning.metric.get(scale)))
        return out

    @property
    def tuning_metric(self) -> Metric:
        return (self.tuning.metric if self.tuning is not None and self.tuning.metric is not None else self.metric)

    @property
    def all_rows(self) -> tuple[Row, ...]:
        return (self.reference, *self.rows)

    def metric_of(self, row: Row) -> Metric:
        """The metric as ``row`` reads it: the table's, on the row's own column if it names one."""
        return replace(self.metric, column=row.column) if row.column else self.metric

    def compared(self) -> tuple[str, ...]:
        """The rows the claim is about (default: every row but the reference)."""
        return self.claim.rows or tuple(r.label for r in self.rows)
