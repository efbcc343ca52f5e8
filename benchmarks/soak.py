"""Soak: memory over a long run. Object-store use and the RSS of the driver and of every
actor, early in the run and at its end; growth must stay under 10 %.

    .venv/bin/python benchmarks/soak.py [--rounds 200] [--algo splitfed_v2] [--out docs/results/soak.md]

The first sample is taken once ``--warmup`` rounds are done (allocators and caches settle in
the first rounds), the last at the final round; both while the actors are alive. Writes a
Markdown table (and CSV/Parquet) with start, end and growth per process.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

from sweep import ROOT, start_ray, write_tables

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402


def sample(run_name: str) -> dict[str, int]:
    import ray

    from raysfl.runtime.probe import object_store_used_bytes, rss_bytes

    out = {"driver": rss_bytes(), "object store": object_store_used_bytes()}
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["name"].startswith(f"raysfl:{run_name}:"))
    for name, rss in zip(names, ray.get([ray.get_actor(n).memory.remote() for n in names])):
        out[name.split(":")[-1]] = rss
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--algo", default="splitfed_v2")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--num-cpus", type=int, default=8)
    ap.add_argument("--out", default="docs/results/soak.md")
    args = ap.parse_args()

    import raysfl

    start_ray(args.num_cpus)
    name = f"soak-{os.getpid()}"
    out_dir = Path(ROOT / "runs")
    cfg = raysfl.config_from_kwargs(algo=args.algo, clients=args.clients, rounds=args.rounds, local_steps=2,
                                    batch_size=16, out=str(out_dir), name=name, progress=False)
    metrics = out_dir / name / "metrics.parquet"
    samples: dict[str, dict] = {}

    def watch():
        while "end" not in samples:
            done = len(pq.read_table(pa.BufferReader(metrics.read_bytes()))) if metrics.exists() else 0
            if done >= args.warmup and "start" not in samples:
                samples["start"] = sample(name) | {"round": done}
                print(f"start sample at round {done}", flush=True)
            if done >= args.rounds - 1 and "start" in samples:
                samples["end"] = sample(name) | {"round": done}
                print(f"end sample at round {done}", flush=True)
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    t0 = time.perf_counter()
    raysfl.run(cfg)
    wall = time.perf_counter() - t0
    t.join(timeout=5)
    s, e = samples["start"], samples["end"]
    rows = []
    for key in s:
        if key == "round":
            continue
        growth = (e[key] - s[key]) / s[key] if s[key] else 0.0
        rows.append({"process": key, "start_mb": s[key] / 2**20, "end_mb": e[key] / 2**20, "growth": growth})
    worst = max(r["growth"] for r in rows)
    lines = [f"Samples at round {s['round']} and round {e['round']} of {args.rounds} ({args.algo}, "
             f"{args.clients} clients, run wall time {wall:.0f} s).", "",
             "| process | start (MB) | end (MB) | growth |", "|---|---:|---:|---:|"]
    lines += [f"| {r['process']} | {r['start_mb']:.1f} | {r['end_mb']:.1f} | {r['growth'] * 100:+.1f} % |" for r in rows]
    lines += ["", f"**Largest growth: {worst * 100:+.1f} %** ({'under' if worst < 0.10 else 'NOT under'} the 10 % bound)."]
    write_tables(rows, args.out, "Soak: memory over a long run", __doc__.split("\n\n")[0], "\n".join(lines))


if __name__ == "__main__":
    main()
