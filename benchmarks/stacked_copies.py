"""SplitFed V1's per-client server-side copies: raysfl's stacked copies against one module per
client, with every client in a step and with only some of them.

    .venv/bin/python benchmarks/stacked_copies.py [--clients 20] [--batch 32] [--repeats 9] [--base REV]

A step of SplitFed V1's server holds one copy of the server side per client of the round. raysfl
steps them stacked (:class:`raysfl.server_steps.StackedCopies`, one ``vmap``-ped forward/backward
and one optimiser), where the round has one cut and SGD; otherwise one module and one optimiser
per client (:func:`raysfl.server_steps.per_client_server_step`, the ``loop`` column). Within a
local epoch over quantity-skewed shares (FLEX-SFL's tables: power-law sizes) clients leave the
steps one by one, so most steps hold a few of the round's clients: ``present`` is how many of
``--clients`` have a batch in the step.

``--base REV`` adds the stacked copies of another revision's ``raysfl/server_steps.py`` (read with
``git show``), timed in the same run. Times are medians over ``--repeats`` after one warm-up, on
one torch thread (a server actor's share on this machine), SGD with momentum 0.9.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import subprocess
import tempfile
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
import torch
from per_client_grads import smashed_group, time_ms
from sweep import ROOT, write_tables

from raysfl.server_steps import StackedCopies, per_client_server_step

# (model, input shape, cut): digits' CNN at its usual cut; the CNN on mnist5k's 28x28 images at
# cut 1 (FLEX-SFL's tables: conv2 on the server) and cut 2 (its cut-2 rows: 403k parameters, the
# fully connected layers, and little compute)
CASES = [("cnn", (1, 8, 8), 2), ("cnn", (1, 28, 28), 1), ("cnn", (1, 28, 28), 2)]


def _module_at(rev: str):
    """``raysfl/server_steps.py`` as it was at ``rev``, imported as a module of its own."""
    text = subprocess.run(["git", "show", f"{rev}:raysfl/server_steps.py"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "server_steps_base.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("server_steps_base", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fresh(batches):
    """The step's batches as a server receives them: smashed data that is a leaf of its own."""
    return [(c, cut, x.detach().clone(), y) for c, cut, x, y in batches]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--base", metavar="REV", help="also time this revision's stacked copies")
    ap.add_argument("--out", default=str(ROOT / "docs/results/stacked-copies.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = _module_at(args.base) if args.base else None
    make = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)  # noqa: E731

    rows = []
    for name, shape, cut in CASES:
        model, batches, part = smashed_group(name, shape, cut, args.clients, args.batch)
        clients = list(range(args.clients))
        stacked = StackedCopies(model, cut, clients, make)
        old = base.StackedCopies(model, cut, clients, make) if base else None
        models = {c: copy.deepcopy(model) for c in clients}
        opts = {c: make(m.parameters()) for c, m in models.items()}
        for present in sorted({args.clients, max(1, args.clients // 4), 1}, reverse=True):
            step = batches[:present]
            row = {"model": name, "input": "x".join(map(str, shape[1:])), "cut": cut,
                   "server_params": sum(p.numel() for p in part.parameters()), "clients": args.clients,
                   "present": present,
                   "loop_ms": time_ms(lambda: per_client_server_step(models, opts, _fresh(step)), args.repeats),
                   "stacked_ms": time_ms(lambda: stacked.step(_fresh(step)), args.repeats)}
            if old is not None:
                row["base_stacked_ms"] = time_ms(lambda: old.step(_fresh(step)), args.repeats)
            rows.append(row)
            print(row, flush=True)

    head = ("| model (input, cut) | server-side parameters | clients in the step | loop (ms) | stacked (ms) "
            "| stacked / loop |")
    sep = "|---|---:|---:|---:|---:|---:|"
    if base:
        head += f" stacked at {args.base} (ms) | {args.base} / loop |"
        sep += "---:|---:|"
    lines = [head, sep]
    for r in rows:
        line = (f"| {r['model']} ({r['input']}, {r['cut']}) | {r['server_params']:,} "
                f"| {r['present']} of {r['clients']} | {r['loop_ms']:.1f} | {r['stacked_ms']:.1f} "
                f"| {r['stacked_ms'] / r['loop_ms']:.2f} |")
        if base:
            line += f" {r['base_stacked_ms']:.1f} | {r['base_stacked_ms'] / r['loop_ms']:.2f} |"
        lines.append(line)
    write_tables(rows, args.out, "SplitFed V1's per-client server copies: stacked against a loop",
                 __doc__.split("\n\n")[2], "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
