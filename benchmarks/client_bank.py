"""Does a client bank pay? One local step of many clients' client-side models, three ways.

    .venv/bin/python benchmarks/client_bank.py [--clients 5 50] [--batch 14 32] [--repeats 10] [--threads 1]
        [--device cpu|cuda]

For the digits CNN's client side (cut 2: both conv layers), ``--clients`` clients each take one
step on a batch of ``--batch`` samples (forward, backward from a given cut gradient, SGD with
momentum):

- **per round state** (what a client actor does today, once per client per round): the client's
  state loaded into the actor's one model, a new optimiser, the step, the state copied out;
- **resident**: every client's model and optimiser kept in the process, one step each;
- **bank**: the clients' parameters stacked (``torch.func.stack_module_state``), one
  ``vmap``-ped forward/backward for all of them, one ``torch._foreach`` momentum step.

Times are medians over ``--repeats`` after two warm-ups; ratios are against *per round
state* in the same run. On a GPU (``--device cuda``) the bank saves a kernel launch per
client; on the CPU each client's step is already compute-bound.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
from per_client_grads import time_ms
from sweep import ROOT, write_tables
from torch.func import functional_call, stack_module_state, vmap

from raysfl.data import load_dataset
from raysfl.models import build_model

LR, MOMENTUM = 0.05, 0.9


def ways(prefix: torch.nn.Module, x: torch.Tensor, g: torch.Tensor) -> dict:
    """The three ways of one step of ``len(x)`` clients, as functions."""
    n = len(x)
    states = [{k: v.clone() for k, v in prefix.state_dict().items()} for _ in range(n)]
    opt_states = [None] * n
    work = copy.deepcopy(prefix)

    def per_round_state():
        for c in range(n):
            work.load_state_dict(states[c])
            opt = torch.optim.SGD(work.parameters(), lr=LR, momentum=MOMENTUM)
            if opt_states[c] is not None:
                opt.load_state_dict(opt_states[c])
            work(x[c]).backward(g[c])
            opt.step()
            opt.zero_grad(set_to_none=True)
            states[c] = {k: v.detach().clone() for k, v in work.state_dict().items()}
            opt_states[c] = copy.deepcopy(opt.state_dict())

    models = [copy.deepcopy(prefix) for _ in range(n)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM, foreach=True) for m in models]

    def resident():
        for m, opt, xc, gc in zip(models, opts, x, g):
            m(xc).backward(gc)
            opt.step()
            opt.zero_grad(set_to_none=True)

    params, buffers = stack_module_state([copy.deepcopy(prefix) for _ in range(n)])
    params = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    momentum = [torch.zeros_like(v) for v in params.values()]
    skeleton = copy.deepcopy(prefix).to("meta")
    forward = vmap(lambda p, b, xx: functional_call(skeleton, (p, b), (xx,)))

    def bank():
        forward(params, buffers, x).backward(g)
        with torch.no_grad():
            ps = list(params.values())
            grads = [p.grad for p in ps]
            torch._foreach_mul_(momentum, MOMENTUM)
            torch._foreach_add_(momentum, grads)
            torch._foreach_add_(ps, momentum, alpha=-LR)
            for p in ps:
                p.grad = None

    return {"per round state": per_round_state, "resident": resident, "bank": bank}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[5, 50])
    ap.add_argument("--batch", type=int, nargs="+", default=[14, 32])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a client actor has 1 by default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=str(ROOT / "docs/results/client_bank.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    ds = load_dataset("digits")
    prefix = build_model("cnn", ds.input_shape, ds.num_classes, seed=0).part(0, 2).to(device)
    rows = []
    for n in args.clients:
        for b in args.batch:
            gen = torch.Generator().manual_seed(0)
            x = torch.randn(n, b, *ds.input_shape, generator=gen).to(device)
            g = torch.randn(n, *prefix(x[0]).shape, generator=gen).to(device)
            sync = torch.cuda.synchronize if device.type == "cuda" else None
            times = {name: time_ms(fn, args.repeats, warmups=2, sync=sync) for name, fn in ways(prefix, x, g).items()}
            base = times["per round state"]
            for name, ms in times.items():
                rows.append({"clients": n, "batch": b, "way": name, "ms": ms, "ratio": ms / base})
                print(f"{n:>4} clients, batch {b:>3}: {name:<16} {ms:8.2f} ms  ({ms / base:.2f}x)", flush=True)
    lines = ["| clients | batch | way | ms per step of all clients | vs per round state |", "|---:|---:|---|---:|---:|"]
    lines += [f"| {r['clients']} | {r['batch']} | {r['way']} | {r['ms']:.2f} | {r['ratio']:.2f} |" for r in rows]
    intro = (f"Digits CNN, client side at cut 2, on {args.device} with {args.threads} torch thread(s), medians over "
             f"{args.repeats} repeats. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "A client bank against per-client steps", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
