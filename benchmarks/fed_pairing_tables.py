"""FedPairing's Table I (round time per pairing mechanism) and its IID / non-IID accuracy
comparison (Figs. 2-3), offline on digits.

    .venv/bin/python benchmarks/fed_pairing_tables.py pairing  [--seeds 0 1 2] [--rounds 3]
    .venv/bin/python benchmarks/fed_pairing_tables.py accuracy [--seeds 0 1 2] [--rounds 30]

Sec. IV-A scaled to digits: 20 clients in a 50 m disk, 64 MHz, 1 W, noise 1e-9 W, CPU
frequencies U[0.1, 2] GHz, the 4-block CNN, SGD lr 0.1, 2 local epochs. ``pairing``:
FedPairing's greedy pairing against random, location-based (nearest partner) and
computation-based (largest CPU-frequency difference) pairing; the simulated round time is
the slowest client's compute on its CPU plus its transfers over the partner link and the
model over the client-server link. ``accuracy``: FedPairing (with and without the doubled
overlapping-layer step) against FedAvg, vanilla SL and SplitFed V1 (cut 2) on IID and
non-IID (2 classes per client) partitions.
"""

from __future__ import annotations

import argparse
import statistics

from sweep import evaluated, mean_std, run, start_ray, write_tables

COMMON = dict(dataset="digits", model="cnn", clients=20, lr=0.1, momentum=0.0, local_epochs=2)
PAPER_TABLE1 = {"greedy": "1553", "random": "4063", "location": "7275", "computation": "1807"}
ACCURACY = {"fed_pairing": ("fed_pairing", {}),
            "fed_pairing, no doubled step": ("fed_pairing", {"fed_pairing": {"double_overlap": False}}),
            "fedavg": ("fedavg", {}), "sl": ("sl", {"cut": 2}), "splitfed_v1": ("splitfed_v1", {"cut": 2})}
PARTITIONS = {"IID": {"partition": "iid"}, "non-IID (2 classes)": {"partition": "pathological",
                                                                  "classes_per_client": 2}}


def pairing_table(args) -> tuple[list[dict], str]:
    rows = []
    for mode in ("greedy", "random", "location", "computation"):
        for seed in args.seeds:
            metrics = run(algo="fed_pairing", rounds=args.rounds or 3, seed=seed, **COMMON,
                          fed_pairing={"pairing": mode})
            rows.append({"pairing": mode, "seed": seed,
                         "round_time_s": statistics.mean(r["sim_time_s"] for r in metrics)})
            print(f"{mode} seed {seed}: {rows[-1]['round_time_s']:.2f} s per round", flush=True)
    lines = ["| pairing | simulated round time (s) | paper, CIFAR-10 ResNet (s) |", "|---|---:|---:|"]
    for mode in ("greedy", "random", "location", "computation"):
        times = [r["round_time_s"] for r in rows if r["pairing"] == mode]
        lines.append(f"| {mode} | {mean_std(times, '.2f')} | {PAPER_TABLE1[mode]} |")
    return rows, "\n".join(lines)


def accuracy_table(args) -> tuple[list[dict], str]:
    rows = []
    for part_name, part in PARTITIONS.items():
        for label, (algo, extra) in ACCURACY.items():
            for seed in args.seeds:
                metrics = evaluated(run(algo=algo, rounds=args.rounds or 30, seed=seed, **{**COMMON, **part}, **extra))
                rows.append({"partition": part_name, "algo": label, "seed": seed,
                             "final_accuracy": metrics[-1]["test_accuracy"],
                             "best_accuracy": max(r["test_accuracy"] for r in metrics),
                             "round_time_s": statistics.mean(r["sim_time_s"] for r in metrics)})
                print(f"{part_name} {label} seed {seed}: final {rows[-1]['final_accuracy']:.4f}", flush=True)
    lines = ["| partition | algorithm | final accuracy | best accuracy | simulated round time (s) |",
             "|---|---|---:|---:|---:|"]
    for part_name in PARTITIONS:
        for label in ACCURACY:
            rs = [r for r in rows if r["partition"] == part_name and r["algo"] == label]
            lines.append(f"| {part_name} | {label} | {mean_std([r['final_accuracy'] for r in rs])} | "
                         f"{mean_std([r['best_accuracy'] for r in rs])} | "
                         f"{mean_std([r['round_time_s'] for r in rs], '.2f')} |")
    return rows, "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["pairing", "accuracy"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None, help="default: 3 (pairing), 30 (accuracy)")
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default=None, help="default: docs/results/fed-pairing-<experiment>.md")
    args = ap.parse_args()
    start_ray(args.num_cpus)
    rows, body = pairing_table(args) if args.experiment == "pairing" else accuracy_table(args)
    title = ("FedPairing: round time per pairing mechanism (Table I)" if args.experiment == "pairing"
             else "FedPairing vs FedAvg, SL and SplitFed on IID and non-IID digits (Figs. 2-3)")
    intro = f"seeds {args.seeds}; mean ± standard deviation over the seeds. {__doc__.split(chr(10) * 2, 2)[2].strip()}"
    write_tables(rows, args.out or f"docs/results/fed-pairing-{args.experiment}.md", title, intro, body)


if __name__ == "__main__":
    main()
