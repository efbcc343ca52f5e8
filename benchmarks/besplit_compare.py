"""BESplit-G and BESplit-A against SplitFed and FedAvg across Dirichlet kappa (Table 3 /
Fig. 4 scaled down), rounds to target accuracies (Table 5 style), and optionally the
ablations of Table 4.

    .venv/bin/python benchmarks/besplit_compare.py [--rounds 30] [--seeds 0 1 2] [--kappas 0.1 0.5 1] [--ablations]

Same data, partition, model, cut and seed for every algorithm: digits, 10 clients (all of them
every round), Dirichlet kappa label mixes, the 4-block CNN cut after its two conv blocks, one
local epoch, batch 32, SGD with momentum 0.9 and lr 0.05. SplitFed is SplitFed V1 (one
server-side model per client, as in BESplit); FedAvg trains the whole CNN on the clients.
BESplit runs with its defaults (softplus evidence, EMA beta 0.9, TTL 10, tau 5, lambda_C 0.2,
lambda_G 0.3); one BESplit run gives both BESplit-G (global model) and BESplit-A (mean over
the clients' auxiliary models). Nothing is tuned to the comparison.
"""

from __future__ import annotations

import argparse
import statistics

from sweep import evaluated, fmt, last_mean, mean_std, run, start_ray, write_tables

COMMON = dict(dataset="digits", model="cnn", clients=10, partition="dirichlet", cut=2, local_epochs=1,
              batch_size=32, momentum=0.9, lr=0.05)
ALGOS = ["besplit", "splitfed_v1", "fedavg"]
ABLATIONS = {"BESplit w/o EA": {"ea": False}, "BESplit w/o E": {"ea_evidence": False},
             "BESplit w/o U_ale": {"ea_ale": False}, "BESplit w/o U_epi": {"ea_epi": False},
             "BESplit w/o BCC": {"bcc": False}}
TARGETS = (0.5, 0.6, 0.7, 0.8)


def rounds_to(metrics: list[dict], key: str, target: float) -> int | None:
    return next((r["round"] for r in metrics if r.get(key, float("nan")) >= target), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--kappas", type=float, nargs="+", default=[0.1, 0.5, 1.0])
    ap.add_argument("--ablations", action="store_true", help="also run Table 4's ablations (at kappa = 1)")
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default="docs/results/besplit-comparison.md")
    args = ap.parse_args()

    start_ray(args.num_cpus)
    rows = []

    def record(label, kappa, seed, metrics, key="test_accuracy"):
        accs = [r[key] for r in metrics]
        rows.append({"algo": label, "kappa": kappa, "seed": seed, "final_accuracy": accs[-1],
                     "last10_accuracy": last_mean([{"test_accuracy": a} for a in accs]),
                     **{f"rounds_to_{t:.0%}": rounds_to(metrics, key, t) for t in TARGETS},
                     "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6})
        r = rows[-1]
        print(f"kappa {kappa:<4} seed {seed} {label:<20} final {r['final_accuracy']:.4f}  "
              f"last10 {r['last10_accuracy']:.4f}", flush=True)

    for kappa in args.kappas:
        for seed in args.seeds:
            for algo in ALGOS:
                metrics = evaluated(run(algo=algo, rounds=args.rounds, seed=seed, alpha=kappa, **COMMON))
                if algo == "besplit":
                    record("BESplit-G", kappa, seed, metrics)
                    record("BESplit-A", kappa, seed, metrics, key="acc_aux")
                else:
                    record({"splitfed_v1": "SplitFed (V1)", "fedavg": "FedAvg"}[algo], kappa, seed, metrics)
    labels = ["BESplit-G", "BESplit-A", "SplitFed (V1)", "FedAvg"]
    if args.ablations:
        kappa = 1.0
        for seed in args.seeds:
            for label, params in ABLATIONS.items():
                metrics = evaluated(run(algo="besplit", rounds=args.rounds, seed=seed, alpha=kappa, **COMMON,
                                        besplit={"dtd": False, **params}))
                record(label, kappa, seed, metrics)

    def group(label, kappa):
        return [r for r in rows if r["algo"] == label and r["kappa"] == kappa]

    acc = ["| algorithm | " + " | ".join(f"kappa = {k:g}: final | last 10 rounds" for k in args.kappas) + " |",
           "|---|" + "---:|---:|" * len(args.kappas)]
    for label in labels:
        cells = [f"{mean_std([r['final_accuracy'] for r in group(label, k)])} | "
                 f"{mean_std([r['last10_accuracy'] for r in group(label, k)])}" for k in args.kappas]
        acc.append(f"| {label} | " + " | ".join(cells) + " |")
    rta = [f"Rounds to target accuracy at kappa = {args.kappas[-1]:g} (mean over the seeds that reach it; "
           "how many reach it in brackets), Table 5 style:", "",
           "| algorithm | " + " | ".join(f"{t:.0%}" for t in TARGETS) + " | total MB |",
           "|---|" + "---:|" * (len(TARGETS) + 1)]
    for label in labels:
        rs = group(label, args.kappas[-1])
        cells = []
        for t in TARGETS:
            hits = [r[f"rounds_to_{t:.0%}"] for r in rs if r[f"rounds_to_{t:.0%}"] is not None]
            cells.append(f"{fmt(statistics.mean(hits), '.1f') if hits else '—'} ({len(hits)}/{len(rs)})")
        acc_mb = statistics.mean(r["total_mb"] for r in rs)
        rta.append(f"| {label} | " + " | ".join(cells) + f" | {acc_mb:.1f} |")
    body = "\n".join(acc) + "\n\n" + "\n".join(rta)
    if args.ablations:
        abl = ["Ablations (Table 4), kappa = 1, BESplit-G (auxiliary models off):", "",
               "| variant | final accuracy | mean accuracy, last 10 rounds |", "|---|---:|---:|"]
        base = [r for r in rows if r["algo"] == "BESplit-G" and r["kappa"] == 1.0]
        if base:
            abl.append(f"| BESplit | {mean_std([r['final_accuracy'] for r in base])} | "
                       f"{mean_std([r['last10_accuracy'] for r in base])} |")
        for label in ABLATIONS:
            rs = group(label, 1.0)
            abl.append(f"| {label} | {mean_std([r['final_accuracy'] for r in rs])} | "
                       f"{mean_std([r['last10_accuracy'] for r in rs])} |")
        body += "\n\n" + "\n".join(abl)
    intro = (f"digits, {args.rounds} rounds, seeds {args.seeds}; mean ± standard deviation over the seeds. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "BESplit vs SplitFed and FedAvg across Dirichlet kappa (digits, 10 clients)", intro,
                 body)


if __name__ == "__main__":
    main()
