"""Channels-last on the CPU: an evaluation pass with and without its max-pools' inputs laid out
channels-last, and a training step in the default layout against a channels-last model.

    .venv/bin/python benchmarks/channels_last.py [--rows 36 360] [--repeats 30] [--threads 1]

1. **Evaluation passes** (what raysfl does, ``raysfl.evaluation.fast_layout``). Inside
   ``fast_layout`` the weights of 4-D parameters are channels-last; its forward pre-hooks lay
   each ``MaxPool2d``'s input out channels-last too. Each model's pass over ``--rows`` test-like
   rows is timed with the hooks and without them (the weights laid out the same), and the logits
   compared bit for bit. The digits CNN, the CNN on 28x28 and 3x32x32 images, VGG-16.
2. **The max-pool alone** at the digits CNN's first pool (32 channels of 8x8), in both layouts.
3. **A training step** (not raysfl's: measured, not built) of the digits CNN, SGD, batches of
   32 and 14 (a 100-client round's), in the default layout against the model and its inputs
   channels-last, and whether the weights after 20 steps are the same (they are not: the
   convolutions sum in another order).

Times are the best of ``--repeats`` (the work is deterministic), on ``--threads`` torch
threads (the fed server evaluates on one).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F
from per_client_grads import time_ms
from sweep import ROOT, write_tables

from raysfl import evaluation
from raysfl.models import build_model

PASSES = [("cnn", (1, 8, 8), "digits"), ("cnn", (1, 28, 28), "MNIST-sized"), ("cnn", (3, 32, 32), "CIFAR-sized"),
          ("vgg16", (3, 32, 32), "CIFAR-sized")]


@torch.no_grad()
def evaluation_passes(rows: list[int], repeats: int) -> list[dict]:
    out = []
    for name, shape, data in PASSES:
        model = build_model(name, shape, 10, seed=0).eval()
        for n in rows if name == "cnn" else rows[:1]:
            x = torch.randn(n, *shape, generator=torch.Generator().manual_seed(0))
            x = x.contiguous(memory_format=torch.channels_last)
            seen = {}
            for way in ("hooks", "no hooks"):
                keep = evaluation._pool_channels_last
                if way == "no hooks":
                    evaluation._pool_channels_last = lambda module, args: None
                try:
                    with evaluation.fast_layout(model, x.numpy(), "cpu"):
                        seen[way] = (time_ms(lambda: model(x), repeats, warmups=2, reduce=min), model(x))
                finally:
                    evaluation._pool_channels_last = keep
            ms, base = seen["hooks"][0], seen["no hooks"][0]
            same = torch.equal(seen["hooks"][1], seen["no hooks"][1])
            out.append({"part": "evaluation pass", "model": f"{name}, {data} {'x'.join(map(str, shape))}",
                        "rows": n, "ms_as_they_come": base, "ms_channels_last": ms, "ratio": ms / base, "same": same})
            print(f"{name:6} {str(shape):12} {n:4} rows: {ms:8.2f} ms with the pools' hooks, {base:8.2f} without "
                  f"({ms / base:.2f}x); same logits: {same}", flush=True)
    return out


@torch.no_grad()
def pool_alone(rows: list[int], repeats: int) -> list[dict]:
    out = []
    for n in rows:
        x = torch.relu(torch.randn(n, 32, 8, 8, generator=torch.Generator().manual_seed(0)))
        xc = x.contiguous(memory_format=torch.channels_last)
        cl = time_ms(lambda: F.max_pool2d(xc, 2), repeats, warmups=2, reduce=min)
        plain = time_ms(lambda: F.max_pool2d(x, 2), repeats, warmups=2, reduce=min)
        same = torch.equal(F.max_pool2d(xc, 2), F.max_pool2d(x, 2))
        out.append({"part": "max-pool alone", "model": "32 channels of 8x8 (the digits CNN's first pool)", "rows": n,
                    "ms_as_they_come": plain, "ms_channels_last": cl, "ratio": cl / plain, "same": same})
        print(f"max-pool {n:4} rows: {1000 * cl:7.1f} us channels-last, {1000 * plain:7.1f} us default "
              f"({cl / plain:.2f}x)", flush=True)
    return out


def training_steps(repeats: int) -> list[dict]:
    from raysfl.data import load_dataset

    ds = load_dataset("digits")
    out = []
    for n in (32, 14):
        plain = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
        cl = copy.deepcopy(plain).to(memory_format=torch.channels_last)
        x = ds.to_tensor(ds.x_train[:n])
        y = torch.from_numpy(ds.y_train[:n]).long()

        def step(model, xb, opt):
            opt.zero_grad()
            F.cross_entropy(model(xb), y).backward()
            opt.step()

        o1, o2 = torch.optim.SGD(plain.parameters(), lr=0.01), torch.optim.SGD(cl.parameters(), lr=0.01)
        xc = x.contiguous(memory_format=torch.channels_last)
        ms_cl = time_ms(lambda: step(cl, xc, o2), repeats, warmups=3, reduce=min)
        ms_plain = time_ms(lambda: step(plain, x, o1), repeats, warmups=3, reduce=min)
        a = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
        b = copy.deepcopy(a).to(memory_format=torch.channels_last)
        oa, ob = torch.optim.SGD(a.parameters(), lr=0.05), torch.optim.SGD(b.parameters(), lr=0.05)
        for _ in range(20):
            step(a, x, oa)
            step(b, xc, ob)
        same = all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
        out.append({"part": "training step (not raysfl's)", "model": "cnn, digits 1x8x8", "rows": n,
                    "ms_as_they_come": ms_plain, "ms_channels_last": ms_cl, "ratio": ms_cl / ms_plain, "same": same})
        print(f"training step, batch {n}: {ms_plain:.2f} ms default layout, {ms_cl:.2f} ms channels-last "
              f"({ms_cl / ms_plain:.2f}x); the same weights after 20 steps: {same}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[36, 360],
                    help="rows a pass (36: a share at 100 psl clients; 360: digits' test set)")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "docs/results/channels_last.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rows = evaluation_passes(args.rows, args.repeats) + pool_alone(args.rows, args.repeats) + training_steps(args.repeats)
    lines = ["| what | model | rows | ms, the default layout | ms, channels-last | ratio | the same numbers |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['part']} | {r['model']} | {r['rows']} | {r['ms_as_they_come']:.3f} | "
                     f"{r['ms_channels_last']:.3f} | {r['ratio']:.2f} | {'yes' if r['same'] else 'no'} |")
    lines.append("\nEvaluation pass: the weights channels-last either way, the pools' inputs as they come (the code "
                 "before) or laid out channels-last (raysfl now). Training step: raysfl trains in the default layout. "
                 "Ratio: channels-last / the default layout.")
    write_tables(rows, Path(args.out), "Channels-last on the CPU", __doc__.split("\n\n")[2], "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
