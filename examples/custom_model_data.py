"""Your own model and data in raysfl: a PyTorch MLP on NumPy arrays, offline.

    python examples/custom_model_data.py               # two algorithms, a few minutes on 2 cores
    python examples/custom_model_data.py --rounds 5 --out /tmp/runs

Nothing here is registered or patched: the model (an ``nn.Sequential``, split into blocks at
each parameterised layer by ``raysfl.split_sequential``) and the data ((x, y) arrays; a torch
Dataset works too) go to ``raysfl.run``, which checks that they fit each other, makes a fixed
stratified 80/20 train/test split and sends both to every Ray actor as objects. The same
model and data are then trained by SplitFed V2 (one global model) and PSL (clients keep
their own client-side part), a callback stops a run once it is good enough, and the trained
models come back from the result. docs/custom-model-data.md explains each step.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

import raysfl


def make_data(n: int = 3000, features: int = 20, classes: int = 4, seed: int = 0):
    """Tabular data: each class is a mixture of two Gaussian clusters in 20 dimensions (the
    same clusters for every ``seed``; the seed draws the samples)."""
    centres = np.random.default_rng(1234).normal(scale=2.0, size=(classes, 2, features))
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = centres[y, rng.integers(0, 2, n)] + rng.normal(size=(n, features))
    return x.astype(np.float32), y


def make_model(features: int = 20, classes: int = 4) -> nn.Sequential:
    torch.manual_seed(0)  # your model's initial weights are yours: seed them for a reproducible run
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(),
                         nn.Linear(64, 64), nn.ReLU(),
                         nn.Linear(64, classes))


def stop_at(target: float):
    """A callback: stop the run once the test accuracy reaches ``target``."""
    def callback(row: dict) -> bool:
        return row["test_accuracy"] >= target
    return callback


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--target", type=float, default=0.97, help="stop a run early at this test accuracy")
    ap.add_argument("--out", default="runs")
    args = ap.parse_args(argv)

    x, y = make_data()
    net = make_model()
    results = {}
    for algo in ("splitfed_v2", "psl"):
        cfg = raysfl.Config(algo=algo, clients=8, rounds=args.rounds, cut=1, partition="dirichlet", alpha=0.5,
                            local_steps=10, batch_size=32, lr=0.05, out=args.out, keep_checkpoints=1)
        result = raysfl.run(cfg, model=net, data=(x, y), callbacks=[stop_at(args.target)])
        results[algo] = result
        how = "stopped by the callback" if result.stopped else "ran every round"
        print(f"{algo}: test accuracy {result.final['test_accuracy']:.3f} after round {result.final['round']} "
              f"({how}); run directory {result.run_dir}")

    # The models back. SplitFed V2 has one global model: an nn.Module, ready for inference.
    model = results["splitfed_v2"].model()
    x_new, y_new = make_data(500, seed=1)
    with torch.no_grad():
        acc = (model(torch.from_numpy(x_new)).argmax(1).numpy() == y_new).mean()
    print(f"splitfed_v2's global model on 500 new samples: accuracy {acc:.3f}")
    torch.save(results["splitfed_v2"].state_dict(), results["splitfed_v2"].run_dir / "model.pt")  # = raysfl export
    # PSL keeps a client-side part per client: each client's model (its own part + the shared server side).
    own = results["psl"].client_models()
    with torch.no_grad():
        accs = [(m(torch.from_numpy(x_new)).argmax(1).numpy() == y_new).mean() for m in own.values()]
    print(f"psl's {len(own)} client models on the new samples: accuracy {np.mean(accs):.3f} ± {np.std(accs):.3f}")
    return {"splitfed_v2": float(acc), "psl": float(np.mean(accs))}


if __name__ == "__main__":
    main()
