"""A researcher's sweep, timed end to end: ``raysfl compare`` of 3 algorithms on 20 seeds.

    .venv/bin/python benchmarks/sweep_time.py [--algos splitfed_v1,splitfed_v2,psl] [--seeds 20] [--rounds 30]

Runs ``raysfl compare --algos A,B,C --seeds N --rounds R`` on the embedded digits (raysfl's
defaults otherwise: 10 clients, every one every round, one local epoch, evaluation every
round, a checkpoint every round) as one process, exactly as a user types it, and reports its
wall time from the command to the written table (target: 20 seeds x 3 algorithms at 30
rounds within 15 minutes on the 2-core machine), the runs per minute, and the median run as
``metrics.parquet`` times it (the rounds' wall time) against the whole run (start-up and
writing included). Every run after the first reuses the process's Ray and, for its shape,
the actors (a warm federation).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from sweep import ROOT, write_tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="splitfed_v1,splitfed_v2,psl")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", default="docs/results/sweep-time.md")
    args = ap.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="raysfl-sweep-time-") as tmp:
        out = Path(tmp) / "cmp"
        cmd = [sys.executable, "-m", "raysfl", "compare", "--algos", args.algos, "--seeds", str(args.seeds),
               "--rounds", str(args.rounds), "--dataset", "digits", "--out", str(out)]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=str(ROOT), check=True, capture_output=True, timeout=6 * 3600)
        wall = time.perf_counter() - t0
        runs = sorted((out / "runs").iterdir())
        rounds_s = [sum(r["wall_time_s"] for r in pq.read_table(d / "metrics.parquet").to_pylist()) for d in runs]
    n = len(runs)
    rows = [{"algos": args.algos, "seeds": args.seeds, "rounds": args.rounds, "runs": n, "wall_s": wall,
             "runs_per_min": n / wall * 60, "median_rounds_s": statistics.median(rounds_s),
             "median_run_s": wall / n}]
    lines = ["| sweep | runs | wall time | runs / minute | rounds of a run (median) | a run, all in (mean) | "
             "target | met |", "|---|---:|---:|---:|---:|---:|---|---|",
             f"| `{args.algos}` x {args.seeds} seeds x {args.rounds} rounds | {n} | {wall / 60:.1f} min | "
             f"{n / wall * 60:.1f} | {statistics.median(rounds_s):.1f} s | {wall / n:.1f} s | 15 min "
             f"(20 seeds x 3 algorithms x 30 rounds) | {'yes' if wall <= 900 else 'no'} |"]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "A sweep, end to end", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
