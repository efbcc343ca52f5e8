"""What evaluating per-client models costs: psl's evaluation of N clients, in one process.

    .venv/bin/python benchmarks/evaluation_cost.py [--clients 10 100] [--repeats 5]

The fed server's evaluation of psl (``evaluate_own_models``: every participant's own client
side over the shared server side, plus their average) on digits' test set with the CNN at cut
2, one torch thread as the fed actor has, the clients' models drawn around the initial model.
Four ways: each model on the whole test set or on shares worth ``--eval-passes 10``, each with
the CPU pass in channels-last layout (raysfl's) or in the default layout. A fifth, not
raysfl's: every composite model in one stacked pass (``torch.func.vmap`` over the clients'
own parameters, the shared ones unbatched), on the whole set, the forward passes alone (no
metrics), against the same passes one model after another (the client side copied in place,
as raysfl's evaluator does); issue 44 asked whether it pays on the CPU. Also one test pass of
one model, both layouts. raysfl's way is timed again on each of ``--threads`` beyond the first
(``--eval-cpus``: the fed server evaluates on the CPUs of the actors that wait). Times are the
best of ``--repeats`` (the work is deterministic).

    .venv/bin/python benchmarks/evaluation_cost.py --against REV [--clients 10 100] [--passes 10 2]

compares raysfl's way with the code at a git revision instead, each in processes of their own
taking turns (``--turns``), and checks that both give the same scores.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
import numpy as np
import torch
from per_client_grads import time_ms
from sweep import ROOT, write_tables

from raysfl import evaluation
from raysfl.algorithms.roles.aggregator import block_of, evaluate_own_models
from raysfl.data import load_dataset
from raysfl.models import build_model
from raysfl.runtime.fed_actor import ClientViews, Evaluator
from raysfl.runtime.placement import threads_for
from raysfl.transport import state_to_wire


class Own:
    """What evaluate_own_models reads of an aggregator."""

    def __init__(self, state, own, clients):
        self.global_state, self.own, self.last_clients = state, own, clients


@contextlib.contextmanager
def default_layout():
    """Evaluation passes without raysfl's channels-last layout."""
    keep = evaluation.fast_layout

    @contextlib.contextmanager
    def plain(model, x, device):
        yield False

    evaluation.fast_layout = plain
    try:
        yield
    finally:
        evaluation.fast_layout = keep


@torch.no_grad()
def stacked_against_one_by_one(model, state: dict, own: dict, ds, repeats: int) -> list[dict]:
    """The forward passes of every composite model on the whole test set: one model after
    another (the client side copied in place), and all of them in one ``vmap``-ped pass."""
    from torch.func import functional_call, vmap

    model.eval()
    x = ds.to_tensor(ds.x_test)
    keys = sorted(next(iter(own.values())))
    stacked = {k: torch.stack([torch.from_numpy(np.asarray(o[k])) for o in own.values()]) for k in keys}
    shared = {k: torch.from_numpy(np.asarray(v)) for k, v in state.items() if k not in stacked}
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}

    def one_by_one():
        for o in own.values():
            for k in keys:
                params[k].copy_(torch.from_numpy(np.asarray(o[k])))
            model(x)

    def stacked_pass():
        vmap(lambda mine, xb: functional_call(model, {**shared, **mine}, (xb,)), in_dims=(0, None))(stacked, x)

    n, out = len(own), []
    for way, fn in (("one model after another, forward only", one_by_one), ("stacked (vmap), forward only", stacked_pass)):
        ms = time_ms(fn, repeats, reduce=min)
        out.append({"clients": n, "test_set": "whole, every model", "layout": way, "ms": ms})
        print(f"{n:>4} clients, {way:<40} {ms:8.1f} ms", flush=True)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})
    return out


CHILD = """
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from raysfl.algorithms.roles.aggregator import block_of, evaluate_own_models
from raysfl.data import load_dataset
from raysfl.models import build_model
from raysfl.runtime.fed_actor import ClientViews, Evaluator
from raysfl.transport import state_to_wire
ds = load_dataset("digits")
model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
state = {k: v.copy() for k, v in state_to_wire(model.state_dict()).items()}
out = []
for n, passes, repeats in json.loads(sys.argv[1]):
    rng = np.random.default_rng(0)
    own = {c: {k: v + rng.normal(0, 0.01, v.shape).astype(v.dtype) for k, v in state.items() if block_of(k) < 2}
           for c in range(n)}
    agg = type("Agg", (), {"global_state": state, "own": own, "last_clients": list(range(n))})
    ev = Evaluator(model, ds, "cpu", ClientViews([], rng.integers(0, 20, (n, ds.num_classes))), passes=passes,
                   seed=(0, 1))
    scores = evaluate_own_models(agg, ev)[:2]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        evaluate_own_models(agg, ev)
        times.append(time.perf_counter() - t)
    out.append({"clients": n, "passes": passes, "ms": 1000 * min(times), "scores": list(scores)})
print(json.dumps(out))
"""


def against(rev: str, clients: list[int], passes: list[int], repeats: int, turns: int) -> list[dict]:
    """psl's evaluation (``evaluate_own_models``, one thread, shares of ``--eval-passes``) in
    this checkout and at ``rev`` (a git worktree), each in a process of its own, taking turns
    ``turns`` times so that drift of the machine falls on both: the median of each side's
    best-of-``repeats`` times, and whether both give the same scores."""
    import json
    import os
    import statistics
    import subprocess
    import sys
    import tempfile

    cases = json.dumps([[n, p, repeats] for n in clients for p in passes])
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base), rev], check=True,
                       capture_output=True)
        try:
            seen: dict[tuple, list] = {}
            for _ in range(turns):
                for side, root in (("this checkout", ROOT), (rev, base)):
                    done = subprocess.run([sys.executable, "-c", CHILD, cases], capture_output=True, text=True,
                                          check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
                    for r in json.loads(done.stdout.splitlines()[-1]):
                        seen.setdefault((r["clients"], r["passes"], side), []).append(r)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    rows = []
    for n in clients:
        for p in passes:
            here, there = seen[(n, p, "this checkout")], seen[(n, p, rev)]
            a, b = statistics.median(r["ms"] for r in here), statistics.median(r["ms"] for r in there)
            rows.append({"clients": n, "passes": p, "ms_here": a, "ms_base": b, "ratio": a / b,
                         "same_scores": here[0]["scores"] == there[0]["scores"]})
            print(f"{n:>4} clients, --eval-passes {p}: {a:.1f} ms here, {b:.1f} ms at {rev} ({a / b:.2f}x); "
                  f"same scores: {rows[-1]['same_scores']}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs/results/evaluation_cost.md"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="torch threads; the first for every way, the others for raysfl's")
    ap.add_argument("--against", metavar="REV", default=None,
                    help="instead: raysfl's way here against the code at REV, in processes taking turns")
    ap.add_argument("--passes", type=int, nargs="+", default=[10, 2], help="with --against: --eval-passes values")
    ap.add_argument("--turns", type=int, default=3, help="with --against: how many times each side runs")
    args = ap.parse_args()
    if args.against:
        rows = against(args.against, args.clients, args.passes, args.repeats, args.turns)
        lines = ["| clients | --eval-passes | ms per evaluation, this checkout | ms, the code before | ratio "
                 "| the same scores |", "|---:|---:|---:|---:|---:|---|"]
        lines += [f"| {r['clients']} | {r['passes']} | {r['ms_here']:.1f} | {r['ms_base']:.1f} | {r['ratio']:.2f} | "
                  f"{'yes' if r['same_scores'] else 'no'} |" for r in rows]
        intro = (f"psl's evaluation of per-client models on one thread, this checkout against {args.against}, "
                 f"each side in its own process, {args.turns} turns each, the median of each side's best of "
                 f"{args.repeats}.")
        out = Path(args.out).with_name("evaluation_cost_against.md") if args.out == ap.get_default("out") else args.out
        write_tables(rows, out, "Per-client evaluation against the code before", intro, "\n".join(lines),
                     doc=Path(out).resolve().parents[1] / "performance.md")
        return
    torch.set_num_threads(args.threads[0])
    more = [t for t in args.threads[1:] if t != args.threads[0]]
    raysfl_way = "channels-last (raysfl)"
    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    state = {k: v.copy() for k, v in state_to_wire(model.state_dict()).items()}
    rng = np.random.default_rng(0)
    rows = []
    for layout, ctx in (("channels-last (raysfl)", contextlib.nullcontext), ("default", default_layout)):
        with ctx():
            ms = time_ms(lambda: evaluation.evaluate(model, ds.x_test, ds.y_test, ds.to_tensor), args.repeats, reduce=min)
        rows.append({"clients": 1, "test_set": "whole (one model)", "layout": layout, "ms": ms})
    for t in more:
        with threads_for(t):
            ms = time_ms(lambda: evaluation.evaluate(model, ds.x_test, ds.y_test, ds.to_tensor), args.repeats,
                         reduce=min)
        rows.append({"clients": 1, "test_set": "whole (one model)", "layout": f"{raysfl_way}, {t} threads",
                     "ms": ms})
    for n in args.clients:
        own = {c: {k: v + rng.normal(0, 0.01, v.shape).astype(v.dtype) for k, v in state.items() if block_of(k) < 2}
               for c in range(n)}
        hist = rng.integers(0, 20, (n, ds.num_classes))
        agg = Own(state, own, list(range(n)))
        for passes, what in ((0, "whole, every model"), (10, "shares, --eval-passes 10")):
            for layout, ctx in (("channels-last (raysfl)", contextlib.nullcontext), ("default", default_layout)):
                def once():
                    evaluate_own_models(agg, Evaluator(model, ds, "cpu", ClientViews([], hist), passes=passes,
                                                       seed=(0, 1)))
                with ctx():
                    ms = time_ms(once, args.repeats, reduce=min)
                rows.append({"clients": n, "test_set": what, "layout": layout, "ms": ms})
                print(f"{n:>4} clients, {what:<26} {layout:<24} {ms:8.1f} ms", flush=True)
                for t in more if layout == raysfl_way else ():
                    with threads_for(t):
                        ms = time_ms(once, args.repeats, reduce=min)
                    rows.append({"clients": n, "test_set": what, "layout": f"{layout}, {t} threads", "ms": ms})
                    print(f"{n:>4} clients, {what:<26} {layout}, {t} threads {ms:8.1f} ms", flush=True)
        rows += stacked_against_one_by_one(model, state, own, ds, args.repeats)
    lines = ["| clients | test set | layout | ms per evaluation |", "|---:|---|---|---:|"]
    lines += [f"| {r['clients']} | {r['test_set']} | {r['layout']} | {r['ms']:.1f} |" for r in rows]
    intro = f"Best of {args.repeats}. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}"
    write_tables(rows, args.out, "The cost of evaluating per-client models", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
