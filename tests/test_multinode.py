"""Several raylets on this host (issue 47): a head and two worker nodes started by
``ray.cluster_utils.Cluster`` in a process of their own, each node its own raylet and object
store, the head CPU-only and the workers with a fake GPU each; ``raysfl run`` joins it through
``RAY_ADDRESS`` as on a real cluster.

One run shows what a user of a real cluster meets first: the client actors spread over the
nodes, the GPU roles only on the GPU workers, the driver with no CUDA state, smashed data
crossing between nodes, and a whole worker node removed at round 3 of 6
(``--faults kill:node:round=3``: its raylet killed, every process on it) -- the run names the
node and the actors it held, completes its 6 rounds, and either round 3's client rows name the
clients lost with the node or, where the server went with it, round 3 is redone from the
snapshot; later rounds include every client again. Its data set is a small MNIST in
torchvision's file layout under --data-root: the driver reads the training labels and the test
split, never the training images, which each actor reads on its own node
(raysfl/data/landing.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from ray_processes import kill_ours
from test_data_landing import write_mnist

ROOT = Path(__file__).resolve().parents[1]


def with_root() -> str:
    """PYTHONPATH for a child process: this checkout first, then whatever the caller had (a
    device machine puts Ray there)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)

CLUSTER = r"""
import json, sys
from ray.cluster_utils import Cluster

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
workers = [cluster.add_node(num_cpus=2, num_gpus=1) for _ in range(2)]
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address, "head": cluster.head_node.node_id,
                  "workers": [w.node_id for w in workers]}), flush=True)
for line in sys.stdin:  # until the test closes it; "add": a worker node joins now
    if line.strip() == "add":
        node = cluster.add_node(num_cpus=2, num_gpus=1)  # waits for its raylet (not wait_for_nodes: it
                                                        # would count a node the test removed)
        print(json.dumps({"added": node.node_id}), flush=True)
cluster.shutdown()
"""

# the CLI's own entry point, with every CUDA initialisation in the driver recorded
DRIVER = r"""
import sys
import torch
calls = []
_init = torch.cuda._lazy_init
def spy(*a, **k):
    calls.append(1)
    return _init(*a, **k)
torch.cuda._lazy_init = spy
import raysfl.data.datasets as datasets
images = []
_split = datasets.torchvision_split
def split_spy(name, root, download, train):
    images.append("train" if train else "test")
    return _split(name, root, download, train)
datasets.torchvision_split = split_spy
from raysfl.cli import main
code = main(sys.argv[1:])
print("cuda initialisations in the driver:", len(calls))
print("splits whose images the driver read:", sorted(set(images)))
sys.exit(code)
"""


@contextlib.contextmanager
def cluster_of_three():
    """{address, head, workers, env, control}: a head and two worker nodes, removed afterwards by
    their own processes' ids (never `ray stop`); ``control`` is the cluster process (write "add"
    to its stdin and a worker node joins)."""
    marker = tempfile.mkdtemp(prefix="rsfm", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_TMPDIR": marker, "PYTHONPATH": with_root()}
    env.pop("RAY_ADDRESS", None)
    log = open(os.path.join(marker, "cluster.err"), "w")  # noqa: SIM115 - closed below; read when a test fails
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER], env=env, cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        assert line, "the test cluster did not start"
        yield {**json.loads(line), "env": {**env, "RAY_ADDRESS": json.loads(line)["address"]}, "control": proc}
    finally:
        try:
            proc.stdin.close()
            proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - whatever is left is killed below
            pass
        log.close()
        kill_ours(marker)


@pytest.fixture(scope="module")
def three_nodes():
    """The module's 3-node cluster (:func:`cluster_of_three`)."""
    with cluster_of_three() as cluster:
        yield cluster


@pytest.mark.slow  # a 3-node cluster and a 6-round run that loses a node (~2-3 minutes here)
def test_a_run_on_three_nodes_spreads_places_gpu_roles_on_workers_and_survives_losing_a_node(three_nodes,
                                                                                          tmp_path):
    root = write_mnist(tmp_path / "data", n_train=160, n_test=40)  # file-backed: read on each actor's node
    argv = ["run", "--algo", "psl", "--dataset", "mnist", "--data-root", str(root), "--clients", "8", "--rounds", "6",
            "--local-steps", "2", "--batch-size", "16",
            "--faults", "kill:node:round=3", "--client-actors", "3", "--client-placement", "SPREAD",
            "--server-gpus", "0.5", "--out", str(tmp_path), "--name", "mn", "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", DRIVER, *argv], env=three_nodes["env"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cuda initialisations in the driver: 0" in proc.stdout
    assert "splits whose images the driver read: ['test']" in proc.stdout  # never the training images
    run = tmp_path / "mn"
    where = {p["role"]: p for p in json.loads((run / "placement.json").read_text())}
    head, workers = three_nodes["head"], set(three_nodes["workers"])
    clients = {i: where[f"client-{i}"]["node_id"] for i in range(3)}
    assert len(set(clients.values())) == 3  # SPREAD over three nodes: one client actor each
    server = where["server-0"]
    assert server["node_id"] in workers and server["gpu_ids"]  # the GPU role on a GPU worker, never the head
    assert all(where[r]["node_id"] != head or not where[r]["gpu_ids"] for r in where)
    assert any(n != server["node_id"] for n in clients.values())  # smashed data crosses between nodes
    rows = pq.read_table(run / "metrics.parquet").to_pylist()
    assert [r["round"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[0]["bytes_smashed_up"] > 0
    per_client = pq.read_table(run / "clients.parquet").to_pylist()
    removed = [ln.split()[4] for ln in proc.stderr.splitlines() if ln.startswith("raysfl: fault: removed node ")]
    assert len(removed) == 1 and removed[0] in workers, proc.stderr[-3000:]  # one worker node, named
    lost = sorted(r["client"] for r in per_client if r["round"] == 3 and r["failed"])
    events = [(r["round"], r["failures"], r["failed_clients"], r["restarts"], r["retries"]) for r in rows]
    if server["node_id"] == removed[0]:  # the server went with the node: round 3 redone from the snapshot
        assert rows[2]["retries"] >= 1 and rows[2]["restarts"] >= 1 and lost == [], (events, lost)
    else:  # only a client actor went: exactly its clients are lost in round 3
        assert lost == [c for c in range(8) if clients[c % 3] == removed[0]], (events, lost)
        assert rows[2]["failed_clients"] == len(lost) and rows[2]["failures"] >= 1
    for rnd in (5, 6):  # the lost clients train again once their actor is back on a node left
        assert {r["client"] for r in per_client if r["round"] == rnd and r["included"]} == set(range(8))


@pytest.mark.slow
def test_kill_node_without_a_worker_node_is_one_line(tmp_path):
    """On one node (the local Ray a run starts) there is no worker node to remove."""
    proc = subprocess.run([sys.executable, "-m", "raysfl", "run", "--algo", "psl", "--clients", "2", "--rounds", "2",
                           "--local-steps", "1", "--faults", "kill:node:round=2", "--out", str(tmp_path),
                           "--num-cpus", "2"],
                          env={**os.environ, "PYTHONPATH": with_root()}, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "raysfl: error: fault kill:node:round=2: no worker node holds this run's actors (they are on the head or "
        "the driver's node, which kill:node spares); run on a cluster with worker nodes")


@pytest.mark.slow  # its own 3-node cluster, a node lost with no room left, and a node that joins (~1.5 minutes)
def test_clients_of_an_actor_with_no_room_left_sit_out_until_a_node_joins(tmp_path):
    """Each client actor asks for 1.5 of a node's 2 CPUs, one per node: when a worker node goes,
    no node left has room for its client actor. Its clients sit the rounds out (named on stderr,
    counted in unavailable_clients) instead of the run waiting; a worker node that joins then
    takes the actor, and its clients train again."""
    with cluster_of_three() as cluster:
        argv = ["run", "--algo", "psl", "--clients", "6", "--rounds", "40", "--local-steps", "1", "--batch-size", "8",
                "--faults", "kill:node:round=3,delay:client:rounds=4-40:seconds=0.3:clock=real",
                "--client-actors", "3", "--client-placement", "SPREAD", "--client-cpus", "1.5",
                "--server-cpus", "0.25", "--fed-cpus", "0.25", "--server-gpus", "0.5",
                "--placement-timeout-s", "10", "--out", str(tmp_path), "--name", "room", "--no-progress"]
        proc = subprocess.Popen([sys.executable, "-m", "raysfl", *argv], env=cluster["env"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: list[str] = []
        added: list[str] = []

        def follow():  # the first time the run says an actor was not placed again, a node joins
            for line in proc.stderr:
                err.append(line)
                if "not placed again" in line and not added:
                    control = cluster["control"]
                    control.stdin.write("add\n")
                    control.stdin.flush()
                    for out in control.stdout:  # Ray may print on the way; the node's line is ours
                        if out.startswith('{"added"'):
                            added.append(json.loads(out)["added"])
                            break

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=600)
        finally:
            proc.kill()
        reader.join(timeout=10)
        text = "".join(err)
        assert proc.returncode == 0, text[-3000:]
        assert added, text[-3000:]  # the run said which actor Ray could not place again
        gone = [ln for ln in err if "not placed again" in ln]
        again = [ln for ln in err if "placed again; their clients" in ln]
        assert len(gone) == 1 and "sit rounds out until Ray places them" in gone[0], text[-3000:]  # said once ...
        assert len(again) == 1 and again[0].split("clients ")[1] == gone[0].split("clients ")[1].split(" sit")[0] \
            + " train again\n"  # ... and once when they are back
        run = tmp_path / "room"
        rows = pq.read_table(run / "metrics.parquet").to_pylist()
        assert [r["round"] for r in rows] == list(range(1, 41))
        away = [r["round"] for r in rows if r["unavailable_clients"]]
        assert away and min(away) in (3, 4) and max(away) < 40, (away, text[-2000:])  # out, then back
        per_client = pq.read_table(run / "clients.parquet").to_pylist()
        assert {r["client"] for r in per_client if r["round"] == 40 and r["included"]} == set(range(6))

