"""FLEX-SFL's tau_c x tau_e grid (the paper's Table 6) on an offline data set, over seeds.

    .venv/bin/python benchmarks/flex_sfl_grid.py --dataset digits          # tau in {1, 2, 4, 8}, 3 seeds
    .venv/bin/python benchmarks/flex_sfl_grid.py --taus 1 2 3 4 5 6 7 8     # the full grid
    .venv/bin/python benchmarks/flex_sfl_grid.py --taus 1 4 8 --tau-e 1 2    # rows tau_c, columns tau_e

The paper's metric: mean test accuracy of the last 10 rounds (W_global, as FLEX-SFL reports
it), lambda = 0.4, everything else at FLEX-SFL's defaults: 100 clients x 2 classes, power-law
sizes, rho 0.2, 3 edge servers, tau_r 10, and Table 2's optimiser for FMNIST (lr 0.1, decay
0.98, plain SGD). Each cell is mean ± std over the seeds; the verdicts compare cells by their
means and say whether the gap exceeds the seeds' spread.
"""

from __future__ import annotations

import argparse
import statistics

from sweep import last_mean, mean_std, run, start_ray, write_tables

PAPER_BEST = "tau_c = 4, tau_e = 1 (0.8941); synchronous tau_c = tau_e = 1: 0.8814; tau_e = 1 best in every row"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taus", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--tau-e", type=int, nargs="+", default=None, help="columns, if not --taus (a subset)")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--cache", default="/tmp/raysfl-bench-cache", help="finished runs are kept here")
    ap.add_argument("--out", default=None, help="default: docs/results/flex-sfl-grid-<dataset>.md")
    args = ap.parse_args()
    tau_e = args.tau_e or args.taus
    out = args.out or f"docs/results/flex-sfl-grid-{args.dataset}.md"

    start_ray(args.num_cpus)
    rows = []
    for seed in args.seeds:
        for tc in args.taus:
            for te in tau_e:
                metrics = run(cache=args.cache, algo="flex_sfl", dataset=args.dataset, rounds=args.rounds, seed=seed,
                              flex_sfl={"tau_c": tc, "tau_e": te, "random_ratio": 0.4})
                rows.append({"tau_c": tc, "tau_e": te, "seed": seed, "last10_accuracy": last_mean(metrics),
                             "final_accuracy": metrics[-1]["test_accuracy"]})
                print(f"seed {seed} tau_c={tc} tau_e={te}: last-10 mean {rows[-1]['last10_accuracy']:.4f}", flush=True)
    cell = {(tc, te): [r["last10_accuracy"] for r in rows if (r["tau_c"], r["tau_e"]) == (tc, te)]
            for tc in args.taus for te in tau_e}
    mean = {k: statistics.mean(v) for k, v in cell.items()}
    sd = {k: statistics.stdev(v) if len(v) > 1 else 0.0 for k, v in cell.items()}
    lines = ["Mean test accuracy of the last 10 rounds, mean ± std over seeds (rows tau_c, columns tau_e):", "",
             "| tau_c \\ tau_e | " + " | ".join(str(t) for t in tau_e) + " |",
             "|---|" + "---:|" * len(tau_e)]
    for tc in args.taus:
        lines.append(f"| **{tc}** | " + " | ".join(mean_std(cell[(tc, te)]) for te in tau_e) + " |")
    best = max(mean, key=mean.get)
    sync = (1, 1) if (1, 1) in mean else None
    best_te = {tc: max(tau_e, key=lambda te: mean[(tc, te)]) for tc in args.taus}
    col_mean = {te: statistics.mean(mean[(tc, te)] for tc in args.taus) for te in tau_e}
    row_mean = {tc: statistics.mean(mean[(tc, te)] for te in tau_e) for tc in args.taus}
    lines += ["", f"Best cell: tau_c = {best[0]}, tau_e = {best[1]} ({mean[best]:.4f} ± {sd[best]:.4f})"
              + (f"; synchronous (1, 1): {mean[sync]:.4f} ± {sd[sync]:.4f}" if sync else "") + ".",
              "Best tau_e per tau_c row: " + ", ".join(f"{tc} → {best_te[tc]}" for tc in args.taus) + ".",
              "Mean over rows per tau_e: " + ", ".join(f"{te}: {col_mean[te]:.4f}" for te in tau_e) + ".",
              "Mean over columns per tau_c: " + ", ".join(f"{tc}: {row_mean[tc]:.4f}" for tc in args.taus) + ".",
              f"Paper (FMNIST, Table 6): best {PAPER_BEST}."]
    if sync:
        gap = mean[best] - mean[sync]
        lines.append(f"**Computed:** best asynchronous setting − synchronous = {100 * gap:+.2f} points "
                     f"({'more' if gap > max(sd[best], sd[sync]) else 'less'} than one standard deviation of either "
                     f"cell).")
    intro = (f"{args.dataset}, {args.rounds} rounds, seeds {args.seeds}. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, out, f"FLEX-SFL: tau_c x tau_e (Table 6) on {args.dataset}", intro, "\n".join(lines),
                 doc="docs/flex-sfl.md")


if __name__ == "__main__":
    main()
