"""What evaluating only a table's rounds saved its runs, read from the runs' own rows in a cache.

    .venv/bin/python benchmarks/evaluation_in_runs.py [--cache docs/results/reproduce/cache]

For every run in a ``raysfl reproduce`` cache that evaluated some rounds only
(raysfl/reproduce/schedule.py), the median wall time of its evaluated rounds (round 1 left out:
it warms up) and of the rounds it did not evaluate, per algorithm and server reduction. The
ratio is the run's time on that schedule against every round evaluated, projected from those
two medians: (R x t_train + E x (t_eval - t_train)) / (R x t_eval) for R rounds of which E are
evaluated. The runs were measured as the table ran them (two at a time on this machine), so the
figures carry the same conditions on both sides of the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(ROOT / "docs" / "results" / "reproduce" / "cache"))
    args = ap.parse_args()
    groups: dict[tuple, list[tuple[float, float, int, int]]] = {}
    for path in sorted(Path(args.cache).glob("*.json")):
        data = json.loads(path.read_text())
        cfg, rows = data.get("config"), data.get("metrics")
        if not cfg or not rows or not cfg.get("eval_rounds"):
            continue
        evaluated = [r["wall_time_s"] for r in rows if math.isfinite(r["test_accuracy"]) and r["round"] > 1]
        not_evaluated = [r["wall_time_s"] for r in rows if not math.isfinite(r["test_accuracy"])]
        if not evaluated or not not_evaluated:
            continue
        reduction = (cfg.get("algo_params") or {}).get("server_reduction", "-")
        key = (cfg["algo"], reduction, cfg["dataset"], cfg["rounds"])
        groups.setdefault(key, []).append((statistics.median(evaluated), statistics.median(not_evaluated),
                                           len(evaluated) + 1, len(rows)))
    if not groups:
        raise SystemExit(f"no run in {args.cache} evaluated some rounds only")
    print("| algorithm | server reduction | data | runs | evaluated round (median s) | round not evaluated | "
          "evaluated | vs every round |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for (algo, reduction, dataset, rounds), runs in sorted(groups.items()):
        t_eval = statistics.median(r[0] for r in runs)
        t_train = statistics.median(r[1] for r in runs)
        n_eval = runs[0][2]
        ratio = (rounds * t_train + n_eval * (t_eval - t_train)) / (rounds * t_eval)
        print(f"| {algo} | {reduction} | {dataset} | {len(runs)} | {t_eval:.1f} | {t_train:.1f} | "
              f"{n_eval} of {rounds} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
