"""FLEX-SFL's tau_c x tau_e grid (the paper's Table 6) on a dataset available offline.

    .venv/bin/python benchmarks/flex_sfl_grid.py                  # tau in {1, 2, 4, 8}, digits
    .venv/bin/python benchmarks/flex_sfl_grid.py --taus 1 2 3 4 5 6 7 8 --rounds 100   # the full grid

The paper's metric: mean test accuracy of the last 10 rounds, lambda = 0.4, everything else
at FLEX-SFL's defaults (100 clients x 2 classes, power-law sizes, rho 0.2, 3 edge servers,
tau_r 10) and the FMNIST optimiser row of Table 2 (lr 0.1, decay 0.98, plain SGD).
"""

from __future__ import annotations

import argparse

from sweep import last_mean, run, start_ray, write_tables

COMMON = dict(algo="flex_sfl", dataset="digits", model="cnn", lr=0.1, lr_decay=0.98, momentum=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--taus", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default="docs/results/flex-sfl-grid.md")
    args = ap.parse_args()

    start_ray(args.num_cpus)
    rows = []
    for tc in args.taus:
        for te in args.taus:
            metrics = run(**{**COMMON, "dataset": args.dataset}, data_root=args.data_root, rounds=args.rounds,
                          seed=args.seed, flex_sfl={"tau_c": tc, "tau_e": te, "random_ratio": 0.4})
            rows.append({"tau_c": tc, "tau_e": te, "last10_accuracy": last_mean(metrics),
                         "final_accuracy": metrics[-1]["test_accuracy"]})
            print(f"tau_c={tc} tau_e={te}: last-10 mean {rows[-1]['last10_accuracy']:.4f}", flush=True)
    acc = {(r["tau_c"], r["tau_e"]): r["last10_accuracy"] for r in rows}
    lines = ["Mean test accuracy of the last 10 rounds (rows tau_c, columns tau_e):", "",
             "| tau_c \\ tau_e | " + " | ".join(str(t) for t in args.taus) + " |",
             "|---|" + "---:|" * len(args.taus)]
    for tc in args.taus:
        lines.append(f"| **{tc}** | " + " | ".join(f"{acc[(tc, te)]:.4f}" for te in args.taus) + " |")
    best = max(acc, key=acc.get)
    lines += ["", f"Best: tau_c = {best[0]}, tau_e = {best[1]} ({acc[best]:.4f}); synchronous "
              f"(tau_c = tau_e = 1): {acc.get((1, 1), float('nan')):.4f}. Paper (FMNIST, 100 rounds): best "
              f"tau_c = 4, tau_e = 1 (0.8941), synchronous 0.8814."]
    intro = (f"{args.dataset}, {args.rounds} rounds, seed {args.seed}. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "FLEX-SFL: tau_c x tau_e (Table 6)", intro, "\n".join(lines))


if __name__ == "__main__":
    main()
