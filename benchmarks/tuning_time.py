"""What tuning costs: a grid searched by ``raysfl.tuning`` (Ray Tune, successive halving) against
the same settings run to the end without it.

    .venv/bin/python benchmarks/tuning_time.py [--algo splitfed_v2] [--rounds 30] [--seeds 2]

One grid of four learning rates over 1.5 decades (a table's grid), on the embedded digits
(raysfl's defaults otherwise: 10 clients, one local epoch, evaluation every round), on two
tuning seeds with a validation split: (a) searched as ``raysfl reproduce`` tunes a row, its
trials Tune's, stopped early by ASHA; (b) every setting on every seed run to the end, two at a
time, by ``raysfl.run`` in this process (a warm federation). The ratio of the two wall times is
what the search costs against the full grid: below 1 where successive halving saves more than
Tune's trials cost to start; the rounds each ran say how much early stopping saved.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweep import write_tables


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="splitfed_v2")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", default="docs/results/tuning-time.md")
    args = ap.parse_args()

    import ray

    import raysfl
    from raysfl.paper_tables import HALF_DECADES, Metric
    from raysfl.resolve import validate
    from raysfl.tuning.rules import tuning_seeds
    from raysfl.runtime.many_runs import start_local_ray
    from raysfl.tuning.search import row_grid, tune_rows

    base = validate(raysfl.config_from_kwargs(algo=args.algo, dataset="digits", rounds=args.rounds, validation=0.2,
                                              progress=False, checkpoint_every=0, out="/tmp/raysfl-tuning-time"))
    configs = [dataclasses.replace(base, seed=s) for s in tuning_seeds(args.seeds)]
    grid = row_grid(base, {"lr": tuple(float(f"{base.lr * f:.3g}") for f in HALF_DECADES)})
    metric = Metric("mean_last", k=5)
    start_local_ray(configs, args.seeds)

    t0 = time.perf_counter()  # (b) the full grid, every run to the end, two at a time
    jobs = [dataclasses.replace(c, lr=lr) for lr in grid["lr"] for c in configs]
    with ThreadPoolExecutor(args.seeds) as pool:
        full = list(pool.map(lambda c: raysfl.run(c).metrics, jobs))
    full_s = time.perf_counter() - t0
    full_rounds = sum(len(m) for m in full)

    t0 = time.perf_counter()  # (a) the search
    res = tune_rows({"row": configs}, {"row": grid}, {"row": metric}, say=lambda _: None)["row"]
    tune_s = time.perf_counter() - t0
    tune_rounds = sum(t["rounds"] for t in res.table) * args.seeds
    ray.shutdown()

    rows = [{"algo": args.algo, "rounds": args.rounds, "seeds": args.seeds, "settings": len(jobs) // args.seeds,
             "trials": res.trials, "tuned_s": tune_s, "tuned_rounds": tune_rounds, "full_s": full_s,
             "full_rounds": full_rounds, "ratio": tune_s / full_s, "chosen_lr": res.chosen["lr"]}]
    r = rows[0]
    lines = ["| search | settings x seeds | trials | rounds run | wall time | s per round run |",
             "|---|---:|---:|---:|---:|---:|",
             f"| Ray Tune, successive halving (`raysfl.tuning`) | {r['settings']} x {args.seeds} | {r['trials']} | "
             f"{tune_rounds} | {tune_s:.0f} s | {tune_s / tune_rounds:.2f} |",
             f"| every setting to the end (`raysfl.run`, {args.seeds} at a time) | {r['settings']} x {args.seeds} | — | "
             f"{full_rounds} | {full_s:.0f} s | {full_s / full_rounds:.2f} |",
             "", f"The search took {r['ratio']:.2f}x the full grid's time and ran {tune_rounds / full_rounds:.0%} of "
                 f"its rounds; it chose lr {r['chosen_lr']:g}."]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "What tuning costs", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
