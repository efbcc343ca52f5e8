"""The rounds a table's runs evaluate: those its metric and its guards read, not every round
(ours; docs/performance.md, section 8).

A paper's table reads a run's accuracy after its last round, or the mean of its last k
evaluations, and the guards (:mod:`raysfl.reproduce.guards`) read the first evaluation (a row
that barely moved), the last ``2 K`` (still climbing) and the run's best (fallen from what it had
learnt). Evaluating every round costs a large share of a run where each client keeps a model of
its own: GAPSL's ten client models on mnist5k score the 1,000 test images each, about as much
arithmetic as a round's training. A round's evaluation does not touch its training (every
algorithm: tests/test_evaluation_schedule.py), so a table's runs evaluate round 1, every
``K``-th round and the last ``2 K``; a table that reads the whole run (a best, a round or a
time to a target) evaluates every round.

So that every row of a table is read the same way, a run evaluated in more rounds (one cached
by an earlier version, which evaluated every round) is read at the table's rounds only
(:func:`read_at`).
"""

from __future__ import annotations

import dataclasses
import math

from raysfl.paper_tables import Metric, Table
from raysfl.reproduce.guards import K, accuracy_column

SPARSE_READS = ("final", "mean_last")  # reads of the last evaluations alone


def metrics_read(table: Table) -> list[Metric]:
    """Every metric a table reads: its own (on each row's column where a row names one) and the
    figures it shows beside it."""
    own = [table.metric] + [table.metric_of(row) for row in table.all_rows if row.column]
    return own + list(table.shown)


def eval_rounds(table: Table, rounds: int) -> str:
    """The rounds a run of ``rounds`` rounds in ``table`` evaluates, as ``--eval-rounds``
    (:func:`rounds_for` of the metrics it reads)."""
    return rounds_for(metrics_read(table), rounds)


def rounds_for(read: list[Metric], rounds: int) -> str:
    """The rounds a run of ``rounds`` rounds evaluates for metrics ``read`` and the guards:
    round 1, every ``K``-th and the last ``2 K`` (or the last ``k`` of a mean where that is
    more); "" (every round) where a metric reads the whole run, or where that is every round
    anyway."""
    if any(m.read not in SPARSE_READS for m in read):
        return ""
    last = max([2 * K] + [m.k for m in read if m.read == "mean_last"])
    start = rounds - last + 1
    if start <= 2:
        return ""
    early = sorted({1, *range(K, start, K)})
    return ",".join([*map(str, early), f"{start}-{rounds}"])


def with_schedule(cfg, table: Table):
    """``cfg`` evaluating the rounds ``table`` reads (:func:`eval_rounds`), unless it already
    evaluates on a schedule of its own (``--eval-every`` or ``--eval-rounds`` given)."""
    from raysfl.tuning.rules import evaluating

    return evaluating(cfg, eval_rounds(table, cfg.rounds))


def every_round(cfg):
    """``cfg`` evaluating every round: the run a version before table schedules made."""
    return dataclasses.replace(cfg, eval_every=1, eval_rounds="")


def columns_read(table: Table) -> set[str]:
    """The evaluation's columns a table reads: its metrics' columns where they are evaluated
    figures (not a clock or bytes), the accuracy its guards read, and the test loss."""
    out = {"test_accuracy", "test_loss"}
    for m in metrics_read(table):
        if m.read in SPARSE_READS and m.higher_is_better:
            out |= {m.column, accuracy_column(m.column)}
    return out


def read_at(rows: list[dict], cfg, columns: set[str]) -> list[dict]:
    """``rows`` as a run of ``cfg`` reads them: ``columns`` NaN in the rounds ``cfg`` does not
    evaluate. A run evaluated in every round then reads as one evaluated on ``cfg``'s schedule."""
    if not cfg.eval_rounds:
        return rows
    from raysfl.config import round_set

    keep = round_set(cfg.eval_rounds) | {cfg.rounds}
    return [r if r.get("round") in keep else {**r, **{c: math.nan for c in columns if c in r}} for r in rows]


def schedule_text(cfg) -> str:
    """The schedule in a table's shared settings, or "" where the runs evaluate every round."""
    if not cfg.eval_rounds:
        return ""
    return f", evaluated in rounds {cfg.eval_rounds} (ours: the rounds the metric and the guards read)"
