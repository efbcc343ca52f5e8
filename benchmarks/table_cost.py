"""What a paper's table costs on mnist5k against digits: the seconds per round of each row,
measured on both data sets in one process, and their ratio.

    .venv/bin/python benchmarks/table_cost.py [--tables gapsl:main,fed_pairing:accuracy_noniid,...] [--rounds 4]

Each row of each table, at the small scale and seed 0, runs ``--rounds`` rounds on digits and
on mnist5k (the table's shared settings; raysfl's warm federation reuses the actors of a
shape), and the median seconds per round after the first is taken from ``metrics.parquet``'s
``wall_time_s``. A table's ratio (the mean over its rows of mnist5k's seconds per round over
digits') scales a table's measured time on digits -- tuning and runs alike, since both are
rounds of the same rows -- to what it costs on mnist5k (docs/performance.md, section 8).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from sweep import write_tables

MAIN = "gapsl:main,fed_pairing:accuracy_noniid,besplit:main,flex_sfl:main,super_sfl:compare"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", default=MAIN)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out", default="docs/results/table-cost.md")
    args = ap.parse_args()

    import raysfl
    from raysfl.reproduce import tables_of
    from raysfl.reproduce.fairness import resolve

    rows = []
    for item in args.tables.split(","):
        paper, name = item.split(":")
        table = next(t for t in tables_of(paper) if t.name == name)
        for row in table.all_rows:
            per = {}
            for dataset in ("digits", "mnist5k"):
                cfg = resolve(table, row, "small", 0, {"rounds": args.rounds, "dataset": dataset})
                cfg = dataclasses.replace(cfg, progress=False, checkpoint_every=0, out="/tmp/raysfl-table-cost")
                metrics = raysfl.run(cfg).metrics
                per[dataset] = statistics.median(r["wall_time_s"] for r in metrics[1:])
            rows.append({"paper": paper, "table": name, "row": row.label, "digits_s_per_round": per["digits"],
                         "mnist5k_s_per_round": per["mnist5k"], "ratio": per["mnist5k"] / per["digits"]})
            print(rows[-1], flush=True)
    lines = ["| table | rows | s per round, digits (mean over rows) | s per round, mnist5k | mnist5k / digits |",
             "|---|---:|---:|---:|---:|"]
    for item in args.tables.split(","):
        paper, name = item.split(":")
        mine = [r for r in rows if (r["paper"], r["table"]) == (paper, name)]
        lines.append(f"| {paper} {name} | {len(mine)} | {statistics.mean(r['digits_s_per_round'] for r in mine):.2f} | "
                     f"{statistics.mean(r['mnist5k_s_per_round'] for r in mine):.2f} | "
                     f"{statistics.mean(r['ratio'] for r in mine):.1f}x |")
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "What a table costs on mnist5k", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
