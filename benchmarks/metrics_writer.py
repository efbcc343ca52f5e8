"""What a run's bookkeeping of its rows costs over a long run: the metrics writer converting every
row at every rewrite against each row once (``raysfl.metrics.RowsTable``), and a checkpoint's hash
of the metrics rows over all of them against row by row (``raysfl.checkpoint.RowsDigest``).

    .venv/bin/python benchmarks/metrics_writer.py [--clients 100] [--rounds 1000] [--write-every 10]

``metrics.parquet`` and ``clients.parquet`` are rewritten whole on the driver's writer thread, at
most every ``WRITE_EVERY_S`` (2 s), so that each is a complete file after every write. This
replays a run's writes without the run: ``--rounds`` rounds of ``--clients`` client rows each
(raysfl's own rows, :func:`raysfl.runtime.rows.client_row`, with varied values), a write every
``--write-every`` rounds (a 0.2 s round: 10 rounds per 2 s), and times the writer's work (CPU
seconds of this thread) two ways: converting all the rows so far at every write
(``Table.from_pylist``, as raysfl did before) and converting each row once. It checks that the
files are the same. Then the checkpoint written every round (the default) hashes the run's
metrics rows, one a round (raysfl's own rows, :func:`raysfl.runtime.rows.round_row`), for
``--resume`` to check: timed over ``--rounds`` checkpoints, all the rows each time
(``rows_digest``, as raysfl did before) against row by row, the same hashes checked. Both run on
threads of the driver, which shares the cores with the actors: their seconds are CPU taken from
the run on a machine with no idle core.
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

from raysfl.checkpoint import RowsDigest, rows_digest
from raysfl.metrics import RowsTable, _write_parquet
from raysfl.runtime.rows import client_row, round_row
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


def two_ways(what: str, last: str, before: tuple, now: tuple, ratio: str) -> None:
    """A table of the two ways' CPU seconds, (name, whole run, last), and their ratio."""
    print(f"| {what} | CPU s, whole run | CPU s, {last} |\n|---|---:|---:|")
    for name, whole, at_last in (before, now):
        print(f"| {name} | {whole:.2f} | {at_last:.4f} |")
    print(f"\nratio, whole run: {ratio}")


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
    two_ways("writer", "last write", ("every row at every write (before)", whole_s, last_whole),
             ("each row once (`RowsTable`)", once_s, last_once), f"{whole_s / once_s:.1f}x")
    if not same:
        raise SystemExit("the two ways wrote different files")
    metrics_rows, digest, all_s, by_row_s, same = [], RowsDigest(), 0.0, 0.0, True
    for rnd in range(1, args.rounds + 1):
        metrics_rows.append(round_row(rnd, "psl", evaluation=(rng.random(), rng.random(), {}), train_loss=rng.random(),
                                      participants=args.clients, traffic={}, client_flops=rng.random() * 1e12,
                                      server_flops=rng.random() * 1e12, sim=rng.random(), sim_total=rng.random(),
                                      wall=rng.random(), wall_total=rng.random(), completed=args.clients,
                                      fallback_steps=0, events={}, below_min_included=False, sim_compute=1.0,
                                      sim_compute_total=float(rnd)))
        t = time.thread_time()
        a_hash = rows_digest(metrics_rows)
        last_all = time.thread_time() - t
        t = time.thread_time()
        b_hash = digest.of(metrics_rows)
        last_by_row = time.thread_time() - t
        all_s, by_row_s, same = all_s + last_all, by_row_s + last_by_row, same and a_hash == b_hash
    print(f"\nA checkpoint every round, {args.rounds} metrics rows; the same hashes both ways: "
          f"{'yes' if same else 'NO'}\n")
    two_ways("checkpoint's hash of the rows", "last checkpoint", ("all the rows at every checkpoint (before)", all_s,
             last_all), ("row by row (`RowsDigest`)", by_row_s, last_by_row), f"{all_s / max(by_row_s, 1e-9):.0f}x")
    if not same:
        raise SystemExit("the two ways gave different hashes")


if __name__ == "__main__":
    main()
