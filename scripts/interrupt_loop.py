"""Interrupt a command many times and count how it ends: the check behind docs/reliability.md's
"The way out" and its lost-checkpoint paragraph (flaky endings show only over many tries).

    .venv/bin/python scripts/interrupt_loop.py tune [--times 25]
    .venv/bin/python scripts/interrupt_loop.py demo [--times 25]

``tune``: the command of ``tests/test_signals.py``'s tuning test, SIGINT to its process group a
random 0-14 s (seeded) after its ``tune:`` line. ``demo``: ``examples/flex_sfl.py``, SIGINT at its
round 1 line. Each try has a Ray of its own (``RAY_TMPDIR``), whose processes are killed after
it. Prints one line a try and a tally: exit statuses, hangs (no exit within 120 s: killed), and
for the demo the tries whose finished round was left without a checkpoint.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def argv_of(what: str, out: str) -> tuple[list[str], str]:
    """(command, the line prefix after which the signal goes)."""
    if what == "tune":
        return ([sys.executable, "-m", "raysfl", "tune", "--algo", "splitfed_v2", "--clients", "3", "--rounds", "20",
                 "--local-steps", "150", "--batch-size", "16", "--grid", "lr=0.01,0.1", "--seeds", "1", "--out", out,
                 "--name", "t"], "tune: ")
    return [sys.executable, str(ROOT / "examples" / "flex_sfl.py"), "--out", out], "round    1/"


def one_try(what: str, delay: float) -> tuple[str, bool]:
    """How one interrupted try ended ("130", "-11", "hang", ...) and whether a finished round
    lost its checkpoint."""
    out, marker = tempfile.mkdtemp(prefix="rsfo"), tempfile.mkdtemp(prefix="rsfl", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": marker, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    argv, ready = argv_of(what, out)
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines, seen = [], threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(ready):
                seen.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not seen.wait(300):
            return "never ready", False
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            ending = str(proc.wait(120))
        except subprocess.TimeoutExpired:
            proc.kill()
            ending = "hang"
        text = "".join(lines)
        return ending, "no round was checkpointed" in text or "could not be written" in text
    finally:
        subprocess.run(["pkill", "-9", "-f", marker], check=False)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(marker, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["tune", "demo"])
    ap.add_argument("--times", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng, endings, lost = random.Random(args.seed), collections.Counter(), 0
    for i in range(args.times):
        delay = rng.uniform(0, 14) if args.what == "tune" else 0.0
        ending, was_lost = one_try(args.what, delay)
        endings[ending] += 1
        lost += was_lost
        print(f"{i + 1:>3}: signal after {delay:4.1f} s, exit {ending}{', a round lost its checkpoint' * was_lost}",
              flush=True)
    print(f"{args.times} tries: " + ", ".join(f"exit {k} x{v}" for k, v in sorted(endings.items()))
          + (f"; a finished round left without a checkpoint in {lost}" if args.what == "demo" else ""))


if __name__ == "__main__":
    main()
