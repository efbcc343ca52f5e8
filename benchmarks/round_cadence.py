"""A round as a user waits for it: from one round's end to the next, its checkpoint included.

    .venv/bin/python benchmarks/round_cadence.py [--clients 10 100] [--algos psl splitfed_v2]
        [--eval default off] [--rounds 12] [--runs 3]

``wall_time_s`` (what ``benchmarks/overhead.py`` reports) times a round up to its aggregation
and snapshot; the driver then logs the round's rows and writes its checkpoint (every round by
default, ``--checkpoint-every 1``) before the next round starts. This benchmark runs with the
defaults a user gets -- checkpoints every round, evaluation every round (``default``) or only
after the last (``off``) -- and times the cadence: the seconds between two consecutive rounds'
rows reaching a callback (``raysfl.run(..., callbacks=...)``), the median over rounds 3..R-1,
beside the median ``wall_time_s`` of the same rounds. The settings are
``benchmarks/overhead.py``'s (digits, the CNN at cut 2, IID, batch 32, one local epoch, seed 0,
raysfl's default actors, every client every round); the centralised loop, checkpointing as
often, gives the ratio per training FLOP. Each figure is the median over ``--runs``, the
algorithms taken in turn within each run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from overhead import COMMON, flops_per_round
from sweep import ROOT, write_tables


def cadence(**settings) -> tuple[float, float, float]:
    """One run with checkpoints every round: (median seconds between rounds' rows, median
    ``wall_time_s`` of the same rounds, training FLOPs per round)."""
    import raysfl

    seen: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as out:
        res = raysfl.run(raysfl.config_from_kwargs(**settings, progress=False, checkpoint_every=1, out=out),
                         callbacks=[lambda row: seen.append((int(row["round"]), time.perf_counter()))])
    at = dict(seen)
    rounds = [r for r in range(3, settings["rounds"]) if r in at and r - 1 in at]
    gaps = [at[r] - at[r - 1] for r in rounds]
    walls = [row["wall_time_s"] for row in res.metrics if row["round"] in rounds]
    return statistics.median(gaps), statistics.median(walls), flops_per_round(res.metrics)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["psl", "splitfed_v2"])
    ap.add_argument("--eval", nargs="+", choices=["default", "off"], default=["default", "off"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--runs", type=int, default=3, help="repeat every measurement; figures are medians over them")
    ap.add_argument("--out", default=str(ROOT / "docs/results/round_cadence.md"))
    args = ap.parse_args()
    if args.rounds < 5 or args.runs < 1:
        ap.error(f"--rounds must be >= 5 and --runs >= 1, got {args.rounds} and {args.runs}")
    got: dict[tuple, list[tuple[float, float]]] = {}
    flops: dict[tuple, float] = {}
    for _ in range(args.runs):
        for n in args.clients:
            for evaluation in args.eval:
                base = dict(COMMON, model="cnn", cut=2, clients=n, rounds=args.rounds,
                            eval_every=1 if evaluation == "default" else 10**6)
                for algo in ["centralized", *args.algos]:
                    gap, wall, f = cadence(algo=algo, **base)
                    got.setdefault((n, evaluation, algo), []).append((gap, wall))
                    flops[(n, evaluation, algo)] = f
                    print(f"{n} clients, evaluation {evaluation}, {algo}: {1000 * gap:.1f} ms between rounds, "
                          f"wall_time_s {1000 * wall:.1f} ms", flush=True)
    out = []
    for n in args.clients:
        for evaluation in args.eval:
            c_key = (n, evaluation, "centralized")
            central = statistics.median(g for g, _ in got[c_key])
            for algo in ["centralized", *args.algos]:
                key = (n, evaluation, algo)
                gap = statistics.median(g for g, _ in got[key])
                wall = statistics.median(w for _, w in got[key])
                out.append({"clients": n, "evaluation": evaluation, "algo": algo, "cadence_ms": 1000 * gap,
                            "wall_time_ms": 1000 * wall, "outside_wall_ms": 1000 * (gap - wall),
                            "ratio_central": gap / central * flops[c_key] / flops[key]})
    lines = ["| clients | evaluation | algorithm | ms between rounds | of which `wall_time_s` | after it (rows, "
             "checkpoint) | vs centralised |", "|---:|---|---|---:|---:|---:|---:|"]
    for r in out:
        lines.append(f"| {r['clients']} | {r['evaluation']} | {r['algo']} | {r['cadence_ms']:.1f} | "
                     f"{r['wall_time_ms']:.1f} | {r['outside_wall_ms']:.1f} | {r['ratio_central']:.2f}x |")
    intro = (f"{args.rounds} rounds, figures the median over {args.runs} runs. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(out, args.out, "A round as a user waits for it, checkpoints included",
                 intro, "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
