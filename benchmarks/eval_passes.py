"""What a smaller ``--eval-passes`` buys and costs where every client keeps a model of its own.

    .venv/bin/python benchmarks/eval_passes.py [--clients 100] [--passes 100 10 5 2] [--rounds 20] [--runs 2]

psl on digits (the CNN at cut 2, IID, batch 32, one local epoch, seed 0: the settings of
``benchmarks/overhead.py``), every round evaluated, once per ``--passes`` value and once with
evaluation off (only after the last round). ``--eval-passes P`` scores each of the round's
composite models on a seeded, class-stratified share of the test set, so that a round's
evaluation costs P test passes (ours; docs/performance.md, section 10); with P at least the
clients, every model sees the whole set. For each P:

- the median round (rounds 2..R-1, the median over ``--runs``) and evaluation's share of it,
  1 - (round with evaluation off) / (round with it), as ``benchmarks/overhead.py`` reads it;
- what the estimate costs in accuracy: the round's reported ``test_accuracy`` (the mean over
  the clients of their composite models' accuracies) against the same run scored on the whole
  set (the first P, where P covers every client). Evaluation does not change training
  (``tests/test_evaluation_schedule.py``), so the runs train the same models round for round;
  the error is the estimate's alone. Mean and largest absolute error over the evaluated rounds.

Issue 44 asks that evaluation take at most 15 % of a default round at 100 clients; the default
stays ``--eval-passes 10`` (ours) so that the papers' 10-client tables keep exact evaluations.
This measures the trade-off a smaller default would make; it changes no default.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from overhead import COMMON, steady
from sweep import ROOT, run, write_tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--passes", type=int, nargs="+", default=[100, 10, 5, 2],
                    help="--eval-passes values; the first must be at least --clients (the whole set, the reference)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--runs", type=int, default=2, help="repeat every measurement; round times are medians over them")
    ap.add_argument("--out", default=str(ROOT / "docs/results/eval_passes.md"))
    args = ap.parse_args()
    if args.passes[0] < args.clients:
        ap.error(f"the first --passes value is the whole-set reference and must be >= --clients "
                 f"({args.clients}), got {args.passes[0]}")
    if args.rounds < 4 or args.runs < 1:
        ap.error(f"--rounds must be >= 4 and --runs >= 1, got {args.rounds} and {args.runs}")
    settings = dict(COMMON, algo="psl", clients=args.clients, rounds=args.rounds)
    rounds_ms: dict[str, list[float]] = {}
    accuracy: dict[int, list[float]] = {}
    for _ in range(args.runs):  # interleaved, so that drift of the machine falls on every setting alike
        for passes in args.passes:
            rows = run(**settings, eval_every=1, eval_passes=passes)
            rounds_ms.setdefault(str(passes), []).append(1000 * steady(rows))
            accuracy[passes] = [r["test_accuracy"] for r in rows]
            print(f"eval_passes {passes}: {1000 * steady(rows):.1f} ms/round", flush=True)
        rows = run(**settings, eval_every=10**6)
        rounds_ms.setdefault("off", []).append(1000 * steady(rows))
        print(f"evaluation off: {1000 * steady(rows):.1f} ms/round", flush=True)
    off = statistics.median(rounds_ms["off"])
    whole = accuracy[args.passes[0]]
    out = []
    for passes in args.passes:
        ms = statistics.median(rounds_ms[str(passes)])
        errors = [abs(a - b) for a, b in zip(accuracy[passes], whole)]
        out.append({"clients": args.clients, "eval_passes": passes, "round_ms": ms, "eval_share": 1 - off / ms,
                    "round_ms_off": off, "mean_abs_error": statistics.mean(errors), "max_abs_error": max(errors),
                    "test_share": min(1.0, passes / args.clients)})
    lines = ["| --eval-passes | share of the test set a model sees | ms / round | evaluation's share of the round "
             "| test_accuracy against the whole set: mean abs. error | largest |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in out:
        lines.append(f"| {r['eval_passes']} | {r['test_share']:.0%} | {r['round_ms']:.1f} | {r['eval_share']:.0%} | "
                     f"{100 * r['mean_abs_error']:.2f} pts | {100 * r['max_abs_error']:.2f} pts |")
    lines += ["", f"Evaluation off: {off:.1f} ms / round."]
    intro = (f"psl, {args.clients} clients, {args.rounds} rounds, round times the median over {args.runs} runs. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(out, args.out, "Evaluation passes against their cost and their estimate's error", intro,
                 "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
