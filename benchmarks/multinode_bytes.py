"""What crosses the network per round on several nodes, algorithm by algorithm.

    .venv/bin/python benchmarks/multinode_bytes.py [--algos splitfed_v2 psl ...] [--rounds 5]

The cluster of ``tests/test_multinode.py``: a head and two worker nodes on this host
(``ray.cluster_utils.Cluster``, 2 CPUs each), each its own raylet and object store, the
client actors spread one per node (``--client-placement SPREAD``, 3 client actors), so smashed
data and gradients travel between object stores; ``--direct-payloads`` is ``auto``, on here
(more than one node). Each algorithm runs on digits (CNN, its own paper defaults otherwise, 8
clients, every client every round, 2 local steps of batch 16, no evaluation but at the end, no
checkpoints). Reported, as the median over rounds 2..R-1:

* per client per local step: the smashed data up plus the gradients down
  (``bytes_smashed_up`` + ``bytes_grad_down`` over the round's steps, from ``clients.parquet``);
* per client per round: the model parameters up plus down (``bytes_params_up`` + ``_down``
  over the round's participants);
* through the driver per round: the bytes its process sends and receives over TCP (``ss
  -tinp``, as ``benchmarks/driver_bytes.py`` counts them): Ray's calls, the references it
  passes, and what is returned through it.

Linux only (``ss`` from iproute2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from driver_bytes import parse_counted, tcp_bytes
from sweep import ROOT, write_tables

ALGOS = ["splitfed_v1", "splitfed_v2", "psl", "gapsl", "flex_sfl", "super_sfl", "fed_pairing", "besplit", "fedavg"]
COMMON = dict(dataset="digits", model="cnn", clients=8, local_steps=2, batch_size=16, seed=0, partition="iid",
              checkpoint_every=0, progress=False)


def measure(algo: str, rounds: int, out: Path) -> dict:
    import pyarrow.parquet as pq

    import raysfl

    pid, marks = os.getpid(), []
    cfg = raysfl.config_from_kwargs(algo=algo, rounds=rounds, eval_every=10**6, out=str(out), name=algo,
                                    clients_per_round=None, resources={"client_actors": 3,
                                                                        "client_placement": "SPREAD"}, **COMMON)
    start = tcp_bytes(pid)
    res = raysfl.run(cfg, callbacks=[lambda row: marks.append(tcp_bytes(pid)) and None])
    driver = [b - a for a, b in zip([start] + marks, marks)][1:-1]
    clients = pq.read_table(res.run_dir / "clients.parquet").to_pylist()
    per_step, params = [], []
    for row in res.metrics[1:-1]:
        mine = [c for c in clients if c["round"] == row["round"]]
        steps = sum(c["steps"] for c in mine)
        per_step.append((row["bytes_smashed_up"] + row["bytes_grad_down"]) / steps if steps else 0.0)
        params.append((row["bytes_params_up"] + row["bytes_params_down"]) / max(1, row["participants"]))
    nodes = {p["node_id"] for p in json.loads((res.run_dir / "placement.json").read_text())
             if p["role"].startswith("client")}
    return {"algo": algo, "client_nodes": len(nodes), "smashed_grad_bytes_per_client_step": statistics.median(per_step),
            "param_bytes_per_client_round": statistics.median(params),
            "driver_bytes_per_round": statistics.median(driver)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", nargs="+", default=ALGOS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs/results/multinode-bytes.md"))
    args = parse_counted(ap)
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="raysfl-multinode-") as out:
            for algo in args.algos:
                r = measure(algo, args.rounds, Path(out))
                rows.append(r)
                print(f"{algo:<12} smashed + gradients {r['smashed_grad_bytes_per_client_step'] / 1e3:8.1f} KB per client "
                      f"step, parameters {r['param_bytes_per_client_round'] / 1e3:8.1f} KB per client round, driver "
                      f"{r['driver_bytes_per_round'] / 1e3:8.1f} KB a round", flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    lines = ["| algorithm | nodes with client actors | smashed + gradients KB / client / step | "
             "parameters KB / client / round | driver KB / round |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['algo']} | {r['client_nodes']} | {r['smashed_grad_bytes_per_client_step'] / 1e3:.1f} | "
              f"{r['param_bytes_per_client_round'] / 1e3:.1f} | {r['driver_bytes_per_round'] / 1e3:.1f} |" for r in rows]
    intro = f"{args.rounds} rounds per run. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}"
    write_tables(rows, args.out, "What crosses the network per round on three nodes", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "scaling.md")


if __name__ == "__main__":
    main()
