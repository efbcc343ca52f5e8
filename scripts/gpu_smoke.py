"""GPU smoke test: one command, about 10 minutes on a GPU machine, that exercises what a CPU
machine cannot (docs/scaling.md records its output).

    python scripts/gpu_smoke.py              # on a machine with a CUDA GPU
    python scripts/gpu_smoke.py --dry-run    # the same steps on the CPU (placeholder GPUs), to check the script

Steps, each printed as ``PASS`` / ``FAIL`` with its time:

1. versions (Python, torch, CUDA, cuDNN, Ray, the GPU);
2. one or two rounds of every algorithm with fractional GPUs: client, server and fed shares of
   0.25 on one GPU (``placement.json`` must say ``cuda`` for each actor);
3. a CPU-only driver against a GPU node (the layout of cluster/README.md): a two-node
   ``ray.cluster_utils.Cluster`` whose head has no GPU, the driver with ``CUDA_VISIBLE_DEVICES=""``,
   servers on the GPU node; checkpoints every round, so every server state crosses to the
   driver (a CUDA tensor on the wire would fail here);
4. ``--transfer-dtype bfloat16``;
5. resume: 2 rounds, then ``--resume`` to 3, against 3 rounds straight (``--deterministic``);
6. CUDA against CPU, TF32 off: the per-client gradients of the server side (GAPSL's), and
   BESplit's evidential server step, agree to 1e-4;
7. your own data and loss on fractional GPUs: a regression (``loss="mse"``, SplitFed V2) and a
   multi-label task (``loss="bce"``, GAPSL: the loss under ``vmap`` on CUDA) learn;
8. ``--device-payloads``: SplitFed V2, PSL, FedPairing and BESplit (its teacher logits travel
   with the gradients) give the same metrics with the smashed data kept on the GPU (CUDA IPC
   handles on the wire) as through host memory (``--deterministic``);
9. ``pytest -m "not slow"`` (skipped with ``--skip-tests``, and in ``--dry-run`` unless ``--with-tests``).

Exit status 1 when a step fails. ``--out DIR`` keeps the runs (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARE = 0.25
QUICK = dict(clients=4, rounds=2, local_steps=2, batch_size=16, progress=False, dataset="digits")
ALGOS = {  # per algorithm: settings that keep its GPU shares within one GPU, and runs quick
    "fedavg": {}, "fedprox": {}, "sl": {}, "splitfed_v1": {}, "splitfed_v2": {}, "psl": {}, "epsl": {},
    "gapsl": {}, "besplit": {}, "fed_pairing": {"model": "cnn"},
    "super_sfl": {"model": "cnn"},
    "flex_sfl": {"clients": 6, "flex_sfl": {"edge_servers": 2, "clients_per_cluster": 2}, "client_actors": 1},
    "centralized": {},
}


def shares(client_actors: int = 2) -> dict:
    return {"client_actors": client_actors, "client_gpus": SHARE, "server_gpus": SHARE, "fed_gpus": SHARE}


class Steps:
    def __init__(self):
        self.results: list[tuple[str, bool, float, str]] = []

    def run(self, name: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            note = fn() or ""
            ok = True
        except Exception as e:  # noqa: BLE001 - every failure is reported, the next step still runs
            note = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
            traceback.print_exc()
            ok = False
        secs = time.perf_counter() - t0
        self.results.append((name, ok, secs, note))
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({secs:.1f} s){'  ' + note if note else ''}", flush=True)


def versions(dry: bool) -> str:
    import ray
    import torch

    import raysfl

    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "ray": ray.__version__, "raysfl": raysfl.__version__,
            "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if torch.cuda.is_available() else []}
    if not dry and not info["gpus"]:
        raise RuntimeError("no CUDA GPU on this machine (use --dry-run to check the script on the CPU)")
    return json.dumps(info)


def check_on_cuda(run_dir: Path, algo: str, dry: bool) -> None:
    """Every actor of the run placed on a CUDA device (its placement.json; not in a dry run)."""
    placement = run_dir / "placement.json"
    if placement.exists() and not dry:
        devices = {p["role"]: p["device"] for p in json.loads(placement.read_text())}
        assert all(d.startswith("cuda") for d in devices.values()), f"{algo}: {devices}"


def every_algorithm(out: Path, dry: bool) -> str:
    import raysfl

    done = []
    for algo, extra in ALGOS.items():
        extra = dict(extra)
        actors = extra.pop("client_actors", 2)
        cfg = raysfl.config_from_kwargs(algo=algo, out=str(out), name=f"gpu-{algo}", resources=shares(actors),
                                        **{**QUICK, **extra})
        res = raysfl.run(cfg)
        assert len(res.metrics) == cfg.rounds, f"{algo}: {len(res.metrics)} rounds"
        check_on_cuda(out / f"gpu-{algo}", algo, dry)
        done.append(f"{algo} {res.final['test_accuracy']:.3f}")
    return "; ".join(done)


CPU_DRIVER = r"""
import json, os, sys
from ray.cluster_utils import Cluster
out, dry = sys.argv[1], sys.argv[2] == "1"
gpu_env = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ["CUDA_VISIBLE_DEVICES"] = ""                     # the head node and this driver: no GPU
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 0})
if gpu_env is None:
    os.environ.pop("CUDA_VISIBLE_DEVICES")
else:
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu_env
cluster.add_node(num_cpus=4, num_gpus=1)                      # the GPU node
os.environ["CUDA_VISIBLE_DEVICES"] = ""
cluster.wait_for_nodes()
import ray, torch
assert not torch.cuda.is_available(), "the driver must not see a GPU"
ray.init(address=cluster.address, log_to_driver=False)
try:
    import raysfl
    for algo in ("splitfed_v2", "besplit"):
        cfg = raysfl.config_from_kwargs(algo=algo, clients=4, rounds=2, local_steps=2, batch_size=16, out=out,
                                        name="cpu-driver-" + algo, progress=False, checkpoint_every=1,
                                        resources={"client_actors": 2, "server_gpus": 0.5, "fed_gpus": 0.25,
                                                   "client_gpus": 0.125})
        res = raysfl.run(cfg)
        assert len(res.metrics) == 2
        where = json.load(open(os.path.join(out, "cpu-driver-" + algo, "placement.json")))
        if not dry:
            assert all(p["device"].startswith("cuda") for p in where), where
    print("OK")
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def cpu_driver(out: Path, dry: bool) -> str:
    proc = subprocess.run([sys.executable, "-c", CPU_DRIVER, str(out), "1" if dry else "0"], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    if proc.returncode != 0 or "OK" not in proc.stdout:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "no output")
    return "splitfed_v2 and besplit: 2 rounds, a checkpoint each, driver without CUDA"


def bfloat16(out: Path) -> str:
    import raysfl

    res = raysfl.run(raysfl.config_from_kwargs(algo="splitfed_v2", transfer_dtype="bfloat16", out=str(out),
                                               name="bf16", resources=shares(), **QUICK))
    return f"accuracy {res.final['test_accuracy']:.3f}, {res.final['bytes_up']:,} bytes up"


def resume(out: Path) -> str:
    import pyarrow.parquet as pq

    import raysfl

    kw = dict(QUICK, algo="splitfed_v1", deterministic=True, resources=shares(), out=str(out))
    raysfl.run(raysfl.config_from_kwargs(**{**kw, "rounds": 3}, name="straight"))
    raysfl.run(raysfl.config_from_kwargs(**kw, name="stopped"))
    raysfl.run(raysfl.resume_config(out / "stopped", {"rounds": 3}))

    def rows(name):
        return [{k: v for k, v in r.items() if "wall_time" not in k}
                for r in pq.read_table(out / name / "metrics.parquet").to_pylist()]

    a, b = rows("straight"), rows("stopped")
    assert a == b, f"resumed run differs: {a[-1]} vs {b[-1]}"
    return "3 rounds straight == 2 + resumed 1, to the bit"


def agreement(dry: bool) -> str:
    import torch

    from raysfl.algorithms.besplit.bcc_step import evidential_server_step
    from raysfl.models import build_model
    from raysfl.server_steps import per_client_gradients

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cpu" if dry else "cuda")
    front = build_model("cnn", (1, 8, 8), 10, seed=0).part(0, 1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # six clients' smashed batches at cut 1, with labels
        batches = [(c, 1, front(torch.rand(16, 1, 8, 8, generator=g)), torch.randint(0, 10, (16,), generator=g))
                   for c in range(6)]

    def on(device):
        m = build_model("cnn", (1, 8, 8), 10, seed=0).to(device)
        b = [(c, k, x.to(device), y.to(device)) for c, k, x, y in batches]
        flat, act, _, _, _ = per_client_gradients(m, b)
        models = {c: build_model("cnn", (1, 8, 8), 10, seed=0).to(device) for c in range(6)}
        opts = {c: torch.optim.SGD(models[c].parameters(), lr=0.05, momentum=0.9) for c in range(6)}
        grads = evidential_server_step(models, opts, b, {0: (1, {3: 0.5})}, 3, 10)[0]
        return flat.cpu(), {c: v.cpu() for c, v in act.items()}, {c: v.cpu() for c, v in grads.items()}

    a, b = on(torch.device("cpu")), on(dev)
    worst = max(float((a[0] - b[0]).abs().max()),
                max(float((a[1][c] - b[1][c]).abs().max()) for c in a[1]),
                max(float((a[2][c] - b[2][c]).abs().max()) for c in a[2]))
    assert worst < 1e-4, f"CPU and {dev} differ by {worst:.2e}"
    return f"largest difference {worst:.2e} ({dev} against cpu)"


def own_loss(out: Path, dry: bool) -> str:
    import numpy as np
    import torch
    from torch import nn

    import raysfl

    rng = np.random.default_rng(0)
    x = rng.normal(size=(800, 8)).astype(np.float32)
    w = rng.normal(size=(8, 2))
    tasks = {"mse": ("splitfed_v2", (np.tanh(x @ w) + 0.5 * x[:, :2] ** 2).astype(np.float32)),
             "bce": ("gapsl", (x @ w > 0).astype(np.float32))}
    done = []
    for loss, (algo, y) in tasks.items():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
        cfg = raysfl.config_from_kwargs(algo=algo, out=str(out), name=f"gpu-loss-{loss}", resources=shares(),
                                        partition="iid", cut=1, lr=0.2, server_lr=0.2,
                                        **{**QUICK, "rounds": 4, "local_steps": 10, "batch_size": 32})
        res = raysfl.run(cfg, model=net, data=(x, y), loss=loss)
        first, last = res.metrics[0]["test_loss"], res.final["test_loss"]
        assert last < 0.8 * first, f"{algo} with {loss}: test loss {first:.3f} -> {last:.3f}"
        check_on_cuda(out / f"gpu-loss-{loss}", algo, dry)
        done.append(f"{algo} {loss}: test loss {first:.3f} -> {last:.3f}")
    return "; ".join(done)


def device_payloads(out: Path, dry: bool) -> str:
    import raysfl

    def rows(res):
        return [{k: v for k, v in r.items() if not any(t in k for t in ("wall", "time_s", "sim_", "startup"))}
                for r in res.metrics]

    done = []
    for algo, extra in (("splitfed_v2", {}), ("psl", {}), ("fed_pairing", {"model": "cnn"}), ("besplit", {})):
        got = {}
        for mode in ("off", "on"):
            res = raysfl.run(raysfl.config_from_kwargs(
                algo=algo, deterministic=True, out=str(out), name=f"payloads-{algo}-{mode}",
                resources={**shares(), "device_payloads": mode if not dry else "off"}, **{**QUICK, **extra}))
            got[mode] = rows(res)
        assert got["on"] == got["off"], \
            f"{algo}: device payloads change the results: {got['on'][-1]} vs {got['off'][-1]}"
        done.append(f"{algo} {got['on'][-1]['test_accuracy']:.3f}")
    return "same metrics on and off: " + "; ".join(done)


def tests() -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=3600)
    last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
    if proc.returncode != 0:
        raise RuntimeError(last)
    return last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="run every step on the CPU (placeholder GPUs)")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--skip-tests", action="store_true", help="leave out the test suite")
    ap.add_argument("--with-tests", action="store_true", help="run the test suite in --dry-run too")
    ns = ap.parse_args()
    tmp = None if ns.out else tempfile.TemporaryDirectory()
    out = Path(ns.out or tmp.name)
    out.mkdir(parents=True, exist_ok=True)
    steps = Steps()
    steps.run("versions", lambda: versions(ns.dry_run))
    steps.run("every algorithm, fractional GPUs (0.25 each)", lambda: every_algorithm(out, ns.dry_run))
    steps.run("CPU-only driver, GPU node", lambda: cpu_driver(out, ns.dry_run))
    steps.run("--transfer-dtype bfloat16", lambda: bfloat16(out))
    steps.run("resume, --deterministic", lambda: resume(out))
    steps.run("CUDA against CPU, TF32 off", lambda: agreement(ns.dry_run))
    steps.run("your own data and loss, fractional GPUs", lambda: own_loss(out, ns.dry_run))
    steps.run("--device-payloads on against off", lambda: device_payloads(out, ns.dry_run))
    if not ns.skip_tests and (not ns.dry_run or ns.with_tests):
        steps.run('pytest -m "not slow"', tests)
    failed = [r for r in steps.results if not r[1]]
    print(f"\n{len(steps.results) - len(failed)} of {len(steps.results)} steps passed"
          f"{' (dry run: CPU only)' if ns.dry_run else ''}")
    if tmp is not None:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("RAYSFL_WIRE_GUARD", "1")  # tensors on the wire fail the smoke test too
    sys.exit(main())
