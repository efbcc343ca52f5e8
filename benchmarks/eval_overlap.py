"""Where evaluating a round while the next one trains (``--eval-overlap``) pays, and where not.

    .venv/bin/python benchmarks/eval_overlap.py [--clients 10 100] [--rounds 12] [--runs 2]

psl on digits (the settings of ``benchmarks/overhead.py``: the CNN at cut 2, IID, batch 32,
one local epoch, seed 0), every round evaluated, in two actor layouts: raysfl's default (2
client actors and a server: on 2 cores they keep both busy while a round trains) and one
client actor (a core left over while it trains, as on a machine with more cores than the
run's actors). In each layout the evaluation runs at once after the aggregation, on the CPUs
of the actors that wait (``--eval-overlap off``, the default's evaluation), or while the next
round trains (``on``) on one thread, or on two (``--eval-cpus 2``); and once with evaluation
off (only after the last round), which bounds what any overlap can save. Each figure is the
median round (rounds 2..R-1) and the median over ``--runs``, the settings interleaved so that
drift of the machine falls on all alike. The rows are the same in every setting but for the
wall-clock columns (``tests/test_eval_overlap.py``).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from overhead import COMMON, steady
from sweep import ROOT, run, write_tables

SETTINGS = [  # (layout, client actors, evaluation, resources)
    ("default", 2, "at once (off)", {"eval_overlap": "off"}),
    ("default", 2, "overlapped, 1 thread", {"eval_overlap": "on", "eval_cpus": 1}),
    ("default", 2, "overlapped, 2 threads", {"eval_overlap": "on", "eval_cpus": 2}),
    ("default", 2, "off (after the last round only)", None),
    ("1 client actor", 1, "at once (off)", {"eval_overlap": "off"}),
    ("1 client actor", 1, "overlapped, 1 thread", {"eval_overlap": "on", "eval_cpus": 1}),
    ("1 client actor", 1, "off (after the last round only)", None),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--runs", type=int, default=2, help="repeat every measurement; round times are medians over them")
    ap.add_argument("--out", default=str(ROOT / "docs/results/eval_overlap.md"))
    args = ap.parse_args()
    if args.rounds < 4 or args.runs < 1:
        ap.error(f"--rounds must be >= 4 and --runs >= 1, got {args.rounds} and {args.runs}")
    times: dict[tuple, list[float]] = {}
    for _ in range(args.runs):
        for n in args.clients:
            for layout, actors, evaluation, resources in SETTINGS:
                settings = dict(COMMON, algo="psl", clients=n, rounds=args.rounds,
                                eval_every=1 if resources else 10**6,
                                resources={"client_actors": actors, **(resources or {})})
                ms = 1000 * steady(run(**settings))
                times.setdefault((n, layout, evaluation), []).append(ms)
                print(f"{n} clients, {layout}, evaluation {evaluation}: {ms:.1f} ms/round", flush=True)
    out = []
    for n in args.clients:
        for layout, _, evaluation, _ in SETTINGS:
            ms = statistics.median(times[(n, layout, evaluation)])
            at_once = statistics.median(times[(n, layout, "at once (off)")])
            none = statistics.median(times[(n, layout, "off (after the last round only)")])
            out.append({"clients": n, "layout": layout, "evaluation": evaluation, "round_ms": ms,
                        "vs_at_once": ms / at_once, "eval_ms": ms - none})
    lines = ["| clients | actor layout | evaluation | ms / round | vs evaluating at once | evaluation's cost in "
             "the round (ms) |", "|---:|---|---|---:|---:|---:|"]
    for r in out:
        lines.append(f"| {r['clients']} | {r['layout']} | {r['evaluation']} | {r['round_ms']:.1f} | "
                     f"{r['vs_at_once']:.2f} | {r['eval_ms']:.1f} |")
    intro = (f"psl, {args.rounds} rounds, round times the median over {args.runs} runs. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(out, args.out, "Evaluation overlapping the next round's training, against evaluating at once",
                 intro, "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
