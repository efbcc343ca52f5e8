"""Placement on a multi-node Ray cluster: a 3-node cluster in one process
(``ray.cluster_utils.Cluster``, fake GPUs on one node) runs FLEX-SFL with the client actors
spread over the nodes and the edge servers on the GPU node, as configured; and a run that
the cluster cannot hold fails before any actor starts, with one line.

The cluster test runs in a subprocess: the session Ray of conftest.py already owns this
process's ``ray.init``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import json, sys
import ray
from ray.cluster_utils import Cluster

out = sys.argv[1]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
cpu_node = cluster.add_node(num_cpus=3)
gpu_node = cluster.add_node(num_cpus=3, num_gpus=2)
cluster.wait_for_nodes()
ray.init(address=cluster.address, log_to_driver=False)
try:
    import raysfl
    cfg = raysfl.config_from_kwargs(
        algo="flex_sfl", clients=6, rounds=2, local_steps=1, batch_size=16, out=out, name="cluster",
        progress=False, checkpoint_every=0, flex_sfl={"edge_servers": 2, "clients_per_cluster": 2},
        resources={"client_actors": 3, "client_cpus": 1, "client_placement": "STRICT_SPREAD",
                   "server_cpus": 0.5, "server_gpus": 0.5, "fed_cpus": 0.5, "server_placement": "PACK"})
    res = raysfl.run(cfg)
    print(json.dumps({"gpu_node": gpu_node.node_id, "nodes": [n["NodeID"] for n in ray.nodes()],
                      "rounds": len(res.metrics)}))
finally:
    ray.shutdown()
    cluster.shutdown()
"""


@pytest.mark.slow
def test_three_node_cluster_spreads_clients_and_puts_edge_servers_on_the_gpu_node(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["rounds"] == 2 and len(info["nodes"]) == 3
    where = {p["role"]: p for p in json.loads((tmp_path / "cluster" / "placement.json").read_text())}
    clients = [where[f"client-{i}"]["node_id"] for i in range(3)]
    assert len(set(clients)) == 3  # STRICT_SPREAD: one client actor per node
    for j in range(2):  # the edge servers asked for half a GPU each: only the GPU node has them
        assert where[f"server-{j}"]["node_id"] == info["gpu_node"]
        assert len(where[f"server-{j}"]["gpu_ids"]) == 1
        # fake GPUs: no CUDA behind them, unless this host has a real one (then Ray's id 0 is it)
        assert where[f"server-{j}"]["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert where["fed"]["gpu_ids"] == []
    assert all(where[f"client-{i}"]["gpu_ids"] == [] for i in range(3))


def test_a_run_the_cluster_cannot_place_fails_before_it_starts(quick):
    """Enough CPUs in total, but STRICT_SPREAD needs one node per client actor and the
    session's Ray has one node: the placement group never fits."""
    import raysfl
    from raysfl.errors import RunFailed

    cfg = quick(algo="splitfed_v2", resources={"client_actors": 2, "client_placement": "STRICT_SPREAD",
                                               "placement_timeout_s": 2})
    with pytest.raises(RunFailed, match=r"cannot hold the run's actors within 2 s; asked for client actors: "
                                         r"2 x \{0.5 CPU\} \(STRICT_SPREAD\)") as e:
        raysfl.run(cfg)
    assert "\n" not in str(e.value)
