"""raysfl's time per round against the physical limit (centralised training) and against a
sequential single-process SplitFed loop, on the same work.

    .venv/bin/python benchmarks/overhead.py [--clients 10 100] [--rounds 30] [--model cnn --cut 2] [--threads N]
        [--eval default off] [--runs 3]

For every algorithm, client count and evaluation setting, in one process (each raysfl run
starts its own local Ray with raysfl's defaults, as a user's run does):

- **raysfl**: ``--rounds`` rounds on digits with ``--model`` at ``--cut``, every client every
  round, one local epoch, batch 32, seed 0; with ``--eval default`` evaluated every round
  at the defaults, as users run (``--eval-passes`` 10 included), with ``--eval off`` only
  after the last round;
- **centralised** (``--algo centralized``): the same model on the pooled samples, the same
  number of samples per round and batch size and the same evaluation, in the driver's
  process with every core;
- **sequential reference** (:func:`sequential_splitfed`, with ``--eval off`` only: it does not
  evaluate): SplitFed V1 as the papers' reference code runs it, one process, clients one
  after another, one server-side model per client, FedAvg of both halves at the end of the
  round, every core for torch.

Time per round is the median of rounds 2..R-1 (round 1 starts the actors; with evaluation
off, round R evaluates); the centralised run is measured before and after the distributed
ones and its rounds pooled, so drift of the machine shows less in the ratios. The whole set
is repeated ``--runs`` times and each figure is the median over them. Because algorithms
choose different cuts and client subsets, the ratios are per unit of work: seconds per
training FLOP (client plus server side, as each run counts them), which for equal work is
the ratio of round times.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from sweep import ROOT, run, write_tables

COMMON = dict(dataset="digits", batch_size=32, local_epochs=1.0, seed=0, partition="iid")


def steady(rows: list[dict], key: str = "wall_time_s") -> float:
    """Median of rounds 2..R-1 (round 1 warms up, round R evaluates)."""
    mid = rows[1:-1] or rows
    return statistics.median(r[key] for r in mid)


def flops_per_round(rows: list[dict]) -> float:
    return statistics.median(r["client_flops"] + r["server_flops"] for r in rows[1:-1] or rows)


def sequential_splitfed(clients: int, rounds: int, threads: int, model_name: str = "cnn", cut: int = 2) -> float:
    """SplitFed V1 the way the papers' reference code runs it, in this process.

    Clients train one after another; each has its own server-side model; after the round
    both halves are averaged (FedAvg, weighted by samples). Same data, partition, model,
    cut, batch size, optimizer and sample order as raysfl's ``splitfed_v1``.
    Returns the median seconds per round over rounds 2..R-1.
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    from raysfl.data import load_dataset, partition
    from raysfl.models import build_model
    from raysfl.runtime.client_actor import sample_stream

    torch.set_num_threads(threads)
    ds = load_dataset("digits")
    parts = partition(ds.y_train, clients, "iid", seed=0)
    model = build_model(model_name, ds.input_shape, ds.num_classes, seed=0)
    client_global, server_global = model.part(0, cut), model.part(cut, model.num_blocks)
    pos = [0] * clients
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        c_states, s_states, weights = [], [], []
        for c in range(clients):
            cm, sm = copy.deepcopy(client_global), copy.deepcopy(server_global)
            co = torch.optim.SGD(cm.parameters(), lr=0.05, momentum=0.9)
            so = torch.optim.SGD(sm.parameters(), lr=0.05, momentum=0.9)
            n = len(parts[c])
            batch = min(COMMON["batch_size"], n)
            for _ in range(max(1, -(-n // batch))):
                idx = sample_stream(parts[c], c, 0, pos[c], batch)
                pos[c] += batch
                x, y = ds.to_tensor(ds.x_train[idx]), torch.from_numpy(ds.y_train[idx])
                acts = cm(x)
                smashed = acts.detach().requires_grad_(True)  # "sent" to the server
                loss = F.cross_entropy(sm(smashed), y)
                so.zero_grad()
                loss.backward()
                so.step()
                co.zero_grad()
                acts.backward(smashed.grad)  # the gradient "sent" back
                co.step()
            c_states.append(cm.state_dict())
            s_states.append(sm.state_dict())
            weights.append(float(n))
        # plain torch averaging, as reference code does: raysfl.aggregation.weighted_average
        # (float64, key by key over holders) is far slower at 100 clients and would
        # handicap the reference
        w = np.asarray(weights) / sum(weights)
        for glob, states in ((client_global, c_states), (server_global, s_states)):
            glob.load_state_dict({k: sum(float(wi) * st[k].float() for wi, st in zip(w, states)).to(v.dtype)
                                  for k, v in glob.state_dict().items()})
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:-1] or times)


def measure(n: int, evaluation: str, args) -> list[dict]:
    """One measurement of every algorithm at ``n`` clients: rows of round times and ratios."""
    settings = dict(COMMON, model=args.model, cut=args.cut, clients=n, rounds=args.rounds,
                    eval_every=1 if evaluation == "default" else 10**6)
    resources = {k: v for k, v in (("eval_cpus", args.eval_cpus), ("eval_overlap", args.eval_overlap)) if v}
    mine = dict(settings, resources=resources) if resources else settings
    tag = f"{n:>5} clients, evaluation {evaluation:<7}"
    central = run(algo="centralized", **settings)
    c_flops = flops_per_round(central)
    print(f"{tag} centralised: {steady(central) * 1000:.1f} ms/round", flush=True)
    measured = []
    for algo in ["splitfed_v1", *args.algos]:
        out = run(algo=algo, **mine)
        seq = float("nan")
        if algo == "splitfed_v1" and evaluation == "off":
            seq = sequential_splitfed(n, args.rounds, args.threads, args.model, args.cut)
        print(f"{tag} {algo}: {steady(out) * 1000:.1f} ms/round"
              + (f", sequential reference: {seq * 1000:.1f} ms/round" if seq == seq else ""), flush=True)
        measured.append((algo, out, seq))
    # the limit once more after the distributed runs: the median of both measurements
    again = run(algo="centralized", **settings)
    c_time = statistics.median([r["wall_time_s"] for r in central[1:-1] + again[1:-1]])
    print(f"{tag} centralised (both measurements): {c_time * 1000:.1f} ms/round", flush=True)
    return [{"clients": n, "evaluation": evaluation, "algo": algo, "round_ms": 1000 * steady(out),
             "central_ms": 1000 * c_time, "ratio_central": steady(out) / c_time * c_flops / flops_per_round(out),
             "sequential_ms": 1000 * seq, "ratio_sequential": steady(out) / seq}
            for algo, out, seq in measured]


def medians(runs: list[list[dict]]) -> list[dict]:
    """Each figure's median over the repeated measurements (rows matched by position)."""
    out = []
    for rows in zip(*runs):
        row = dict(rows[0])
        for k in ("round_ms", "central_ms", "ratio_central", "sequential_ms", "ratio_sequential"):
            row[k] = statistics.median(r[k] for r in rows)
        row["ratio_range"] = (min(r["ratio_central"] for r in rows), max(r["ratio_central"] for r in rows))
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["splitfed_v2", "psl", "flex_sfl"])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--eval", nargs="+", choices=["default", "off"], default=["default", "off"],
                    help="evaluation every round at the defaults, as users run, and/or only after the last round")
    ap.add_argument("--runs", type=int, default=3, help="repeat every measurement; figures are medians over them")
    ap.add_argument("--model", default="cnn", help="model (vit: heavier steps, so less overhead per FLOP)")
    ap.add_argument("--cut", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads of the sequential reference")
    ap.add_argument("--eval-cpus", type=int, default=None,
                    help="raysfl's --eval-cpus (default: unset, the CPUs of the actors that wait; 1: as before it)")
    ap.add_argument("--eval-overlap", choices=["on", "off"], default=None,
                    help="raysfl's --eval-overlap (default: unset, raysfl's own: on; off: as before it)")
    ap.add_argument("--out", default=str(ROOT / "docs/results/overhead.md"))
    args = ap.parse_args()
    if args.runs < 1 or args.rounds < 4:
        ap.error(f"--runs must be >= 1 and --rounds >= 4 (rounds 2..R-1 are timed), got {args.runs} and {args.rounds}")

    rows = []
    for n in args.clients:
        for evaluation in args.eval:
            rows += medians([measure(n, evaluation, args) for _ in range(args.runs)])
    lines = ["| clients | evaluation | algorithm | raysfl ms / round | centralised ms / round "
             "| raysfl / centralised (per FLOP) | range over runs | sequential reference ms / round "
             "| raysfl / sequential |", "|---:|---|---|---:|---:|---:|---|---:|---:|"]
    for r in rows:
        seq = "—" if r["sequential_ms"] != r["sequential_ms"] else f"{r['sequential_ms']:.1f}"
        rs = "—" if r["ratio_sequential"] != r["ratio_sequential"] else f"{r['ratio_sequential']:.2f}"
        lo, hi = r["ratio_range"]
        lines.append(f"| {r['clients']} | {r['evaluation']} | {r['algo']} | {r['round_ms']:.1f} | {r['central_ms']:.1f} | "
                     f"{r['ratio_central']:.2f} | {lo:.2f}-{hi:.2f} | {seq} | {rs} |")
    by = {(r["clients"], r["algo"], r["evaluation"]): r["round_ms"] for r in rows}
    shares = [(n, algo, 1 - by[(n, algo, "off")] / by[(n, algo, "default")]) for (n, algo, e) in by
              if e == "default" and (n, algo, "off") in by]
    if shares:  # what evaluation at the defaults costs of a round: 1 - (round without it) / (round with it)
        lines += ["", "Evaluation's share of a default round (1 - round without it / round with it):", "",
                  "| clients | algorithm | evaluation's share |", "|---:|---|---:|"]
        lines += [f"| {n} | {algo} | {share:.0%} |" for n, algo, share in shares]
    for r in rows:
        r["ratio_range"] = list(r["ratio_range"])
    layout = ("raysfl's default actor layout" + (f", --eval-cpus {args.eval_cpus}" if args.eval_cpus else "")
              + (f", --eval-overlap {args.eval_overlap}" if args.eval_overlap else ""))
    intro = (f"Model {args.model} at cut {args.cut}, {args.rounds} rounds per run, medians over {args.runs} "
             f"runs, {layout}, sequential reference on {args.threads} torch threads. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "Overhead: raysfl against centralised training and a sequential loop", intro,
                 "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
