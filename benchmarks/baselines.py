"""Round time of every baseline on digits, as a ratio to the centralised run (same machine, same run).

    .venv/bin/python benchmarks/baselines.py [--rounds 6] [--clients 10] [--out docs/benchmarks-baselines.md]

For each algorithm: median wall time per round (rounds 2.. so that lazy start-up in the
actors is excluded), its ratio to the centralised round (the same samples, model and batch
size in one process), and the whole run's time including actor start-up. Prints a Markdown
table and writes it to --out.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ALGOS = ["centralized", "fedavg", "fedprox", "sl", "splitfed_v1", "splitfed_v2", "psl"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default="docs/benchmarks-baselines.md")
    args = ap.parse_args()

    import ray

    import raysfl

    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in ALGOS:
            cfg = raysfl.config_from_kwargs(algo=algo, clients=args.clients, rounds=args.rounds, out=tmp,
                                            progress=False, checkpoint_every=0)
            t0 = time.perf_counter()
            result = raysfl.run(cfg)
            total = time.perf_counter() - t0
            per_round = statistics.median(m["wall_time_s"] for m in result.metrics[1:])
            rows.append((algo, per_round, total, result.final["test_accuracy"]))
            print(f"{algo:<12} {per_round * 1000:8.1f} ms/round  run {total:6.1f} s", flush=True)
    ray.shutdown()
    base = rows[0][1]
    lines = [
        "# Baselines: round time vs the centralised run",
        "",
        f"Command: `.venv/bin/python benchmarks/baselines.py --rounds {args.rounds} --clients {args.clients}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"local Ray with {args.num_cpus} logical CPUs; digits, cnn, cut 2, IID, batch 32, 1 local epoch.",
        "",
        "| algorithm | median round (ms) | ratio to centralised | whole run incl. actor start-up (s) | final accuracy |",
        "|---|---:|---:|---:|---:|",
    ]
    for algo, per_round, total, acc in rows:
        lines.append(f"| {algo} | {per_round * 1000:.1f} | {per_round / base:.1f}x | {total:.1f} | {acc:.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
