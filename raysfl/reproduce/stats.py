"""The statistics a verdict rests on: a paired Student's t test at the table's own seed count
(two-sided, 5 %), Holm-Bonferroni across the rows a claim compares, and when more seeds would
settle an undecided row.

Pure Python (no SciPy in raysfl's stack): Student's t CDF through the regularised incomplete
beta function (the continued fraction of Numerical Recipes, Sec. 6.4), its quantile by
bisection. ``tests/test_reproduce_stats.py`` checks both against printed tables
(t(0.975, 4) = 2.776, t(0.975, 9) = 2.262).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALPHA = 0.05  # two-sided, family-wise over the rows a claim compares (Holm)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``t_quantile(0.975, 4)`` = 2.776)."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile needs 0 < q < 1, got {q}")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Paired:
    """A paired test of ``values`` (one per seed) against ``shift``: their mean, its standard
    error, t = (mean - shift) / se, the degrees of freedom (seeds - 1) and the two-sided p."""

    mean: float
    se: float
    t: float
    df: int
    p: float


def paired(values: list[float], shift: float = 0.0) -> Paired:
    """Student's t on per-seed paired differences (``values``), two-sided. A difference that is
    the same on every seed has no spread: t is infinite unless it equals ``shift`` (p 0 or 1)."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    n = len(vals)
    if n < 2:
        return Paired(vals[0] if vals else math.nan, math.nan, math.nan, max(n - 1, 0), math.nan)
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    se = sd / math.sqrt(n)
    gap = mean - shift
    if sd <= 1e-12 * max(1.0, abs(mean)):  # the same difference on every seed (up to rounding)
        se = 0.0
        t = 0.0 if abs(gap) <= 1e-12 * max(1.0, abs(mean)) else math.copysign(math.inf, gap)
    else:
        t = gap / se
    p = 1.0 if t == 0 else 2.0 * (1.0 - t_cdf(abs(t), n - 1))
    return Paired(mean, se, t, n - 1, max(0.0, min(1.0, p)))


def holm(pvalues: list[float], alpha: float = ALPHA) -> list[tuple[bool, float]]:
    """Holm-Bonferroni over ``pvalues``: per value (rejected, the level it was tested at). The
    i-th smallest p is tested at alpha / (m - i); the first that fails stops the procedure, and
    every larger p is not rejected (NaN p: never rejected, tested last)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: (math.isnan(pvalues[i]), pvalues[i]))
    out: list[tuple[bool, float]] = [(False, alpha / m if m else alpha)] * m
    going = True
    for rank, i in enumerate(order):
        level = alpha / (m - rank)
        p = pvalues[i]
        going = going and not math.isnan(p) and p <= level
        out[i] = (going, level)
    return out


def critical_t(level: float, df: int) -> float:
    """The two-sided critical |t| at ``level`` with ``df`` degrees of freedom."""
    return t_quantile(1.0 - level / 2.0, df) if df >= 1 else math.nan


MOST_SEEDS = 10  # where the table's seeds leave a row undecided and this many would settle it: run them


def more_seeds(seeds: list[int], total: int, avoid=()) -> list[int]:
    """``seeds`` and the next seeds after the largest, up to ``total`` in all, skipping ``avoid``
    (the table's tuning seeds: a table is never judged on a seed its settings were chosen on)."""
    out, avoid, s = list(seeds), set(avoid), max(seeds) + 1
    while len(out) < total:
        if s not in avoid:
            out.append(s)
        s += 1
    return out


def seeds_to_settle(values: list[float], shift: float, level: float, most: int) -> int | None:
    """The fewest seeds (at most ``most``) at which a difference of this mean and spread would
    pass the two-sided test at ``level`` (the spread taken as measured); None when even ``most``
    would not. What ``raysfl reproduce`` reads to run 10 seeds where 5 leave a row undecided."""
    vals = [v for v in values if math.isfinite(v)]
    if len(vals) < 2:
        return None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    gap = abs(mean - shift)
    if gap == 0:
        return None
    for n in range(len(vals), most + 1):
        if sd <= 1e-12 * max(1.0, abs(mean)) or gap / (sd / math.sqrt(n)) > critical_t(level, n - 1):
            return n
    return None
