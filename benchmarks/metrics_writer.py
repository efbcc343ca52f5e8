"""What the metrics writer costs over a long run: every row converted at every rewrite, against
each row converted once (``raysfl.metrics.RowsTable``).

    .venv/bin/python benchmarks/metrics_writer.py [--clients 100] [--rounds 1000] [--write-every 10]

``metrics.parquet`` and ``clients.parquet`` are rewritten whole on the driver's writer thread, at
most every ``WRITE_EVERY_S`` (2 s), so that each is a complete file after every write. This
replays a run's writes without the run: ``--rounds`` rounds of ``--clients`` client rows each
(raysfl's own rows, :func:`raysfl.runtime.rows.client_row`, with varied values), a write every
``--write-every`` rounds (a 0.2 s round: 10 rounds per 2 s), and times the writer's work (CPU
seconds of this thread) two ways: converting all the rows so far at every write
(``Table.from_pylist``, as raysfl did before) and converting each row once. It checks that the
files are the same. The writer shares the driver's cores with the actors: its seconds are CPU
taken from the run on a machine with no idle core.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from sweep import machine

import pyarrow as pa
import pyarrow.parquet as pq

from raysfl.metrics import RowsTable, _write_parquet
from raysfl.runtime.rows import client_row
from raysfl.transport import ClientRoundStats


def client_rows(rnd: int, clients: int, rng: random.Random) -> list[dict]:
    out = []
    for c in range(clients):
        st = ClientRoundStats(client=c, cut=2, samples=rng.randint(10, 20), steps=1, loss_sum=rng.random(),
                              loss_count=1, client_flops=rng.random() * 1e9, server_flops=rng.random() * 1e9,
                              servers=[0])
        st.agg_weight = float(st.samples)
        out.append(client_row(rnd, st, rng.random(), 0.0, True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--write-every", type=int, default=10, help="rounds between two writes (default 10)")
    args = ap.parse_args()
    for name, v in (("--clients", args.clients), ("--rounds", args.rounds), ("--write-every", args.write_every)):
        if v < 1:
            ap.error(f"{name} must be >= 1, got {v}")
    rng = random.Random(0)
    rows: list[dict] = []
    whole_s = once_s = 0.0
    last_whole = last_once = 0.0
    table = RowsTable()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "whole.parquet", Path(tmp) / "once.parquet"
        for rnd in range(1, args.rounds + 1):
            rows.extend(client_rows(rnd, args.clients, rng))
            if rnd % args.write_every and rnd != args.rounds:
                continue
            t = time.thread_time()
            _write_parquet(pa.Table.from_pylist(rows), a)
            last_whole = time.thread_time() - t
            t = time.thread_time()
            _write_parquet(table.of(rows), b)
            last_once = time.thread_time() - t
            whole_s, once_s = whole_s + last_whole, once_s + last_once
        same = pq.read_table(a).equals(pq.read_table(b))
    writes = -(-args.rounds // args.write_every)
    print(f"Command: `.venv/bin/python benchmarks/metrics_writer.py --clients {args.clients} --rounds {args.rounds} "
          f"--write-every {args.write_every}`  \nMachine: {machine()}\n")
    print(f"{args.clients} clients x {args.rounds} rounds = {len(rows):,} client rows, {writes} writes; "
          f"the same file both ways: {'yes' if same else 'NO'}\n")
    print("| writer | CPU s, whole run | CPU s, last write |\n|---|---:|---:|")
    print(f"| every row at every write (before) | {whole_s:.2f} | {last_whole:.3f} |")
    print(f"| each row once (`RowsTable`) | {once_s:.2f} | {last_once:.3f} |")
    print(f"\nratio, whole run: {whole_s / once_s:.1f}x")
    if not same:
        raise SystemExit("the two ways wrote different files")


if __name__ == "__main__":
    main()
