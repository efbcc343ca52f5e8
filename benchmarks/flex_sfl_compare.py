"""FLEX-SFL vs SplitFed V1 and FedAvg on digits with the paper's non-IID setting scaled down.

    .venv/bin/python benchmarks/flex_sfl_compare.py [--rounds 60] [--seeds 0 1 2] [--target 0.8]

Same clients, data and seed for the three algorithms: 100 clients with two classes each and
power-law sample counts (FLEX-SFL's Sec. 5.1), the FMNIST row of Table 2 for the optimiser
(lr 0.1, decay 0.98 per round, plain SGD) and one local epoch. FLEX-SFL runs with its paper
defaults (rho 0.2, 3 edge servers, tau_c 4, tau_e 2, tau_r 10, lambda 0.4); the baselines pick
20 clients per round at random (the same participation rate) and SplitFed V1 cuts after
block 2. Nothing is tuned to the comparison. Reports rounds, simulated time and bytes to the
target accuracy, final accuracy and the mean of the last 10 rounds.
"""

from __future__ import annotations

import argparse
import statistics

from sweep import fmt, last_mean, start_ray, to_target, write_tables, run

COMMON = dict(dataset="digits", model="cnn", clients=100, partition="pathological", classes_per_client=2,
              quantity_skew=1.0, lr=0.1, lr_decay=0.98, momentum=0.0, local_epochs=1)
ALGOS = {
    "flex_sfl": {},
    "splitfed_v1": {"clients_per_round": 20, "cut": 2},
    "fedavg": {"clients_per_round": 20},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default="docs/results/flex-sfl-comparison.md")
    args = ap.parse_args()

    start_ray(args.num_cpus)
    rows = []
    for seed in args.seeds:
        for algo, extra in ALGOS.items():
            metrics = run(algo=algo, rounds=args.rounds, seed=seed, **COMMON, **extra)
            hit = to_target(metrics, args.target)
            rows.append({"algo": algo, "seed": seed, "rounds_to_target": hit["round"], "sim_s_to_target": hit["sim_s"],
                         "mb_to_target": hit["mb"], "final_accuracy": metrics[-1]["test_accuracy"],
                         "last10_accuracy": last_mean(metrics),
                         "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6,
                         "sim_s_total": metrics[-1]["sim_time_total_s"]})
            r = rows[-1]
            print(f"seed {seed} {algo:<12} rounds→{args.target}: {fmt(r['rounds_to_target'])}  "
                  f"final {r['final_accuracy']:.4f}  last10 {r['last10_accuracy']:.4f}", flush=True)

    lines = ["| algorithm | seed | rounds to target | sim. time to target (s) | MB to target | final acc. | "
             "mean acc. last 10 | total MB | total sim. time (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['seed']} | {fmt(r['rounds_to_target'])} | {fmt(r['sim_s_to_target'], '.1f')} | "
                     f"{fmt(r['mb_to_target'], '.1f')} | {r['final_accuracy']:.4f} | {r['last10_accuracy']:.4f} | "
                     f"{r['total_mb']:.1f} | {r['sim_s_total']:.1f} |")
    lines += ["", "Means over seeds (rounds/time to target: over the seeds that reached it):", "",
              "| algorithm | reached target | mean rounds to target | mean final acc. | mean acc. last 10 |",
              "|---|---:|---:|---:|---:|"]
    wins = 0
    for algo in ALGOS:
        rs = [r for r in rows if r["algo"] == algo]
        hit = [r["rounds_to_target"] for r in rs if r["rounds_to_target"] is not None]
        lines.append(f"| {algo} | {len(hit)}/{len(rs)} | {fmt(float(statistics.mean(hit)), '.1f') if hit else '—'} | "
                     f"{statistics.mean(r['final_accuracy'] for r in rs):.4f} | "
                     f"{statistics.mean(r['last10_accuracy'] for r in rs):.4f} |")
    never = args.rounds + 1
    for seed in args.seeds:
        by = {r["algo"]: r["rounds_to_target"] or never for r in rows if r["seed"] == seed}
        wins += by["flex_sfl"] < min(by["splitfed_v1"], by["fedavg"])
    verdict = (f"FLEX-SFL reached {args.target:.2f} in strictly fewer rounds than both SplitFed V1 and FedAvg "
               f"in {wins} of {len(args.seeds)} seeds.")
    lines += ["", f"**Verdict (computed):** {verdict}"]
    intro = (f"digits, cnn, 100 clients × 2 classes, power-law sizes (exponent 1), {args.rounds} rounds, "
             f"target accuracy {args.target}. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "FLEX-SFL vs SplitFed V1 and FedAvg (digits)", intro, "\n".join(lines))


if __name__ == "__main__":
    main()
