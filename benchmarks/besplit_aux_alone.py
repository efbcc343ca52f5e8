"""BESplit's auxiliary model trained alone, on one client's own data: how far a client's
W_A = [W_Ae, W_Ah] gets without the split model or its teachers, and what the evidential
loss (eq. 5) does to it at raysfl's step size.

    .venv/bin/python benchmarks/besplit_aux_alone.py [--kappa 1] [--seed 0] [--epochs 30]

Each client of a BESplit run's partition (digits, 10 clients, Dirichlet kappa, the 20 % local
test split, the CNN cut after its two conv blocks, batch 32, SGD lr 0.05 with momentum 0.9:
the settings of ``besplit_compare.py``) trains a fresh auxiliary model on its training split
for ``--epochs`` epochs (one epoch = one round's steps), and the model is scored on the
client's own test split. Variants: cross-entropy; the evidential loss with its KL term
annealed over the epochs (exp evidence, as BESplit's default); without the KL term; with the
optimiser restarted every epoch (as every round restarted it until 2026-11-25); with the
gradient clipped at L2 norm 5. Printed: the mean over clients and each client's accuracy, and
how many clients ended with *dead* classes (a class whose logit is below -10 on every test
sample of the client's split: exp evidence then has no gradient left to revive it).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

from raysfl.algorithms.besplit.dtd import auxiliary_model
from raysfl.algorithms.besplit.evidential import evidence, evidential_loss
from raysfl.api import config_from_kwargs
from raysfl.runtime.experiment import prepare

VARIANTS = {  # label: (loss, KL term, optimiser restarted every epoch, clip norm)
    "cross-entropy": ("ce", False, False, 0.0),
    "evidential (eq. 5)": ("evidential", True, False, 0.0),
    "evidential without the KL term": ("evidential", False, False, 0.0),
    "evidential, optimiser restarted every epoch": ("evidential", True, True, 0.0),
    "cross-entropy, optimiser restarted every epoch": ("ce", False, True, 0.0),
    "evidential, gradient clipped at 5": ("evidential", True, False, 5.0),
}


def train_alone(prep, cfg, client: int, epochs: int, loss: str, kl: bool, restart: bool, clip: float):
    """One client's auxiliary model trained on its own split; (local test accuracy, dead classes)."""
    ds = prep.ds
    x, y = ds.to_tensor(ds.x_train), torch.from_numpy(ds.y_train).long()
    torch.manual_seed(cfg.seed * 1_000_003 + client)
    aux = auxiliary_model(prep.model, cfg.cut, ds.num_classes)
    train, test = prep.parts[client], prep.local_tests[client]
    rng = np.random.default_rng([cfg.seed, client])
    opt = None
    for epoch in range(epochs):
        if opt is None or restart:
            opt = torch.optim.SGD(aux.parameters(), lr=cfg.lr, momentum=cfg.momentum)
        order = rng.permutation(train)
        for i in range(0, len(order), cfg.batch_size):
            b = order[i:i + cfg.batch_size]
            logits = aux(x[b])
            if loss == "ce":
                value = F.cross_entropy(logits, y[b])
            else:  # lambda_t = min(1, t / T) over the epochs, T = epochs (BESplit's default horizon)
                value = evidential_loss(evidence(logits, "exp") + 1, y[b], epoch if kl else 0, epochs)
            opt.zero_grad()
            value.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(aux.parameters(), clip)
            opt.step()
    with torch.no_grad():
        logits = aux(x[test])
    dead = int((logits.max(dim=0).values < -10).sum())
    return float((logits.argmax(1) == y[test]).float().mean()), dead


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kappa", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = config_from_kwargs(algo="besplit", dataset="digits", clients=10, alpha=args.kappa, rounds=args.epochs,
                             seed=args.seed, cut=2, batch_size=32, lr=0.05, momentum=0.9, local_test_fraction=0.2)
    prep = prepare(cfg)
    print(f"digits, 10 clients, kappa {args.kappa:g}, seed {args.seed}, {args.epochs} epochs; each client's "
          f"auxiliary model alone, accuracy on its own test split")
    print("| variant | mean | clients with a dead class | per client |\n|---|---:|---:|---|")
    for label, spec in VARIANTS.items():
        res = [train_alone(prep, cfg, c, args.epochs, *spec) for c in range(cfg.clients)]
        accs = [a for a, _ in res]
        print(f"| {label} | {np.mean(accs):.3f} | {sum(d > 0 for _, d in res)} | "
              f"{' '.join(f'{a:.2f}' for a in accs)} |", flush=True)


if __name__ == "__main__":
    main()
