"""Scale in clients: time per round and memory with 100 selected clients per round out of
100, 300 and 1,000 virtual clients, multiplexed on a few client actors.

    .venv/bin/python benchmarks/scaling.py [--clients 100 300 1000] [--per-round 100] [--rounds 5]

Every run trains the default small model (the 4-block CNN, cut 2) on digits with the same
work per selected client (2 local steps of batch 16), so what changes between the rows is
only how many virtual clients exist. ``splitfed_v2`` keeps no per-client state between
rounds; ``psl`` keeps every client's own client-side model on the fed server, which is
what grows with the population. Memory is sampled every 50 ms during the run: the peak
RSS of the driver and of every actor, summed (``total``) and per role, and the peak bytes
in Ray's object store. Time per round is the median ``wall_time_s`` of rounds 2..R.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import pyarrow.parquet as pq
from soak import run_while_sampling, sample
from sweep import ROOT, start_ray, write_tables

MB = 2**20


def measure(algo: str, clients: int, per_round: int, rounds: int, actors: int) -> dict:
    import raysfl

    name = f"scale-{algo}-{clients}-{os.getpid()}"
    out_dir = Path(ROOT / "runs")
    cfg = raysfl.config_from_kwargs(algo=algo, clients=clients, clients_per_round=min(per_round, clients),
                                    rounds=rounds, local_steps=2, batch_size=16, out=str(out_dir), name=name,
                                    progress=False, checkpoint_every=0, resources={"client_actors": actors})
    peaks: dict[str, float] = {}

    def tick():
        try:
            s = sample(name)
        except Exception:  # noqa: BLE001 - actors starting or gone: try again
            s = {}
        for k, v in s.items():
            peaks[k] = max(peaks.get(k, 0.0), float(v))
        roles = {k: v for k, v in s.items() if k not in ("store", "objects", "referenced")}
        peaks["total"] = max(peaks.get("total", 0.0), float(sum(roles.values())))

    wall = run_while_sampling(cfg, tick, 0.05)
    rows = pq.read_table(out_dir / name / "metrics.parquet").to_pylist()
    per_round_s = statistics.median(r["wall_time_s"] for r in rows[1:]) if len(rows) > 1 else rows[0]["wall_time_s"]
    clients_rss = sum(v for k, v in peaks.items() if k.startswith("client-"))
    return {"algo": algo, "clients": clients, "per_round": min(per_round, clients), "client_actors": actors,
            "round_s": per_round_s, "first_round_s": rows[0]["wall_time_s"], "run_s": wall,
            "total_mb": peaks.get("total", 0.0) / MB, "driver_mb": peaks.get("driver", 0.0) / MB,
            "client_actors_mb": clients_rss / MB, "server_mb": peaks.get("server-0", 0.0) / MB,
            "fed_mb": peaks.get("fed", 0.0) / MB, "store_mb": peaks.get("store", 0.0) / MB,
            "bytes_per_round_mb": statistics.mean(r["bytes_up"] + r["bytes_down"] for r in rows) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[100, 300, 1000])
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--client-actors", type=int, default=4)
    ap.add_argument("--algos", nargs="+", default=["splitfed_v2", "psl"])
    ap.add_argument("--num-cpus", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "docs/results/scaling.md"))
    args = ap.parse_args()

    start_ray(args.num_cpus)
    rows = []
    for algo in args.algos:
        for n in args.clients:
            rows.append(measure(algo, n, args.per_round, args.rounds, args.client_actors))
            r = rows[-1]
            print(f"{algo:<12} {n:>6} clients: {r['round_s']:.2f} s/round, peak RSS {r['total_mb']:.0f} MB "
                  f"(fed {r['fed_mb']:.0f} MB), object store {r['store_mb']:.0f} MB", flush=True)
    lines = ["| algorithm | clients | per round | s / round (median, rounds 2..R) | first round (s) | peak RSS, all "
             "processes (MB) | driver | client actors | main server | fed server | object store peak (MB) | "
             "MB sent per round |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['clients']} | {r['per_round']} | {r['round_s']:.2f} | "
                     f"{r['first_round_s']:.2f} | {r['total_mb']:.0f} | {r['driver_mb']:.0f} | "
                     f"{r['client_actors_mb']:.0f} | {r['server_mb']:.0f} | {r['fed_mb']:.0f} | {r['store_mb']:.0f} | "
                     f"{r['bytes_per_round_mb']:.1f} |")
    intro = (f"{args.rounds} rounds per run, {args.client_actors} client actors, seed 0. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "Scaling in clients: time per round and memory", intro, "\n".join(lines))


if __name__ == "__main__":
    main()
