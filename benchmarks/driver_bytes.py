"""Bytes through the driver per round: does smashed data pass through it?

    .venv/bin/python benchmarks/driver_bytes.py [--clients 10 100] [--algos splitfed_v2 psl] [--rounds 6]

Runs each algorithm on digits (CNN, cut 2, every client every round, one local epoch, batch
32, no evaluation but at the end, no checkpoints) with ``--direct-payloads off`` (results
returned through the driver: Ray's way, and raysfl's on one machine) and ``on`` (each
payload put into the object store by the actor that made it; the driver passes references),
and counts the bytes the driver process sends and receives over TCP in each round (``ss
-tinp``: Ray's calls between processes, all on loopback here; the driver's own files are not
counted). Reported: the median per round of rounds 2..R-1, beside the round's smashed data
and gradients (``bytes_smashed_up`` + ``bytes_grad_down``) and per client. Linux only
(``ss`` from iproute2).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from sweep import ROOT, write_tables

COMMON = dict(dataset="digits", model="cnn", cut=2, batch_size=32, local_epochs=1.0, seed=0, partition="iid",
              checkpoint_every=0, progress=False)


def tcp_bytes(pid: int) -> int:
    """Bytes sent plus received over the TCP sockets of process ``pid`` so far (open sockets)."""
    out = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
    total = 0
    for block in re.split(r"\n(?=\S)", out):
        if f"pid={pid}," in block:
            for key in ("bytes_sent", "bytes_received"):
                m = re.search(rf"{key}:(\d+)", block)
                total += int(m.group(1)) if m else 0
    return total


def parse_counted(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments of a benchmark that counts the driver's bytes over rounds 2..R-1 (``--rounds``
    R), checked: ``ss`` is there, and R leaves rounds to count."""
    args = ap.parse_args()
    if shutil.which("ss") is None:
        ap.error("needs `ss` (iproute2) to read the driver's TCP byte counts")
    if args.rounds < 4:
        ap.error(f"--rounds must be >= 4 (rounds 2..R-1 are counted), got {args.rounds}")
    return args


def measure(algo: str, clients: int, direct: str, rounds: int) -> dict:
    import raysfl

    pid, marks = os.getpid(), []

    def on_round(row):
        marks.append((tcp_bytes(pid), row["bytes_smashed_up"] + row["bytes_grad_down"]))

    cfg = raysfl.config_from_kwargs(algo=algo, clients=clients, rounds=rounds, eval_every=10**6,
                                    resources={"direct_payloads": direct}, **COMMON)
    start = tcp_bytes(pid)
    raysfl.run(cfg, callbacks=[on_round])
    per_round = [b - a for (a, _), (b, _) in zip([(start, 0)] + marks, marks)][1:-1]
    smashed = statistics.median(s for _, s in marks[1:-1])
    driver = statistics.median(per_round)
    return {"algo": algo, "clients": clients, "direct_payloads": direct, "driver_bytes_per_round": driver,
            "smashed_and_grad_bytes_per_round": smashed, "driver_bytes_per_client": driver / clients}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["splitfed_v2", "psl"])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", default=str(ROOT / "docs/results/driver_bytes.md"))
    args = parse_counted(ap)
    rows = []
    for n in args.clients:
        for algo in args.algos:
            for direct in ("off", "on"):
                r = measure(algo, n, direct, args.rounds)
                rows.append(r)
                print(f"{n:>4} clients {algo:<12} direct {direct:<3}: driver {r['driver_bytes_per_round'] / 1e6:7.2f} MB "
                      f"a round ({r['driver_bytes_per_client'] / 1e3:6.1f} KB a client), smashed data and gradients "
                      f"{r['smashed_and_grad_bytes_per_round'] / 1e6:7.2f} MB", flush=True)
    lines = ["| clients | algorithm | direct payloads | driver MB / round | driver KB / client | smashed + gradients MB / round |",
             "|---:|---|---|---:|---:|---:|"]
    lines += [f"| {r['clients']} | {r['algo']} | {r['direct_payloads']} | {r['driver_bytes_per_round'] / 1e6:.2f} | "
              f"{r['driver_bytes_per_client'] / 1e3:.1f} | {r['smashed_and_grad_bytes_per_round'] / 1e6:.2f} |"
              for r in rows]
    intro = f"{args.rounds} rounds per run. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}"
    write_tables(rows, args.out, "Bytes through the driver per round", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
