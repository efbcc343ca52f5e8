"""Server-side batching: one forward/backward per group against one per client, and
per-client server models batched with torch.func against a Python loop.

    .venv/bin/python benchmarks/server_batching.py [--clients 10] [--batch 32] [--repeats 20] [--threads 2]

A group of ``--clients`` smashed batches at the model's usual cut, on CPU:

- **shared model** (SplitFed V2, PSL, FLEX-SFL's edge servers): ``concatenated`` is
  :func:`raysfl.server_steps.shared_server_step`, one optimizer step over the whole group
  (what raysfl does); ``one call per client`` is the same update done as one
  forward/backward per client with the gradients summed, then one step;
- **one model per client** (SplitFed V1): ``loop`` is
  :func:`raysfl.server_steps.per_client_server_step` (what raysfl does); ``torch.func`` stacks
  the clients' models and runs ``vmap(grad(functional_call))`` plus SGD with momentum on
  the stacked tensors. ``max diff`` is the largest difference between the parameters the
  two paths produce after 3 steps (they are the same update).

Times are medians over ``--repeats`` after one warm-up. BatchNorm models are left out of
the torch.func column (their running statistics cannot be updated under vmap).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F
from per_client_grads import time_ms, smashed_group
from sweep import ROOT, write_tables
from torch.func import functional_call, grad, stack_module_state, vmap

from raysfl.server_steps import per_client_server_step, shared_server_step

CASES = [("cnn", (1, 8, 8), 2), ("vit", (1, 8, 8), 4)]
LR, MOMENTUM = 0.05, 0.9


def stacked_sgd(part, clients: int):
    """Per-client copies of ``part`` as stacked tensors, and one step of all of them."""
    models = [copy.deepcopy(part) for _ in range(clients)]
    params, buffers = stack_module_state(models)
    momenta = {k: torch.zeros_like(v) for k, v in params.items()}
    base = copy.deepcopy(part).to("meta")

    def loss_xy(p, b, x, y):
        return F.cross_entropy(functional_call(base, (p, b), (x,)), y)

    g = vmap(grad(loss_xy, argnums=(0, 2)), in_dims=(0, 0, 0, 0))

    def step(xs, ys):
        gp, gx = g(params, buffers, xs, ys)
        with torch.no_grad():
            for k, v in params.items():
                momenta[k].mul_(MOMENTUM).add_(gp[k])
                v.sub_(LR * momenta[k])
        return gx

    return params, step


def _measure(name: str, shape: tuple, cut: int, clients: int, batch: int, repeats: int) -> dict:
    model, batches, part = smashed_group(name, shape, cut, clients, batch)
    frozen = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay put between repeats

    def one_per_client():
        frozen.zero_grad(set_to_none=True)
        for _, _, a, y in batches:
            a = a.clone().requires_grad_(True)
            (F.cross_entropy(part(a), y) / clients).backward()
        frozen.step()

    row = {"model": name, "cut": cut, "clients": clients, "batch": batch,
           "server_params": sum(p.numel() for p in part.parameters()),
           "concat_ms": time_ms(lambda: shared_server_step(model, frozen, batches), repeats),
           "per_call_ms": time_ms(one_per_client, repeats)}

    # one model per client: raysfl's loop against torch.func, from the same start
    models = {c: copy.deepcopy(model) for c in range(clients)}
    opts = {c: torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) for c, m in models.items()}
    row["loop_ms"] = time_ms(lambda: per_client_server_step(models, opts, batches), repeats)
    has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in part.modules())
    if has_bn:
        row["vmap_ms"], row["max_diff"] = float("nan"), float("nan")
        return row
    xs = torch.stack([b[2] for b in batches])
    ys = torch.stack([b[3] for b in batches])
    params, step = stacked_sgd(part, clients)
    row["vmap_ms"] = time_ms(lambda: step(xs, ys), repeats)
    # correctness: 3 steps from the same start on both paths
    models = {c: copy.deepcopy(model) for c in range(clients)}
    opts = {c: torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) for c, m in models.items()}
    params, step = stacked_sgd(part, clients)
    for _ in range(3):
        per_client_server_step(models, opts, [(c, cut, x.clone(), y) for c, cut, x, y in batches])
        step(xs, ys)
    names = [k for k, _ in part.named_parameters()]
    diff = 0.0
    for c in range(clients):
        mine = dict(models[c].part(cut, model.num_blocks).named_parameters())
        for k in names:
            diff = max(diff, float((mine[k] - params[k][c]).abs().max()))
    row["max_diff"] = diff
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "docs/results/server-batching.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    for name, shape, cut in CASES:
        rows.append(_measure(name, shape, cut, args.clients, args.batch, args.repeats))
        r = rows[-1]
        print(f"{name}: concat {r['concat_ms']:.2f} ms, per client {r['per_call_ms']:.2f} ms; "
              f"per-client models loop {r['loop_ms']:.2f} ms, torch.func {r['vmap_ms']:.2f} ms", flush=True)
    lines = ["| model (cut) | server-side parameters | shared: concatenated (ms) | shared: one per client (ms) | "
             "per client / concatenated | own models: loop (ms) | own models: torch.func (ms) | torch.func / loop "
             "| max diff |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['cut']}) | {r['server_params']:,} | {r['concat_ms']:.2f} | "
                     f"{r['per_call_ms']:.2f} | {r['per_call_ms'] / r['concat_ms']:.2f} | {r['loop_ms']:.2f} | "
                     f"{r['vmap_ms']:.2f} | {r['vmap_ms'] / r['loop_ms']:.2f} | {r['max_diff']:.1e} |")
    intro = (f"{args.clients} clients x batch {args.batch}, {args.threads} torch threads, CPU. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "Server-side batching", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
