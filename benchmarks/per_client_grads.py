"""The cost of GAPSL's per-client server-side gradients: batched (vmap over clients) against
one backward pass per client, next to PSL's single shared step on the same group.

    .venv/bin/python benchmarks/per_client_grads.py [--clients 10] [--batch 32] [--repeats 10] [--threads 2]

For each model, a group of ``--clients`` smashed batches at the model's usual cut, on CPU:
``shared step`` is one forward/backward over the concatenated group (what PSL and SplitFed
V2 pay per step), ``loop`` is one forward/backward per client (what per-client gradients
cost done naively), ``vmap`` is :func:`raysfl.server_steps.per_client_gradients` (what GAPSL
pays). Times are medians over ``--repeats`` after one warm-up; ratios are against the
shared step measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F
from sweep import write_tables

from raysfl.models import build_model
from raysfl.server_steps import _batch_stats_only, per_client_gradients, shared_server_step

# (model, input shape, cut): digits' CNN, ViT and the paper's VGG-16 at their usual cuts, and the
# CNN on mnist5k's 28x28 images at cut 1, where GAPSL's mnist5k tables run it
CASES = [("cnn", (1, 8, 8), 2), ("vit", (1, 8, 8), 4), ("vgg16", (3, 32, 32), 4), ("cnn", (1, 28, 28), 1)]


def time_ms(fn, repeats: int, warmups: int = 1, reduce=statistics.median, sync=None) -> float:
    """Milliseconds of ``fn()`` over ``repeats`` calls after ``warmups`` untimed ones, reduced
    by ``reduce`` (the median; ``min`` for deterministic work). ``sync`` (e.g.
    ``torch.cuda.synchronize``) runs before and after each timed call, so queued GPU work is
    counted where it was launched. The benchmarks' one timer."""
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(repeats):
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return 1000 * reduce(times)


def smashed_group(name: str, shape: tuple, cut: int, clients: int, batch: int):
    """(model, [(client, cut, smashed batch, labels)], server-side part): a seeded group of
    ``clients`` random batches forwarded to ``cut``, as a server receives them."""
    model = build_model(name, shape, 10, seed=0)
    model.train()
    gen = torch.Generator().manual_seed(0)
    batches = []
    for c in range(clients):
        with torch.no_grad():
            a = model.part(0, cut)(torch.randn(batch, *shape, generator=gen))
        batches.append((c, cut, a, torch.randint(0, 10, (batch,), generator=gen)))
    return model, batches, model.part(cut, model.num_blocks)


def _measure(name: str, shape: tuple, cut: int, clients: int, batch: int, repeats: int) -> dict:
    model, batches, part = smashed_group(name, shape, cut, clients, batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights stay put between repeats

    def loop():
        with _batch_stats_only(part):
            for _, _, a, y in batches:
                a = a.clone().requires_grad_(True)
                torch.autograd.grad(F.cross_entropy(part(a), y), list(part.parameters()) + [a])

    return {"model": name, "input": "x".join(map(str, shape)), "cut": cut, "clients": clients, "batch": batch,
            "shared_step_ms": time_ms(lambda: shared_server_step(model, opt, batches), repeats),
            "loop_ms": time_ms(loop, repeats),
            "vmap_ms": time_ms(lambda: per_client_gradients(model, batches), repeats),
            "server_params": sum(p.numel() for p in part.parameters())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="docs/results/per-client-grads.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    for name, shape, cut in CASES:
        rows.append(_measure(name, shape, cut, args.clients, args.batch, args.repeats))
        r = rows[-1]
        print(f"{name}: shared {r['shared_step_ms']:.1f} ms, loop {r['loop_ms']:.1f} ms, "
              f"vmap {r['vmap_ms']:.1f} ms", flush=True)

    lines = ["| model (cut), input | server-side parameters | shared step (ms) | per-client loop (ms) | vmap (ms) | "
             "loop / shared | vmap / shared | vmap / loop |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['cut']}), {r['input']} | {r['server_params']:,} | {r['shared_step_ms']:.1f} | "
                     f"{r['loop_ms']:.1f} | {r['vmap_ms']:.1f} | {r['loop_ms'] / r['shared_step_ms']:.2f} | "
                     f"{r['vmap_ms'] / r['shared_step_ms']:.2f} | {r['vmap_ms'] / r['loop_ms']:.2f} |")
    intro = (f"{args.clients} clients x batch {args.batch}, {args.threads} torch threads, CPU. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "Per-client server-side gradients: cost", intro, "\n".join(lines))


if __name__ == "__main__":
    main()
