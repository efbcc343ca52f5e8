"""What keeps a verdict from resting on a broken run: a row at chance, fallen from what it had
learnt, or diverging on any seed (the table is then inconclusive), and the warnings a reader needs -- a reference still
climbing when the rows stop, a row that barely moved from its start, an evaluation period the
last round cuts.

Every check reads a run's own ``metrics.parquet`` rows (as the engine caches them); the
thresholds are here, named, and stated in each table that trips them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CHANCE_FACTOR = 1.5   # at chance: final accuracy at most 1.5x the chance accuracy (1 / classes); on the
                      # clients' own splits, at most what a constant prediction scores there + 0.5 / classes
K = 5                 # the last k rounds the trends are read over
RISE = 1.25           # diverging: the last k rounds' mean loss 25 % above the best earlier k-round mean, still rising,
RISE_BY = 0.1         # ... and at least 0.1 above it (a loss of 0.04 that wobbles to 0.06 has converged, not diverged)
FELL = 0.5            # fallen: the last k evaluations' mean keeps under half of the run's best gain over chance
CLIMB = 0.01          # still climbing: accuracy's last-k mean 1 point above the k rounds before, still rising
STILL = 0.02          # barely moved: below chance + 1 / classes at the end (2x chance on the global test set),
                      # or within 2 points of the first evaluation below 50 %


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _evaluated(rows: list[dict], column: str) -> list[float]:
    """The run's finite values of ``column``, in round order (rounds not evaluated left out)."""
    return [r[column] for r in rows if _finite(r.get(column))]


def accuracy_column(column: str) -> str:
    """The accuracy a collapse is read on: the row's own metric column where it is an
    accuracy (BESplit's ``acc_aux_local``, ``test_accuracy_local``), else ``test_accuracy``."""
    return column if "acc" in column else "test_accuracy"


def _slope(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    xm, ym = (n - 1) / 2.0, sum(values) / n
    return sum((i - xm) * (v - ym) for i, v in enumerate(values)) / sum((i - xm) ** 2 for i in range(n))


def diverging(rows: list[dict], k: int = K) -> str | None:
    """Why a run diverged, or None: a non-finite training loss in some round, or the loss of
    its last ``k`` rounds rising and on average ``RISE`` x the best earlier ``k``-round mean
    (and ``RISE_BY`` above it)."""
    losses = [r.get("train_loss") for r in rows]
    reports = any(_finite(v) for v in losses)  # a NaN in a run that reports losses: it went non-finite
    for r, v in zip(rows, losses):
        if isinstance(v, float) and not math.isfinite(v) and (math.isinf(v) or (reports and r.get("participants", 1))):
            return f"non-finite training loss in round {r.get('round')}"
    vals = [v for v in losses if _finite(v)]
    if len(vals) < 2 * k:
        return None
    last = sum(vals[-k:]) / k
    best = min(sum(vals[i:i + k]) / k for i in range(len(vals) - k))
    if best > 0 and last > RISE * best and last - best >= RISE_BY and _slope(vals[-k:]) > 0:
        return f"training loss rising over the last {k} rounds ({best:.3g} -> {last:.3g})"
    return None


def final_accuracy(rows: list[dict], column: str) -> float:
    ev = _evaluated(rows, column)
    return ev[-1] if ev else math.nan


def floor_column(column: str) -> str | None:
    """The column holding the floor of an accuracy on the clients' own test splits:
    ``test_accuracy_local`` -> ``chance_local``, ``acc_<x>_local`` -> ``chance_<x>_local``
    (BESplit's ``acc_aux_local``, ``acc_g_local``); None for any other column."""
    if column == "test_accuracy_local":
        return "chance_local"
    if column.startswith("acc_") and column.endswith("_local"):
        return "chance_" + column[len("acc_"):]
    return None


def chance(rows: list[dict], column: str, num_classes: int) -> float:
    """What a model that learnt nothing scores on ``column``: 1 / classes on the global test
    set; on the clients' own test splits the run's floor of that accuracy (:func:`floor_column`,
    ours): what a constant prediction scores there -- each client's commonest class where each
    has a model of its own (BESplit-A's auxiliary models, psl's), one class for all where they
    share one -- which under a strong label skew lies far above 1 / classes, so that a model
    stuck on a constant is seen. ``raysfl reproduce`` gives a run made before the columns
    existed (2026-12-07) their values from its config
    (:func:`raysfl.reproduce.engine.with_local_chance`); rows without them read 1 / classes."""
    floor = 1.0 / num_classes
    name = floor_column(column)
    known = _evaluated(rows, name) if name else []
    return max(floor, known[-1]) if known else floor


def at_chance(rows: list[dict], column: str, num_classes: int) -> bool:
    """The run ends at chance: its last accuracy at most :func:`chance` + (``CHANCE_FACTOR`` - 1)
    / classes -- 1.5 / classes on the global test set (a run with no accuracy at all counts too:
    it never evaluated a model that works)."""
    acc = final_accuracy(rows, column)
    return not math.isfinite(acc) or acc <= chance(rows, column, num_classes) + (CHANCE_FACTOR - 1.0) / num_classes


def fell(rows: list[dict], column: str, num_classes: int, k: int = K) -> str | None:
    """Why a run fell from what it had learnt, or None: the mean of its last ``k`` evaluations
    keeps less than ``FELL`` of its best accuracy's gain over chance. A network that dies after
    learning (BESplit at a large step: 0.99, then a constant 0.18 with a flat loss) is neither at
    chance nor rising in loss, and its end is not the method's accuracy."""
    ev = _evaluated(rows, column)
    if len(ev) < 2 * k:
        return None
    chance_, best, last = chance(rows, column, num_classes), max(ev), sum(ev[-k:]) / k
    if best > chance_ + 1.0 / num_classes and last < chance_ + FELL * (best - chance_):
        return f"fell from {column} {best:.3f} to {last:.3f} over its last {k} evaluations"
    return None


def collapse(rows: list[dict], column: str, num_classes: int, k: int = K) -> str | None:
    """Why a run collapsed (at chance, fallen from what it had learnt, or diverging), or None."""
    if at_chance(rows, column, num_classes):
        acc, floor = final_accuracy(rows, column), chance(rows, column, num_classes)
        if floor > 1.0 / num_classes:
            return (f"at chance ({column} {acc:.3f} <= {floor_column(column)} {floor:.3f} "
                    f"+ {CHANCE_FACTOR - 1:g} / {num_classes})")
        return f"at chance ({column} {acc:.3f} <= {CHANCE_FACTOR:g} / {num_classes})"
    return fell(rows, column, num_classes, k) or diverging(rows, k)


def climbing(rows: list[dict], column: str, k: int = K) -> bool:
    """Accuracy still rising when the run stops: the last ``k`` evaluations' mean ``CLIMB``
    above the ``k`` before, and their trend up."""
    ev = _evaluated(rows, column)
    if len(ev) < 2 * k:
        return False
    last, before = sum(ev[-k:]) / k, sum(ev[-2 * k:-k]) / k
    return last - before > CLIMB and _slope(ev[-k:]) > 0


def moved(rows: list[dict], column: str) -> tuple[float, float]:
    """(first, last) evaluated accuracy of a run."""
    ev = _evaluated(rows, column)
    return (ev[0], ev[-1]) if ev else (math.nan, math.nan)


def evaluated_before_the_end(rows: list[dict]) -> int | None:
    """The round the last evaluation's model comes from where it is older than the run's last
    round (FLEX-SFL evaluates W_global, built every tau_G rounds: ``w_global_round``), else None."""
    if not rows:
        return None
    last = rows[-1]
    at = last.get("w_global_round")
    if _finite(at) and int(at) < int(last["round"]):
        return int(at)
    return None


@dataclass
class RowHealth:
    """A row's health over its seeds: which collapsed and why, whether it is still climbing
    (on most seeds), whether it barely moved, and an evaluation period the last round cuts."""

    collapsed: dict[int, str] = field(default_factory=dict)   # seed -> why
    climbing: bool = False
    barely_moved: tuple[float, float] | None = None           # (mean first, mean last) when it barely moved
    stale_eval: int | None = None                             # the round the last evaluation's model is from


def row_health(runs: list[list[dict]], seeds: list[int], column: str, num_classes: int,
               accuracy: bool = True) -> RowHealth:
    """Every guard on one row's runs (``runs``: metrics rows per seed, in ``seeds`` order).
    ``accuracy``: whether the table learns something (an accuracy, a time to a target); a
    table of simulated time alone still refuses a diverging run, not one at chance."""
    acc = accuracy_column(column)
    h = RowHealth()
    for seed, rows in zip(seeds, runs):
        why = collapse(rows, acc, num_classes) if accuracy else diverging(rows)
        if why:
            h.collapsed[seed] = why
    h.climbing = sum(climbing(rows, acc) for rows in runs) > len(runs) / 2
    firsts, lasts = zip(*[moved(rows, acc) for rows in runs]) if runs else ((), ())
    f = [v for v in firsts if math.isfinite(v)]
    last = [v for v in lasts if math.isfinite(v)]
    if accuracy and f and last:
        mf, ml = sum(f) / len(f), sum(last) / len(last)
        floor = sum(chance(rows, acc, num_classes) for rows in runs) / len(runs)
        if ml < floor + 1.0 / num_classes or (ml - mf < STILL and ml < 0.5):
            h.barely_moved = (mf, ml)
    stale = [evaluated_before_the_end(rows) for rows in runs]
    h.stale_eval = next((s for s in stale if s is not None), None)
    return h
