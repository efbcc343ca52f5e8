"""Start-up: how long a short run takes as a whole process, raysfl against centralised training,
and where a raysfl run's start-up goes.

    .venv/bin/python benchmarks/startup.py [--algo psl] [--rounds 5] [--repeats 3]

Each repeat runs, one after the other and as separate processes exactly as a user types them,
``python -m raysfl run --algo ALGO --rounds R`` (raysfl starts its own local Ray) and
``python -m raysfl run --algo centralized --rounds R`` (the same model, samples and batch size
in one process, no Ray). Reported: the median whole-process seconds of each and their ratio
(the issue's target: within 2.5x), and the median of each start-up stage the run writes to
its ``startup.json`` (set-up: data, partition, model and the algorithm's set-up; Ray: starting
it; actors: constructing every actor, data shipped with them; warm-up: their first
forward/backward; state: the first snapshot of the initial model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweep import ROOT, write_tables

STAGES = ("setup", "ray", "actors", "warm_up", "state")


def whole_run(algo: str, rounds: int, out: Path, name: str) -> tuple[float, dict]:
    """(seconds the process took, its startup.json or {})."""
    cmd = [sys.executable, "-m", "raysfl", "run", "--algo", algo, "--rounds", str(rounds), "--out", str(out),
           "--name", name, "--checkpoint-every", "0", "--no-progress"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=str(ROOT), capture_output=True, timeout=1800)
    seconds = time.perf_counter() - t0
    path = out / name / "startup.json"
    return seconds, json.loads(path.read_text()) if path.exists() else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="psl")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="docs/results/startup.md")
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="raysfl-startup-") as tmp:
        for i in range(args.repeats):
            for algo in (args.algo, "centralized"):
                seconds, stages = whole_run(algo, args.rounds, Path(tmp), f"{algo}-{i}")
                rows.append({"repeat": i, "algo": algo, "seconds": seconds, **{s: stages.get(s) for s in STAGES}})
                print(f"repeat {i} {algo:<12} {seconds:6.1f} s  {stages}", flush=True)
    med = {a: statistics.median(r["seconds"] for r in rows if r["algo"] == a) for a in (args.algo, "centralized")}
    ratio = med[args.algo] / med["centralized"]
    lines = [f"| run ({args.rounds} rounds, defaults, digits) | whole process, median of {args.repeats} (s) |",
             "|---|---:|", f"| raysfl `{args.algo}` | {med[args.algo]:.1f} |",
             f"| centralised | {med['centralized']:.1f} |", "",
             f"**Ratio {args.algo} / centralised: {ratio:.2f}x** (target: within 2.5x).", "",
             f"Where `{args.algo}`'s start-up goes (median seconds, from the run's startup.json):", "",
             "| " + " | ".join(STAGES) + " |", "|" + "---:|" * len(STAGES),
             "| " + " | ".join(f"{statistics.median(r[s] for r in rows if r['algo'] == args.algo and r[s] is not None):.2f}"
                              for s in STAGES) + " |"]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "Start-up: a short run as a whole process", intro, "\n".join(lines),
                 doc=ROOT / "docs" / "performance.md")


if __name__ == "__main__":
    main()
