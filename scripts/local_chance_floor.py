"""The clients' commonest classes' share on their own test splits, for the published tables that
read a ``*_local`` accuracy, and the rows those floors would call at chance.

    .venv/bin/python scripts/local_chance_floor.py [--results docs/results/reproduce]

Since 2026-12-07 the guards of ``raysfl reproduce`` read a ``*_local`` accuracy against the
run's ``chance_local``: what a constant prediction per client scores on its own test split
(:func:`raysfl.data.constant_accuracy`). It depends on the data and the partition alone, so it
is computed here from each table's reference config per seed
(:func:`raysfl.runtime.experiment.local_chance`), without a run. Each table's per-seed value of
each row (its ``table.parquet``: the mean of the last evaluated rounds, where the guard reads
the last one) is then set against the at-chance line, that floor plus (1.5 - 1) / classes.
A row falling from what it had learnt is read on its run's history, which the published
tables do not keep; that is for a table made again.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    import pyarrow.parquet as pq

    from raysfl.reproduce import tables_of
    from raysfl.reproduce.fairness import resolve
    from raysfl.reproduce.guards import CHANCE_FACTOR
    from raysfl.runtime.experiment import _load_data, local_chance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results/reproduce", help="the published tables' folder")
    ns = ap.parse_args(argv)
    data = {}
    for path in sorted(Path(ns.results).glob("*/*/table.parquet")):
        t = pq.read_table(path).to_pandas()
        if not t["metric"].iloc[0].split(" of ")[0].endswith("_local"):
            continue
        paper, folder = path.parts[-3], path.parts[-2]
        name, _, dataset = folder.partition("-")
        table = next(tb for tb in tables_of(paper) if tb.name == name)
        overrides = {"dataset": dataset} if dataset else {}
        scale = t["scale"].iloc[0]
        floors = {}
        for seed in sorted(set(t["seed"])):
            cfg = resolve(table.at_scale(scale), table.reference, scale, int(seed), overrides)
            ds = data.setdefault(cfg.dataset, _load_data(cfg))
            floors[int(seed)] = local_chance(cfg, ds)
        classes = data[cfg.dataset].num_classes
        line = {s: f + (CHANCE_FACTOR - 1.0) / classes for s, f in floors.items()}
        print(f"{paper}/{folder} ({len(floors)} seeds): chance_local " +
              ", ".join(f"{f:.3f}" for f in floors.values()) + f"; at chance at or below these + {CHANCE_FACTOR - 1:g}"
              f" / {classes}")
        low = [(r.row, int(r.seed), r.value) for r in t.itertuples()
               if math.isfinite(r.value) and r.value <= line[int(r.seed)]]
        for row, seed, value in low:
            print(f"    {row}, seed {seed}: {value:.3f} <= {line[seed]:.3f}")
        if not low:
            print(f"    every row above the line on every seed (lowest margin "
                  f"{min(r.value - line[int(r.seed)] for r in t.itertuples() if math.isfinite(r.value)):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
