"""GAPSL against PSL and SplitFed at equal rounds on digits (the paper's non-IID setting scaled
down), the gradient-angle metric of Fig. 3b, and optionally the ablations of Sec. V-C.

    .venv/bin/python benchmarks/gapsl_compare.py [--rounds 40] [--seeds 0 1 2] [--ablations]

Same data, partition, model, cut and seed for every algorithm: 10 clients, Dirichlet alpha
= 0.1 (Sec. IV-4), the 4-block CNN cut after its two conv blocks (the paper puts VGG-16's
first four conv layers on the clients), one local epoch, batch 32, SGD with momentum 0.9,
lr 0.005 on the clients and 0.01 on the server (the paper's VGG-16 setting). GAPSL runs with
its defaults (K_min 20 %, K_max 80 %, lambda 5e-4, eta 0.5, eq. 8's sum); every run records
the mean pairwise angle between the clients' server-side gradients (``--grad-angles``).
Nothing is tuned to the comparison.
"""

from __future__ import annotations

import argparse
import statistics

from sweep import evaluated, fmt, last_mean, mean_std, run, start_ray, write_tables

COMMON = dict(dataset="digits", model="cnn", clients=10, partition="dirichlet", alpha=0.1, cut=2,
              local_epochs=1, batch_size=32, momentum=0.9, lr=0.005, server_lr=0.01, grad_angles=True)
ALGOS = {"gapsl": {}, "psl": {}, "splitfed_v2": {}, "splitfed_v1": {}}
ABLATIONS = {"gapsl (Non-LGI)": {"lgi": "none"}, "gapsl (Rand-LGI)": {"lgi": "random"},
             "gapsl (Non-GDA)": {"gda": "none"}, "gapsl (Rand-GDA)": {"gda": "random"},
             "gapsl (mean, not sum)": {"gda_reduction": "mean"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.6)
    ap.add_argument("--ablations", action="store_true", help="also run Non-/Rand-LGI, Non-/Rand-GDA")
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default="docs/results/gapsl-comparison.md")
    args = ap.parse_args()

    variants = [(name, name, {}) for name in ALGOS]
    if args.ablations:
        variants += [(label, "gapsl", params) for label, params in ABLATIONS.items()]
    start_ray(args.num_cpus)
    rows = []
    for seed in args.seeds:
        for label, algo, params in variants:
            extra = {"gapsl": params} if algo == "gapsl" else {}
            metrics = evaluated(run(algo=algo, rounds=args.rounds, seed=seed, **COMMON, **extra))
            hit = next((r["round"] for r in metrics if r["test_accuracy"] >= args.target), None)
            angles = [r["grad_angle_deg"] for r in metrics if r["grad_angle_deg"] == r["grad_angle_deg"]]
            rows.append({"algo": label, "seed": seed, "final_accuracy": metrics[-1]["test_accuracy"],
                         "best_accuracy": max(r["test_accuracy"] for r in metrics),
                         "last10_accuracy": last_mean(metrics), "rounds_to_target": hit,
                         "grad_angle_deg": statistics.mean(angles) if angles else None,
                         "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6})
            r = rows[-1]
            print(f"seed {seed} {label:<22} final {r['final_accuracy']:.4f}  last10 {r['last10_accuracy']:.4f}  "
                  f"angle {fmt(r['grad_angle_deg'], '.1f')}°", flush=True)

    lines = [f"| algorithm | final accuracy | mean accuracy, last 10 rounds | best accuracy | rounds to "
             f"{args.target:.0%} (seeds reaching it) | mean gradient angle (°) | total MB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, _, _ in variants:
        rs = [r for r in rows if r["algo"] == label]
        hits = [r["rounds_to_target"] for r in rs if r["rounds_to_target"] is not None]
        lines.append(f"| {label} | {mean_std([r['final_accuracy'] for r in rs])} | "
                     f"{mean_std([r['last10_accuracy'] for r in rs])} | {mean_std([r['best_accuracy'] for r in rs])} | "
                     f"{fmt(statistics.mean(hits), '.1f') if hits else '—'} ({len(hits)}/{len(rs)}) | "
                     f"{mean_std([r['grad_angle_deg'] for r in rs if r['grad_angle_deg'] is not None], '.1f')} | "
                     f"{statistics.mean(r['total_mb'] for r in rs):.1f} |")
    intro = (f"digits, {args.rounds} rounds, seeds {args.seeds}; mean ± standard deviation over the seeds. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "GAPSL vs PSL and SplitFed (digits, Dirichlet 0.1, 10 clients)", intro,
                 "\n".join(lines))


if __name__ == "__main__":
    main()
