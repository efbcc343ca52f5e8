"""Where a BESplit run's aggregation weights went: each client's weight over its sample share
(``agg_weight`` / share of the round's samples, from ``clients.parquet``) at chosen rounds,
and the global model's accuracy on each client's own test split at the run's last kept
checkpoint (BESplit-G per client, where ``acc_g_local`` is their mean).

    .venv/bin/python benchmarks/besplit_weights.py RUN_DIR [--rounds 1 10 20 30]

A ratio of 1 is FedAvg's weight; EA (eqs. 8-10) moves it. docs/besplit.md uses it to show
the weights' drift over a 60-round run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def weight_ratios(run_dir: Path) -> dict[int, dict[int, float]]:
    """{round: {client: agg_weight / (its samples / the round's samples)}}."""
    rows = pq.read_table(run_dir / "clients.parquet").to_pylist()
    out: dict[int, dict[int, float]] = {}
    for rnd in sorted({r["round"] for r in rows}):
        these = [r for r in rows if r["round"] == rnd and r["samples"]]
        total = sum(r["samples"] for r in these)
        out[rnd] = {r["client"]: r["agg_weight"] / (r["samples"] / total) for r in these}
    return out


def per_client_accuracy(run_dir: Path) -> tuple[int, dict[int, tuple[float, list[int]]]]:
    """(round, {client: (the global model's accuracy on its local test split, its classes)})
    at the newest checkpoint."""
    import raysfl
    from raysfl import checkpoint
    from raysfl.evaluation import evaluate
    from raysfl.runtime.experiment import prepare

    res = raysfl.load_run(run_dir)
    rnd = checkpoint.rounds_saved(run_dir)[-1]
    p = prepare(res.config)
    model = res.model(rnd)
    out = {}
    for c, idx in enumerate(p.local_tests):
        if len(idx):
            acc = evaluate(model, p.ds.x_train[idx], p.ds.y_train[idx], p.ds.to_tensor)[0]
            out[c] = (acc, sorted(set(p.ds.y_train[p.parts[c]].tolist())))
    return rnd, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--rounds", type=int, nargs="+", default=None, help="default: 1 and every 10th round")
    args = ap.parse_args()
    ratios = weight_ratios(args.run_dir)
    rounds = args.rounds or [r for r in ratios if r == 1 or r % 10 == 0]
    clients = sorted({c for r in ratios.values() for c in r})
    print("weight / sample share per client")
    print("round " + " ".join(f"{c:>6}" for c in clients))
    for rnd in rounds:
        print(f"{rnd:5d} " + " ".join(f"{ratios[rnd].get(c, np.nan):6.2f}" for c in clients))
    rnd, acc = per_client_accuracy(args.run_dir)
    print(f"\nthe global model on each client's own test split, round {rnd}")
    for c, (a, classes) in acc.items():
        print(f"client {c:3d}: {a:.3f}  classes {classes}")


if __name__ == "__main__":
    main()
