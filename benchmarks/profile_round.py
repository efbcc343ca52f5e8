"""Where a round's time goes: py-spy samples every raysfl process of a steady-state run.

    .venv/bin/python -m pip install py-spy          # once (not a project dependency)
    .venv/bin/python benchmarks/profile_round.py [--algo splitfed_v2] [--clients 10] [--seconds 10]
        [--checkout PATH]                            # profile another checkout (e.g. an older commit)
        [-- RUN FLAGS]                               # e.g. -- --eval-every 1 (benchmarks/overhead.py's settings)

Starts ``raysfl run`` from ``--checkout`` (default: this one) with many rounds, lets it
reach steady state (``--warmup`` s), records ``--seconds`` of py-spy samples of the driver
and every Ray process (``--subprocesses``, idle threads excluded), stops the run, and
prints per process the share of one core spent in: torch forward/backward, the optimizer
step, Ray (de)serialisation, other Ray code, and each raysfl function (the innermost
raysfl frame). The rounds per second of the sampled window come from the run's
``metrics.parquet`` (sampling slows the processes down, so compare it only with another
profile). Raw samples are kept next to the table (``--raw``).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDLE = ("Worker.main_loop", "Condition.wait", "EpollSelector.select", "_PollLikeSelector.select",
        "_worker (concurrent")


def category(frames: list[str]) -> str:
    s = ";".join(frames)
    if "torch/optim" in s:
        return "optimizer step"
    if "torch/" in s and ("forward" in s or "backward" in s or "functional.py" in s):
        return "torch forward/backward"
    mine = [f for f in frames if "raysfl/" in f]
    if mine:
        return "raysfl: " + re.sub(r" \(.*", "", mine[-1])
    if "serializ" in s or "pickle" in s.lower():
        return "Ray (de)serialisation"
    if "ray/" in s:
        return "Ray, other"
    return "other"


def summarise(raw: Path, seconds: float, rate: int, top: int) -> list[dict]:
    """Rows (process, category, percent of one core) from py-spy's raw output."""
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        k = max(i for i, f in enumerate(frames) if f.startswith("process "))
        proc = re.sub(r"process \d+:", "", frames[k]).strip('"')
        proc = "driver" if "raysfl" in proc and "run" in proc else proc.split()[0].rsplit("/", 1)[-1]
        proc = re.sub(r"^(ray::\w+)\..*", r"\1", proc)  # the title names the running method: drop it
        frames = frames[k + 1:]
        if frames and not frames[-1].startswith(IDLE):
            per[proc][category(frames)] += int(n)
    rows = []
    for proc, cats in sorted(per.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(cats.values())
        rows.append({"process": proc, "category": "(all)", "core_pct": 100 * total / rate / seconds})
        for cat, n in cats.most_common(top):
            rows.append({"process": proc, "category": cat, "core_pct": 100 * n / rate / seconds})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="splitfed_v2")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--checkout", default=str(ROOT))
    ap.add_argument("--raw", help="keep py-spy's raw samples here")
    ap.add_argument("run_flags", nargs=argparse.REMAINDER,
                    help="after --: more flags of the profiled `raysfl run` (e.g. -- --eval-every 1 --local-epochs 1), "
                         "given after this script's own and so overriding them")
    args = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("profile_round: py-spy not found; install it with `.venv/bin/python -m pip install py-spy`")
    out = Path(tempfile.mkdtemp(prefix="raysfl-profile-"))
    raw = Path(args.raw) if args.raw else out / "samples.txt"
    cmd = [sys.executable, "-m", "raysfl", "run", "--algo", args.algo, "--clients", str(args.clients),
           "--rounds", "100000", "--eval-every", "1000000", "--checkpoint-every", "0", "--no-progress",
           "--out", str(out), "--name", "run", *[f for f in args.run_flags if f != "--"]]
    env = dict(os.environ, PYTHONPATH=str(Path(args.checkout).resolve()))
    run = subprocess.Popen(cmd, cwd=args.checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        time.sleep(args.warmup)
        rounds_before = _rounds(out / "run" / "metrics.parquet")
        subprocess.run([spy, "record", "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--subprocesses",
                        "--pid", str(run.pid), "--duration", str(int(args.seconds))],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        rounds = _rounds(out / "run" / "metrics.parquet") - rounds_before
    finally:
        os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=60)
    rows = summarise(raw, args.seconds, args.rate, args.top)
    print(f"{args.algo}, {args.clients} clients, checkout {args.checkout}: about {rounds / args.seconds:.1f} rounds/s "
          f"while sampled ({rounds} rounds in {args.seconds:g} s, +-1 round)")
    print("| process | where | % of one core |\n|---|---|---:|")
    for r in rows:
        print(f"| {r['process'] if r['category'] == '(all)' else ''} | {r['category']} | {r['core_pct']:.1f} |")


def _rounds(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows if path.exists() else 0


if __name__ == "__main__":
    main()
