"""FedPairing's Table I (round time per pairing mechanism) and its accuracy claim against
vanilla FL, vanilla SL and SplitFed on IID and non-IID data (Figs. 2-3), offline.

    .venv/bin/python benchmarks/fed_pairing_tables.py pairing  [--dataset digits] [--seeds 0 1 2] [--rounds 3] [--model cnn]
    .venv/bin/python benchmarks/fed_pairing_tables.py accuracy [--dataset digits|mnist5k] [--seeds 0 1 2] [--rounds 20] [--model cnn]

Sec. IV-A scaled down: 20 clients in a 50 m disk, 64 MHz, 1 W, noise 1e-9 W, CPU
frequencies U[0.1, 2] GHz, the paper's ResNet-18 (``--model cnn``: the 4-block CNN), SGD
with lr 0.1 and no momentum, 2 local epochs, batch 32, every client in every round. ``pairing``: FedPairing's greedy pairing
against random, location-based (nearest partner) and computation-based (largest
CPU-frequency difference) pairing; the simulated round time is the slowest client's
compute on its CPU plus its transfers over the partner link and the model over the
client-server link. ``accuracy``: FedPairing with its defaults (``--pair-weights fedavg``,
eq. 7's doubled step), its ablations (without eq. 7; the literal ``--pair-weights paper``)
against FedAvg, vanilla SL and SplitFed V1 / V2 (cut after block 2) with the same optimiser,
data, partitions and seeds, on IID and non-IID (2 classes per client) partitions; the
global model's test accuracy after the last round (what Figs. 2-3 plot at their end).
"""

from __future__ import annotations

import argparse
import math
import statistics

from sweep import evaluated, mean_std, run, start_ray, write_tables

COMMON = dict(clients=20, lr=0.1, momentum=0.0, local_epochs=2, batch_size=32)
PAPER_TABLE1 = {"greedy": "1553", "random": "4063", "location": "7275", "computation": "1807"}
ACCURACY = {"fed_pairing": ("fed_pairing", {}),
            "fed_pairing, no eq. 7": ("fed_pairing", {"fed_pairing": {"double_overlap": False}}),
            "fed_pairing, paper weights": ("fed_pairing", {"fed_pairing": {"pair_weights": "paper"}}),
            "fedavg": ("fedavg", {}), "sl": ("sl", {"cut": 2}), "splitfed_v1": ("splitfed_v1", {"cut": 2}),
            "splitfed_v2": ("splitfed_v2", {"cut": 2})}
PARTITIONS = {"IID": {"partition": "iid"}, "non-IID (2 classes)": {"partition": "pathological",
                                                                  "classes_per_client": 2}}
# Figs. 2-3 (CIFAR-10, ResNet, 100 rounds): FedPairing's lead over each baseline, points
PAPER_GAIN = {"IID": {"fedavg": 4.1, "sl": 1.8, "splitfed_v1": 10.8},
              "non-IID (2 classes)": {"fedavg": 5.3, "sl": 38.2, "splitfed_v1": 44.6}}


def pairing_table(args) -> tuple[list[dict], str]:
    rows = []
    for mode in ("greedy", "random", "location", "computation"):
        for seed in args.seeds:
            metrics = run(algo="fed_pairing", dataset=args.dataset, rounds=args.rounds or 3, seed=seed, **COMMON,
                          model=args.model,
                          fed_pairing={"pairing": mode})
            rows.append({"pairing": mode, "seed": seed,
                         "round_time_s": statistics.mean(r["sim_time_s"] for r in metrics)})
            print(f"{mode} seed {seed}: {rows[-1]['round_time_s']:.3f} s per round", flush=True)
    greedy = statistics.mean(r["round_time_s"] for r in rows if r["pairing"] == "greedy")
    lines = ["| pairing | simulated round time (s) | greedy's saving | paper, CIFAR-10 ResNet (s) | paper's saving |",
             "|---|---:|---:|---:|---:|"]
    for mode in ("greedy", "random", "location", "computation"):
        times = [r["round_time_s"] for r in rows if r["pairing"] == mode]
        saving = "—" if mode == "greedy" else f"{1 - greedy / statistics.mean(times):.1%}"
        paper = "—" if mode == "greedy" else f"{1 - 1553 / int(PAPER_TABLE1[mode]):.1%}"
        lines.append(f"| {mode} | {mean_std(times, '.3f')} | {saving} | {PAPER_TABLE1[mode]} | {paper} |")
    return rows, "\n".join(lines)


def accuracy_rows(args, seed: int) -> list[dict]:
    rows = []
    for part_name in args.partitions:
        part = PARTITIONS[part_name]
        for label in args.algos:
            algo, extra = ACCURACY[label]
            metrics = evaluated(run(cache=args.cache, algo=algo, dataset=args.dataset, rounds=args.rounds or 20,
                                    seed=seed, **{**COMMON, "model": args.model, **part}, **extra))
            doubled = [r["doubled_layers"] for r in metrics if r.get("doubled_layers", math.nan) == r.get("doubled_layers")]
            rows.append({"partition": part_name, "algo": label, "seed": seed,
                         "final_accuracy": metrics[-1]["test_accuracy"],
                         "best_accuracy": max(r["test_accuracy"] for r in metrics),
                         "doubled_layers": statistics.mean(doubled) if doubled else None,
                         "round_time_s": statistics.mean(r["sim_time_s"] for r in metrics),
                         "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6})
            print(f"{part_name} {label} seed {seed}: final {rows[-1]['final_accuracy']:.4f}", flush=True)
    return rows


def accuracy_table(rows: list[dict]) -> str:
    lines = ["| partition | algorithm | final accuracy | best accuracy | FedPairing's lead (points) | "
             "paper's lead (points) | doubled layers per update | simulated round time (s) | total MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for part_name in PARTITIONS:
        ours = [r["final_accuracy"] for r in rows if r["partition"] == part_name and r["algo"] == "fed_pairing"]
        for label in ACCURACY:
            rs = [r for r in rows if r["partition"] == part_name and r["algo"] == label]
            if not rs:
                continue
            lead = "—"
            if label in ("fedavg", "sl", "splitfed_v1", "splitfed_v2") and len(ours) == len(rs):
                # per seed, FedPairing minus the baseline (same data, partition and seed)
                lead = mean_std([100 * (a - r["final_accuracy"]) for a, r in zip(ours, rs)], ".1f")
            paper = PAPER_GAIN[part_name].get(label)
            doubled = [r["doubled_layers"] for r in rs if r["doubled_layers"] is not None]
            lines.append(f"| {part_name} | {label} | {mean_std([r['final_accuracy'] for r in rs])} | "
                         f"{mean_std([r['best_accuracy'] for r in rs])} | {lead} | "
                         f"{'—' if paper is None else f'+{paper}'} | "
                         f"{mean_std(doubled, '.2f') if doubled else '—'} | "
                         f"{mean_std([r['round_time_s'] for r in rs], '.2f')} | "
                         f"{statistics.mean(r['total_mb'] for r in rs):.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["pairing", "accuracy"])
    ap.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None, help="default: 3 (pairing), 20 (accuracy)")
    ap.add_argument("--algos", nargs="+", default=list(ACCURACY), choices=list(ACCURACY), metavar="LABEL",
                    help="accuracy: the rows to run (default: all)")
    ap.add_argument("--model", default="resnet18",
                    help="the model (default: the paper's, resnet18; cnn: the 4-block CNN)")
    ap.add_argument("--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS), metavar="NAME",
                    help=f"accuracy: the partitions to run (default: all: {', '.join(map(repr, PARTITIONS))})")
    ap.add_argument("--cache", default=None, help="accuracy: keep each run's rows in this directory and reuse "
                    "them when the same run is asked for again (a stopped sweep resumes)")
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default=None,
                    help="default: docs/results/fed-pairing-<experiment>[-<dataset>][-<model>].md (no dataset suffix for "
                         "digits, no model suffix for cnn)")
    args = ap.parse_args()
    start_ray(args.num_cpus)
    suffix = ("" if args.dataset == "digits" else f"-{args.dataset}") + ("" if args.model == "cnn" else f"-{args.model}")
    out = args.out or f"docs/results/fed-pairing-{args.experiment}{suffix}.md"
    intro = f"{args.dataset}; mean ± standard deviation over the seeds. {__doc__.split(chr(10) * 2, 2)[2].strip()}"
    if args.experiment == "pairing":
        rows, body = pairing_table(args)
        write_tables(rows, out, f"FedPairing: round time per pairing mechanism (Table I), {args.dataset}",
                     f"seeds {args.seeds}, {args.rounds or 3} rounds; {intro}", body)
        return
    rows = []
    for i, seed in enumerate(args.seeds):  # the table is rewritten after each seed: a long sweep keeps what it did
        rows += accuracy_rows(args, seed)
        write_tables(rows, out, f"FedPairing vs FedAvg, SL and SplitFed on IID and non-IID {args.dataset} "
                     f"(Figs. 2-3)",
                     f"seeds {args.seeds[:i + 1]}, {args.rounds or 20} rounds, model {args.model}; {intro}",
                     accuracy_table(rows))


if __name__ == "__main__":
    main()
