"""A regression task in raysfl: your own MLP and real-valued targets, trained with ``loss="mse"``.

    python examples/regression.py                     # SplitFed V2, about a minute on 2 cores
    python examples/regression.py --algo psl --rounds 10

The targets are two real values per sample, a smooth function of 8 features plus noise. The
data go to ``raysfl.run`` with ``loss="mse"``, which reads them as real values (float32,
``(N, 2)``), splits them among the clients at random (``partition="iid"``: there are no classes
to split by) and trains every client and server with the mean squared error. A run without an
accuracy reports its test loss; the summary compares it with the best constant prediction.
docs/custom-model-data.md ("Other tasks") explains each step; ``loss=`` also takes ``"bce"``
(multi-label) or a function of yours.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

import raysfl


def make_data(n: int = 2000, features: int = 8, outputs: int = 2, seed: int = 0):
    """y = tanh(x W) + x[:, :2]^2 / 2 + noise (std 0.1)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    w = np.random.default_rng(1234).normal(size=(features, outputs))
    y = np.tanh(x @ w) + 0.5 * x[:, :outputs] ** 2 + rng.normal(scale=0.1, size=(n, outputs))
    return x, y.astype(np.float32)


def make_model(features: int = 8, outputs: int = 2) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, outputs))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="splitfed_v2", help="any algorithm but epsl, besplit and flex_sfl")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--out", default="runs")
    args = ap.parse_args(argv)

    x, y = make_data()
    cfg = raysfl.Config(algo=args.algo, clients=8, rounds=args.rounds, cut=1, partition="iid", local_steps=10,
                        batch_size=32, lr=0.05, out=args.out)
    result = raysfl.run(cfg, model=make_model(), data=(x, y), loss="mse")
    ds = raysfl.custom_dataset(x, y, targets="values")  # the same 80/20 split the run made
    constant = float(((ds.y_test - ds.y_train.mean(0)) ** 2).mean())
    final = result.final["test_loss"]
    print(f"{args.algo}: test MSE {final:.4f} after round {result.final['round']} (the best constant prediction: "
          f"{constant:.4f}); run directory {result.run_dir}")
    return {"test_mse": final, "constant_mse": constant}


if __name__ == "__main__":
    main()
