"""What a constant prediction scores on the clients' own test splits, for the published tables
that read such an accuracy, and the rows those floors would call at chance.

    .venv/bin/python scripts/local_chance_floor.py [--results docs/results/reproduce]

Since 2026-12-07 the guards of ``raysfl reproduce`` read an accuracy on the clients' own test
splits against its floor (:func:`raysfl.reproduce.guards.chance`): what a constant prediction
scores there -- each client's commonest class for models of each client's own (BESplit-A's
auxiliary models, ``acc_aux_local``), the one class best for all for a shared model (BESplit-G
and its baselines, ``test_accuracy_local``). Both depend on the data and the partition alone,
so they are computed here from each table's reference config per seed
(:func:`raysfl.runtime.experiment.local_chance`), without a run. Each row's per-seed value (its
``table.parquet``: the mean of the last evaluated rounds, where the guard reads the last one) is
then set against the at-chance line, its floor plus (1.5 - 1) / classes. A row falling from
what it had learnt is read on its run's history, which the published tables do not keep; that
is for a table made again.
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
    from raysfl.reproduce.engine import LOCAL_FLOORS
    from raysfl.reproduce.fairness import resolve
    from raysfl.reproduce.guards import CHANCE_FACTOR
    from raysfl.runtime.experiment import _load_data, local_chance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="docs/results/reproduce", help="the published tables' folder")
    ns = ap.parse_args(argv)
    data = {}
    for path in sorted(Path(ns.results).glob("*/*/table.parquet")):
        t = pq.read_table(path).to_pandas()
        paper, folder = path.parts[-3], path.parts[-2]
        name, _, dataset = folder.partition("-")
        table = next(tb for tb in tables_of(paper) if tb.name == name)
        scale = t["scale"].iloc[0]
        columns = {r.label: table.at_scale(scale).metric_of(r).column for r in table.all_rows}
        if not any(c in LOCAL_FLOORS for c in columns.values()):
            continue
        overrides = {"dataset": dataset} if dataset else {}
        floors = {}  # (seed, own models) -> floor
        for seed in sorted(set(t["seed"])):
            cfg = resolve(table.at_scale(scale), table.reference, scale, int(seed), overrides)
            if cfg.dataset not in data:
                data[cfg.dataset] = _load_data(cfg)
            for own in (False, True):
                floors[(int(seed), own)] = local_chance(cfg, data[cfg.dataset], own_models=own)
        classes = data[cfg.dataset].num_classes
        seeds = sorted({s for s, _ in floors})
        print(f"{paper}/{folder} ({len(seeds)} seeds): one class for all "
              + ", ".join(f"{floors[(s, False)]:.3f}" for s in seeds) + "; each client's commonest "
              + ", ".join(f"{floors[(s, True)]:.3f}" for s in seeds) + f"; at chance at or below + "
              f"{CHANCE_FACTOR - 1:g} / {classes}")
        margins, low = [], []
        for r in t.itertuples():
            column = columns.get(r.row)
            if column not in LOCAL_FLOORS or not math.isfinite(r.value):
                continue
            line = floors[(int(r.seed), LOCAL_FLOORS[column][1])] + (CHANCE_FACTOR - 1.0) / classes
            margins.append(r.value - line)
            if r.value <= line:
                low.append(f"    {r.row} ({column}), seed {int(r.seed)}: {r.value:.3f} <= {line:.3f}")
        print("\n".join(low) if low else f"    every row above its line on every seed (lowest margin "
                                         f"{min(margins):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
