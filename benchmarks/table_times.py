"""What each paper's table cost with tuning, as measured by ``raysfl reproduce`` itself, and
what the same table would cost on mnist5k.

    .venv/bin/python benchmarks/table_times.py [--results docs/results/reproduce] [--cost docs/results/table-cost.csv]

Every table that ``raysfl reproduce`` writes states its own time ("Time on this machine:
..., where run: tuning X s, rounds Y s one after the other", cached parts included). This
script collects those figures from the tables re-run at this version (the ones with a "Made
by:" line), takes a table's time as its tuning plus its runs' rounds two at a time (how the
tables were run: ``--parallel 2`` on 2 cores), and projects a digits table's time to mnist5k
by the table's mnist5k / digits ratio of seconds per round (``benchmarks/table_cost.py``, the
same rows, the same machine): tuning and runs are rounds of the same rows, so both scale by
it. A projection is not a measurement; it says what the next speed issue must buy.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
from pathlib import Path

from sweep import ROOT, write_tables

# "tuning at least N s (...)": part of a search went untimed (raysfl.reproduce.command.first_cost)
TIME = re.compile(r"Time on this machine: .*?where run: tuning (at least )?(\d+) s(?: \([^)]*\))?, "
                  r"rounds (\d+) s one after the other")
RUNS = re.compile(r"\((\d+) of (\d+) run here")
ROUNDS = re.compile(r", (\d+) rounds,")


def table_times(results: Path, parallel: int = 2) -> list[dict]:
    """One row per table re-run at this version: its tuning searches' seconds, its runs' rounds'
    seconds one after the other, and the table's time with ``parallel`` runs at a time."""
    rows = []
    for md in sorted(results.glob("*/*/table.md")):
        text = md.read_text()
        found = TIME.search(text)
        if "Made by:" not in text or not found:
            continue
        part, tuning, rounds_s = found.group(1), int(found.group(2)), int(found.group(3))
        runs = int(RUNS.search(text).group(2))
        rounds = ROUNDS.search(text)
        rows.append({"paper": md.parent.parent.name, "table": md.parent.name,
                     "rounds": int(rounds.group(1)) if rounds else 0, "runs": runs, "tuning_s": tuning,
                     "rounds_s": rounds_s, "table_s": round(tuning + rounds_s / parallel),
                     "tuning_whole": not part})
    return rows


def ratios(cost_csv: Path) -> dict[tuple[str, str], float]:
    """(paper, table) -> mean over the table's rows of mnist5k's seconds per round over digits'."""
    per: dict[tuple[str, str], list[float]] = {}
    with open(cost_csv) as f:
        for r in csv.DictReader(f):
            per.setdefault((r["paper"], r["table"]), []).append(float(r["ratio"]))
    return {k: statistics.mean(v) for k, v in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(ROOT / "docs" / "results" / "reproduce"))
    ap.add_argument("--cost", default=str(ROOT / "docs" / "results" / "table-cost.csv"))
    ap.add_argument("--out", default="docs/results/table-times.md")
    args = ap.parse_args()
    rows = table_times(Path(args.results))
    if not rows:
        raise SystemExit(f"no table with a 'Time on this machine' line under {args.results}; run raysfl reproduce first")
    scale = ratios(Path(args.cost))
    lines = ["| table | rounds | runs | tuning | runs' rounds, one after the other | table, 2 runs at a time | "
             "mnist5k, projected |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = scale.get((r["paper"], r["table"]))
        r["mnist5k_projected_h"] = round(r["table_s"] * ratio / 3600, 1) if ratio else None
        projected = f"{r['mnist5k_projected_h']:.1f} h ({ratio:.1f}x)" if ratio else "—"
        least = "" if r["tuning_whole"] else "at least "  # part of its search went untimed
        lines.append(f"| {r['paper']} {r['table']} | {r['rounds']} | {r['runs']} | {least}{r['tuning_s']} s | "
                     f"{r['rounds_s']} s | {least}{r['table_s'] / 60:.0f} min | {projected} |")
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "What a paper's table costs with tuning", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
