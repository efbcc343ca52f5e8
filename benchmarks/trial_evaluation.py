"""What a tuning trial, or a table's run, saves by evaluating only the rounds it reads (``--eval-rounds``).

    .venv/bin/python benchmarks/trial_evaluation.py [--algo gapsl] [--datasets digits mnist5k] [--rounds 15] [--repeats 2]
    .venv/bin/python benchmarks/trial_evaluation.py --schedule table --datasets digits --rounds 50

One row's trial as ``raysfl reproduce`` runs it (the algorithm's settings, 10 clients, a
Dirichlet 0.1 split, a validation split of 20 %, tuning seed 1000), cut at a rung of a 50-round
search (``--rounds``: 15 is ASHA's second rung), on each data set, run two ways in one process,
one after the other, ``--repeats`` times: (a) evaluated every round, as trials were; (b) evaluated only in the
rounds the search reads for a table's "mean of the last 5 evaluated rounds" (rounds 1-5 and
11-15 of 15). Each run's wall time from its own rows (rounds only, no start-up). The scores the
search reads are the same both ways (checked here): evaluation does not touch training.

``--schedule table``: a run a table is judged on instead (seed 0, the test split, ``--rounds``
whole), evaluated every round or in the rounds a table reading "the mean of the last 5
evaluated rounds" evaluates (round 1, every 5th and the last 10: raysfl/reproduce/schedule.py);
its output goes to docs/results/table-evaluation.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from pathlib import Path

from sweep import ROOT, write_tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="gapsl")
    ap.add_argument("--datasets", nargs="+", default=["digits", "mnist5k"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--search-rounds", type=int, default=50, help="the rounds of the search the trial is part of")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--schedule", choices=("trial", "table"), default="trial",
                    help="a tuning trial's rounds (the default) or a table's run's")
    ap.add_argument("--out", default=None, help="default: docs/results/{trial,table}-evaluation.md")
    args = ap.parse_args()
    trial = args.schedule == "trial"
    out = Path(args.out or ROOT / "docs" / "results" / f"{args.schedule}-evaluation.md")

    import ray

    import raysfl
    from raysfl.config import round_set
    from raysfl.paper_tables import Metric
    from raysfl.resolve import validate
    from raysfl.reproduce.schedule import rounds_for
    from raysfl.runtime.many_runs import start_local_ray
    from raysfl.tuning.rules import rounds_read

    metric = Metric("mean_last", k=5)
    reads = rounds_read(metric, args.search_rounds) if trial else rounds_for([metric], args.rounds)
    evaluated = {"every round": args.rounds,
                 "the rounds read": len({r for r in round_set(reads) if r <= args.rounds} | {args.rounds})}
    rows = []
    for dataset in args.datasets:
        base = validate(raysfl.config_from_kwargs(algo=args.algo, dataset=dataset, rounds=args.rounds,
                                                  partition="dirichlet", alpha=0.1, validation=0.2 if trial else 0.0,
                                                  seed=1000 if trial else 0, progress=False, checkpoint_every=0,
                                                  out="/tmp/raysfl-trial-eval"))
        sparse = dataclasses.replace(base, eval_rounds=reads)
        start_local_ray([base], 1)
        times: dict[str, list[float]] = {"every round": [], "the rounds read": []}
        scores: dict[str, float] = {}
        for _ in range(args.repeats):
            for way, cfg in (("every round", base), ("the rounds read", sparse)):
                got = raysfl.run(cfg).metrics
                times[way].append(sum(float(r["wall_time_s"]) for r in got))
                scores[way] = metric.value(got)[0]
                print(f"{dataset}, {way}: {times[way][-1]:.1f} s, "
                      f"{sum(math.isfinite(r['test_accuracy']) for r in got)} rounds evaluated, "
                      f"score {scores[way]:.4f}", flush=True)
        if scores["every round"] != scores["the rounds read"]:
            raise SystemExit(f"{dataset}: the scores differ: {scores}")
        med = {w: statistics.median(t) for w, t in times.items()}
        rows += [{"algo": args.algo, "dataset": dataset, "rounds": args.rounds, "way": w, "evaluated": evaluated[w],
                  "median_s": med[w], "runs_s": " ".join(f"{t:.1f}" for t in times[w]),
                  "ratio": med[w] / med["every round"], "score": scores[w]} for w in times]
    ray.shutdown()

    lines = ["| algorithm, data | rounds | evaluated | wall time of the rounds (median) | vs every round |",
             "|---|---:|---|---:|---:|"]
    lines += [f"| {r['algo']}, {r['dataset']} | {r['rounds']} | {r['way']}: {r['evaluated']} | {r['median_s']:.1f} s "
              f"({r['runs_s']}) | {r['ratio']:.2f} |" for r in rows]
    lines += ["", f"The score the {'search' if trial else 'table'} reads is the same both ways on each data set "
                  "(checked)."]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, str(out), f"What a {args.schedule} saves by evaluating only the rounds read", intro,
                 "\n".join(lines), doc=out.resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
