"""How often ``raysfl reproduce``'s seed rule finds a difference where there is none.

    .venv/bin/python scripts/seed_extension_error.py [--trials 20000] [--first 5] [--most 10 0] [--level 0.05 ...]

``raysfl reproduce`` decides a compared row at its first seeds (5) with a paired Student's t at
5 %, two-sided; where that leaves the row undecided and up to ``--most-seeds`` seeds would decide
a difference of the measured size and spread (``stats.seeds_to_settle``), it runs that many and
decides again, as often as that says more (``reproduce/command.py``). The seeds added depend on
what the first ones showed, so the test at the last look is not at 5 %. This simulates one
compared row with no true difference (per-seed paired differences drawn from a normal
distribution, seeded) through the project's own ``stats.paired`` and ``stats.seeds_to_settle``,
and prints the share of trials that end with the difference called significant, with its
standard error, for each ``--most`` (0: never add seeds, the test as designed) and each
``--level`` of every look (a smaller one than 5 % is how a design with looks keeps 5 % in all). Holm over
several rows is not simulated: with one compared row its level is 5 %.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raysfl.reproduce import stats  # noqa: E402


def ends_significant(diffs: np.ndarray, first: int, most: int, level: float = stats.ALPHA) -> tuple[bool, int]:
    """(whether the rule ends with the difference significant, the seeds it used), the seeds
    taken from ``diffs`` in order as ``raysfl reproduce`` adds them; ``level``: the two-sided
    level of every look (reproduce: 5 %; a smaller one is how a two-look design keeps 5 % in all)."""
    n = first
    while True:
        test = stats.paired(list(diffs[:n]))
        if test.p <= level:
            return True, n
        need = stats.seeds_to_settle(list(diffs[:n]), 0.0, level, most) if most else None
        target = min(need or 0, most)
        if target <= n:
            return False, n
        n = target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--first", type=int, default=5, help="the seeds decided on first (raysfl reproduce: 5)")
    ap.add_argument("--most", type=int, nargs="+", default=[stats.MOST_SEEDS, 0],
                    help="--most-seeds values (0: never add seeds)")
    ap.add_argument("--level", type=float, nargs="+", default=[stats.ALPHA],
                    help=f"the two-sided level of every look (default {stats.ALPHA:g}, reproduce's; several: each "
                         f"measured, e.g. 0.05 0.03 0.025 to find the one that keeps 5 %% in all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.trials < 1 or args.first < 2 or any(m < 0 for m in args.most) or not all(0 < a < 1 for a in args.level):
        ap.error(f"need --trials >= 1, --first >= 2, --most >= 0 and 0 < --level < 1; got {args.trials}, "
                 f"{args.first}, {args.most}, {args.level}")
    print(f"{args.trials} trials of one compared row with no true difference; first look at {args.first} seeds; "
          f"Student's t, two-sided")
    print("| --most-seeds | level of each look | called significant | standard error | trials that added seeds "
          "| seeds used, mean |")
    print("|---:|---:|---:|---:|---:|---:|")
    for most in args.most:
        for level in args.level:
            rng = np.random.default_rng(args.seed)
            hits = added = used = 0
            for _ in range(args.trials):
                diffs = rng.standard_normal(max(most, args.first))
                hit, n = ends_significant(diffs, args.first, most, level)
                hits += hit
                added += n > args.first
                used += n
            rate = hits / args.trials
            se = math.sqrt(rate * (1 - rate) / args.trials)
            print(f"| {most} | {level:g} | {100 * rate:.2f} % | {100 * se:.2f} % | {100 * added / args.trials:.1f} % | "
                  f"{used / args.trials:.2f} |")


if __name__ == "__main__":
    main()
