"""Would one grouped convolution per layer score many per-client models faster than one pass each?

    .venv/bin/python benchmarks/grouped_evaluation.py [--clients 100] [--rows 36] [--repeats 7]

Issue 44's item 0 asks for per-client composite models (psl's) to be evaluated at the cost of
one model. On the CPU a ``vmap``-ped pass measured slower (docs/performance.md section 10), and
each of 100 psl clients scores 36 test rows at the default ``--eval-passes 10``. This times the
forward passes alone of ``--clients`` copies of the digits CNN (``raysfl.models.zoo.cnn``, each
drawn with its own seed), each on its own ``--rows`` rows of digits' test set, one torch
thread as the fed server has, four ways:

* one model after another, default layout;
* one model after another, inputs and weights channels-last (raysfl's evaluator);
* ``torch.func.vmap`` over the stacked models (``stack_module_state``);
* by hand: every model's convolution as one grouped ``conv2d`` (``groups`` = clients), pooling
  over all of them at once, the linear layers as one batched ``baddbmm``.

It checks that all four give the same logits (largest absolute difference from the first).
Not raysfl's code: a measurement of whether the last way would pay (the best of ``--repeats``).
"""

from __future__ import annotations

import argparse
import contextlib

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F
from per_client_grads import time_ms
from sweep import machine

from raysfl import evaluation
from raysfl.data import load_dataset
from raysfl.models.zoo import cnn


def models_and_inputs(clients: int, rows: int) -> tuple[list[torch.nn.Module], torch.Tensor]:
    ds = load_dataset("digits")
    x = torch.as_tensor(ds.x_test[: clients * rows], dtype=torch.float32)
    if len(x) < clients * rows:  # more rows than the test set: deal it out again
        x = x.repeat((clients * rows + len(x) - 1) // len(x), 1, 1, 1)[: clients * rows]
    models = []
    for k in range(clients):
        torch.manual_seed(k)
        models.append(torch.nn.Sequential(*cnn(ds.input_shape, ds.num_classes).blocks).eval())
    return models, x.reshape(clients, rows, *ds.input_shape)


def grouped_forward(models: list[torch.nn.Module], x: torch.Tensor):
    """The four blocks of ``zoo.cnn`` for every model at once (clients as conv groups)."""
    m, r = x.shape[:2]
    conv = [[b[0] for b in (mod[0], mod[1])] for mod in models]
    w1 = torch.cat([c[0].weight for c in conv]), torch.cat([c[0].bias for c in conv])
    w2 = torch.cat([c[1].weight for c in conv]), torch.cat([c[1].bias for c in conv])
    fc1 = torch.stack([mod[2][1].weight for mod in models]), torch.stack([mod[2][1].bias for mod in models])
    fc2 = torch.stack([mod[3].weight for mod in models]), torch.stack([mod[3].bias for mod in models])

    def run():
        h = x.transpose(0, 1).reshape(r, m * x.shape[2], *x.shape[3:])  # rows, clients x channels, H, W
        h = F.max_pool2d(F.relu(F.conv2d(h, *w1, padding=2, groups=m)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, *w2, padding=2, groups=m)), 2)
        h = h.reshape(r, m, -1).transpose(0, 1)  # clients, rows, features
        h = F.relu(torch.baddbmm(fc1[1].unsqueeze(1), h, fc1[0].transpose(1, 2)))
        return torch.baddbmm(fc2[1].unsqueeze(1), h, fc2[0].transpose(1, 2))

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rows", type=int, default=36, help="test rows per model (36: 100 psl clients, --eval-passes 10)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    models, x = models_and_inputs(args.clients, args.rows)
    x_cl = [xi.contiguous(memory_format=torch.channels_last) for xi in x]
    params, buffers = torch.func.stack_module_state(models)
    base = models[0]
    stacked = torch.func.vmap(lambda p, b, xb: torch.func.functional_call(base, (p, b), (xb,)))

    def channels_last():  # each model's weights laid out as raysfl's evaluator does (evaluation.fast_layout)
        with contextlib.ExitStack() as stack:
            for mod in models:
                stack.enter_context(evaluation.fast_layout(mod, x[0].numpy(), "cpu"))
            return torch.stack([mod(xi) for mod, xi in zip(models, x_cl)])

    ways = {"one model after another, default layout": lambda: torch.stack([mod(xi) for mod, xi in zip(models, x)]),
            "one model after another, channels-last (raysfl's evaluator)": channels_last,
            "stacked (vmap)": lambda: stacked(params, buffers, x),
            "grouped convolutions by hand": grouped_forward(models, x)}
    with torch.no_grad():
        ref = next(iter(ways.values()))()
        print(f"Machine: {machine()}; {args.clients} models of the digits CNN, {args.rows} rows each, 1 thread\n")
        print("| way | ms per evaluation (best) | largest difference from the first |\n|---|---:|---:|")
        for name, fn in ways.items():
            diff = (fn() - ref).abs().max().item()
            print(f"| {name} | {time_ms(fn, args.repeats, reduce=min):.1f} | {diff:.1e} |")


if __name__ == "__main__":
    main()
