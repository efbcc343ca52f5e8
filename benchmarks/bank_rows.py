"""A client bank's step when a step's clients of one batch size are a run of rows (views of the
stacked tensors) against scattered rows (copies), the bank's own code both ways.

    .venv/bin/python benchmarks/bank_rows.py [--rows 5 50 500] [--repeats 15] [--threads 1] [--profile]

At the end of an epoch a client actor's clients have batches of two sizes (digits over 100
clients: 14 or 15 samples; over 1,000 clients: 1 or 2), and ``BankGroup.forward`` steps each
size with one ``vmap``-ped call over those clients' rows. Where the rows are a run it passes
views of the stacked parameters; otherwise it copies them out (``index_select``) and scatters
the gradients back. A client actor orders a group's members by their batch sizes
(``client_bank.batch_order``) so that the rows are runs. This times one step (forward, backward
from a given cut gradient, the SGD step) of ``BankGroup`` with the digits CNN's client side (cut
2) on ``--rows`` rows, 40 % with the larger batch, two ways: the members in that order, and the
same members interleaved (the larger and smaller batches alternating, as ordering by client id
may leave them), and for reference the same samples through one shared model (one forward,
backward and SGD step: the work without a model per client); the best of ``--repeats`` after
two warm-ups, each way built and timed twice, in turn.
``--profile``: then, for the largest ``--rows``, where a step's CPU time goes by operator
(``torch.profiler``, three steps of the runs of rows, the operators over 1 % of it).
"""

from __future__ import annotations

import argparse
import copy
from types import SimpleNamespace

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
from per_client_grads import time_ms
from sweep import machine

from raysfl.data import load_dataset
from raysfl.models import build_model
from raysfl.runtime.client_bank import BankGroup

SIZES = {5: (16, 15), 50: (15, 14), 500: (2, 1)}  # (larger, smaller) batch: digits at 10, 100 and 1,000 clients


def step_of(prefix, shape, rows: int, big: int, small: int, interleaved: bool):
    """One bank step of ``rows`` rows (``BankGroup.forward``, the gradients back, ``BankGroup.step``), as a function."""
    n_big = round(0.4 * rows)
    sizes = [big] * n_big + [small] * (rows - n_big)
    if interleaved:  # the larger batches spread among the smaller
        sizes = [sizes[i] for i in sorted(range(rows), key=lambda i: (i * 7919) % rows)]
    states = [{n: p.detach().numpy().copy() for n, p in prefix.named_parameters()} for _ in range(rows)]
    members = [SimpleNamespace(client=k, part=copy.deepcopy(prefix)) for k in range(rows)]
    bank = BankGroup(members, states, SimpleNamespace(optimizer="sgd", momentum=0.9, weight_decay=0.0), 0.05, "cpu")
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, *shape, generator=gen) for s in sizes]

    def step():
        acts = bank.forward(list(range(rows)), xs)
        for k, a in enumerate(acts):
            bank.receive(k, torch.ones_like(a))
        bank.step()
    return step


def shared_step(prefix, shape, rows: int, big: int, small: int):
    """The same samples through ONE model: one forward, one backward, one SGD step -- what a
    step of ``rows`` clients costs where they share their weights (the centralised loop's kind
    of pass; not raysfl's, a reference for the bank's per-client cost)."""
    n_big = round(0.4 * rows)
    model = copy.deepcopy(prefix)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(n_big * big + (rows - n_big) * small, *shape, generator=torch.Generator().manual_seed(0))

    def step():
        out = model(x)
        out.backward(torch.ones_like(out))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[5, 50, 500])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a client actor's: 1)")
    ap.add_argument("--profile", action="store_true", help="the largest --rows' step by operator (torch.profiler)")
    args = ap.parse_args()
    bad = [r for r in args.rows if r not in SIZES]
    if bad:
        ap.error(f"--rows takes {sorted(SIZES)}, got {bad}")
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    torch.set_num_threads(args.threads)
    ds = load_dataset("digits")
    prefix = build_model("cnn", ds.input_shape, ds.num_classes, seed=0).part(0, 2)
    print(f"Command: `.venv/bin/python benchmarks/bank_rows.py --rows {' '.join(map(str, args.rows))} "
          f"--repeats {args.repeats} --threads {args.threads}{' --profile' if args.profile else ''}`  \nMachine: {machine()}\n")
    print("| rows | batches | runs of rows (views), ms | interleaved (copies), ms | views / copies "
          "| one shared model, the same samples, ms | views / shared |\n|---:|---|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        big, small = SIZES[rows]
        ms = {}
        for way in ("views", "copies", "views", "copies"):  # in turn, twice: the best of both
            fn = step_of(prefix, ds.input_shape, rows, big, small, interleaved=way == "copies")
            ms[way] = min(ms.get(way, float("inf")), time_ms(fn, args.repeats, warmups=2, reduce=min))
        shared = time_ms(shared_step(prefix, ds.input_shape, rows, big, small), args.repeats, warmups=2, reduce=min)
        print(f"| {rows} | {big} and {small} | {ms['views']:.2f} | {ms['copies']:.2f} | "
              f"{ms['views'] / ms['copies']:.2f} | {shared:.2f} | {ms['views'] / shared:.2f} |", flush=True)
    if args.profile:
        profile_step(prefix, ds.input_shape, max(args.rows))


def profile_step(prefix, shape, rows: int) -> None:
    """Where a bank step of ``rows`` rows (runs of rows) spends its CPU time, by operator."""
    from torch.profiler import ProfilerActivity, profile

    fn = step_of(prefix, shape, rows, *SIZES[rows], interleaved=False)
    for _ in range(2):
        fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            fn()
    ops = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in ops)
    print(f"\n{rows} rows, three steps: {total / 3e3:.1f} ms of CPU a step\n\n| operator | share of a step's CPU time |"
          "\n|---|---:|")
    for e in sorted(ops, key=lambda e: -e.self_cpu_time_total):
        if e.self_cpu_time_total / total >= 0.01:
            print(f"| {e.key} | {100 * e.self_cpu_time_total / total:.1f} % |")


if __name__ == "__main__":
    main()
