"""raysfl's time per round on one GPU against a centralised loop on the same GPU (issue 33's
GPU item): ResNet-18 on CIFAR-shaped synthetic inputs, clients sharing the GPU through
fractional ``num_gpus``.

    python benchmarks/gpu_overhead.py                       # on a machine with a CUDA GPU
    python benchmarks/gpu_overhead.py --clients 10 100 --rounds 4
    python benchmarks/gpu_overhead.py --dry-run             # tiny, on the CPU: checks the script

For each client count and algorithm: ``--rounds`` rounds of raysfl on ``--samples`` synthetic
3x32x32 samples (10 classes; timing only, nothing is learned), every client every round, one
local epoch, batch 32, cut ``--cut``, with the client actors, the server and the fed server
on fractions of the one GPU. The centralised reference is a plain PyTorch loop in this
process on the same GPU: the same model, the same samples per round, batch 32, SGD. Time per
round is the median of rounds 2..R-1 (round 1 starts the actors; round R evaluates); the
reference's is the median of its timed passes. Ratios are measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def data(n: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, n)


def centralised(model_name: str, x, y, rounds: int, device: str) -> float:
    """Seconds per pass over ``x`` (batch 32, SGD) of the zoo model on ``device``."""
    import torch
    import torch.nn.functional as F

    from raysfl.models import build_model

    model = build_model(model_name, (3, 32, 32), 10, seed=0).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    xs, ys = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    times = []
    for _ in range(rounds):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(len(xs), device=device)
        for i in range(0, len(xs), 32):
            idx = perm[i:i + 32]
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]) if len(times) > 1 else times[0]


def raysfl_round(algo: str, clients: int, x, y, rounds: int, model_name: str, cut: int, gpu: bool, out: str) -> float:
    import raysfl

    actors = min(clients, 4)
    share = {"client_actors": actors, "client_gpus": 0.6 / actors, "server_gpus": 0.2, "fed_gpus": 0.1} if gpu \
        else {"client_actors": actors}
    cfg = raysfl.config_from_kwargs(algo=algo, model=model_name, cut=cut, clients=clients, rounds=rounds,
                                    local_epochs=1.0, batch_size=32, partition="iid", seed=0, lr=0.01,
                                    progress=False, checkpoint_every=0, eval_every=rounds, out=out,
                                    resources=share)
    rows = raysfl.run(cfg, data=(x, y)).metrics
    walls = [r["wall_time_s"] for r in rows[1:-1]] or [rows[-1]["wall_time_s"]]
    return statistics.median(walls)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["splitfed_v2", "psl"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--samples", type=int, default=10000, help="synthetic samples (80 %% train)")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--cut", type=int, default=2)
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (checks the script)")
    ns = ap.parse_args()
    import torch

    gpu = torch.cuda.is_available() and not ns.dry_run
    if not gpu and not ns.dry_run:
        print("no CUDA GPU here (--dry-run checks the script on the CPU)", file=sys.stderr)
        return 2
    if ns.dry_run:
        ns.samples, ns.clients, ns.rounds, ns.model = 200, [4], 3, "cnn"
    device = "cuda" if gpu else "cpu"
    name = torch.cuda.get_device_name(0) if gpu else platform.processor() or "CPU"
    print(f"machine: {name}, {os.cpu_count()} cores; torch {torch.__version__}; model {ns.model} cut {ns.cut}; "
          f"{ns.samples} synthetic samples, {ns.rounds} rounds", flush=True)
    x, y = data(ns.samples)
    n_train = ns.samples - -(-ns.samples // 5)  # the 80 % raysfl trains on (a stratified 20 % is the test set)
    ref = centralised(ns.model if not ns.dry_run else "cnn", x[:n_train], y[:n_train], max(3, ns.rounds), device)
    print(f"centralised on {device}: {ref:.2f} s per pass of {n_train} samples", flush=True)
    with tempfile.TemporaryDirectory() as out:
        for clients in ns.clients:
            for algo in ns.algos:
                t = raysfl_round(algo, clients, x, y, ns.rounds, ns.model, ns.cut, gpu, out)
                print(f"{algo:12s} {clients:4d} clients: {t:.2f} s per round, {t / ref:.2f}x centralised", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
