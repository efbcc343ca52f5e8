"""raysfl's time per round on one GPU against a centralised loop on the same GPU (issue 33's
GPU item): ResNet-18 on CIFAR-shaped synthetic inputs, clients sharing the GPU through
fractional ``num_gpus``.

    python benchmarks/gpu_overhead.py                       # on a machine with a CUDA GPU
    python benchmarks/gpu_overhead.py --clients 10 100 --rounds 5 --runs 2
    python benchmarks/gpu_overhead.py --device-payloads off on   # both transports, in one run
    python benchmarks/gpu_overhead.py --dry-run             # tiny, on the CPU: checks the script

For each client count and algorithm: ``--rounds`` rounds of raysfl on ``--samples`` synthetic
3x32x32 samples (10 classes; timing only, nothing is learned), every client every round, one
local epoch, batch 32, cut ``--cut``, with the client actors, the server and the fed server
on fractions of the one GPU. The centralised reference is a plain PyTorch loop in this
process on the same GPU: the same model, the same samples per round, batch 32, SGD. Time per
round is the median, over ``--runs`` runs (at least 2), of rounds 2..R-1 of each (round 1
starts the actors; round R evaluates; ``--rounds`` at least 5, so at least 3 rounds a run);
the reference's is the median of its passes after the first, over as many runs. Ratios are
measured in the same run of this script.
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


def centralised(model_name: str, x, y, rounds: int, device: str) -> list[float]:
    """Seconds of each pass over ``x`` (batch 32, SGD) of the zoo model on ``device``, after
    the first (a fresh model and optimiser: one run of the reference)."""
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
    return times[1:]


def raysfl_round(algo: str, clients: int, x, y, rounds: int, model_name: str, cut: int, gpu: bool,
                 out: str, payloads: str = "auto") -> list[float]:
    """Seconds of each of rounds 2..R-1 of one raysfl run."""
    import raysfl

    actors = min(clients, 4)
    share = {"client_actors": actors, "client_gpus": 0.6 / actors, "server_gpus": 0.2, "fed_gpus": 0.1} if gpu \
        else {"client_actors": actors}
    share["device_payloads"] = payloads if gpu else "auto"
    cfg = raysfl.config_from_kwargs(algo=algo, model=model_name, cut=cut, clients=clients, rounds=rounds,
                                    local_epochs=1.0, batch_size=32, partition="iid", seed=0, lr=0.01,
                                    progress=False, checkpoint_every=0, eval_every=rounds, out=out,
                                    resources=share)
    rows = raysfl.run(cfg, data=(x, y)).metrics
    return [r["wall_time_s"] for r in rows[1:-1]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["splitfed_v2", "psl"])
    ap.add_argument("--rounds", type=int, default=5, help="rounds per run (at least 5: rounds 2..R-1 are timed)")
    ap.add_argument("--runs", type=int, default=2, help="runs per setting, and of the reference (at least 2)")
    ap.add_argument("--samples", type=int, default=10000, help="synthetic samples (80 %% train)")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--cut", type=int, default=2)
    ap.add_argument("--device-payloads", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                    help="the transport of the smashed data (resources.device_payloads), each timed in this run")
    ap.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (checks the script)")
    ns = ap.parse_args()
    if not ns.dry_run and (ns.rounds < 5 or ns.runs < 2):
        ap.error(f"--rounds {ns.rounds} --runs {ns.runs}: a median needs at least 3 timed rounds (--rounds >= 5) "
                 "of at least 2 runs (--runs >= 2)")
    import torch

    gpu = torch.cuda.is_available() and not ns.dry_run
    if not gpu and not ns.dry_run:
        print("no CUDA GPU here (--dry-run checks the script on the CPU)", file=sys.stderr)
        return 2
    if ns.dry_run:
        ns.samples, ns.clients, ns.rounds, ns.runs, ns.model = 200, [4], 5, 2, "cnn"
    device = "cuda" if gpu else "cpu"
    name = torch.cuda.get_device_name(0) if gpu else platform.processor() or "CPU"
    print(f"machine: {name}, {os.cpu_count()} cores; torch {torch.__version__}; model {ns.model} cut {ns.cut}; "
          f"{ns.samples} synthetic samples, {ns.rounds} rounds x {ns.runs} runs", flush=True)
    x, y = data(ns.samples)
    n_train = ns.samples - -(-ns.samples // 5)  # the 80 % raysfl trains on (a stratified 20 % is the test set)
    passes = [t for _ in range(ns.runs) for t in centralised(ns.model, x[:n_train], y[:n_train], ns.rounds, device)]
    ref = statistics.median(passes)
    print(f"centralised on {device}: {ref:.2f} s per pass of {n_train} samples (median of {len(passes)})", flush=True)
    with tempfile.TemporaryDirectory() as out:
        for clients in ns.clients:
            for algo in ns.algos:
                for payloads in ns.device_payloads:
                    walls = [t for _ in range(ns.runs) for t in raysfl_round(algo, clients, x, y, ns.rounds,
                                                                             ns.model, ns.cut, gpu, out, payloads)]
                    t = statistics.median(walls)
                    print(f"{algo:12s} {clients:4d} clients, device payloads {payloads:4s}: {t:.2f} s per round "
                          f"(median of {len(walls)} rounds of {ns.runs} runs), {t / ref:.2f}x centralised", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
