"""How decided each cached tuning's choice is: the chosen setting against the runner-up among
the settings its search ran to the end, per tuning seed.

`raysfl reproduce` tunes every row on two tuning seeds (docs/results.md) and keeps each row's
search in its cache as ``tune-<row key>.json``. A choice that does not beat the runner-up on
every tuning seed is a near-tie: another pair of tuning seeds could choose the other setting, and
where the two sit on either side of a stability edge, a table's verdict can follow the draw
(docs/besplit.md, "What changed the verdicts"). This script lists, for every cached tuning,
the choice, the runner-up, their score gap and each seed's own difference, and counts the
choices that the seeds disagree on. Settings successive halving stopped early are not
compared (their scores are from an earlier round); a search with one setting run to the end
has no runner-up here.

    .venv/bin/python scripts/tuning_margins.py [--cache docs/results/reproduce/cache]

Ours: a reading aid for the question of how many tuning seeds a verdict needs; it changes
nothing that runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def margin(tuning: dict) -> dict | None:
    """The chosen setting against the best other setting run to the end, or None where the
    search ran no other to the end. The metric's direction is read from the choice (it is the
    best of the settings run to the end)."""
    ended = [t for t in tuning["table"]
             if t.get("complete") and not t.get("error") and t["score"] == t["score"]]
    chosen = [t for t in ended if t["knobs"] == tuning["chosen"]]
    others = [t for t in ended if t["knobs"] != tuning["chosen"]]
    if not chosen or not others:
        return None
    best = chosen[0]
    sign = 1.0 if best["score"] >= max(t["score"] for t in others) else -1.0
    runner = max(others, key=lambda t: sign * t["score"])
    per_seed = [sign * (a - b) for a, b in zip(best["values"], runner["values"])]
    return {"row": tuning["row"], "chosen": tuning["chosen"], "runner_up": runner["knobs"],
            "gap": sign * (best["score"] - runner["score"]), "per_seed": per_seed,
            "seeds_disagree": min(per_seed) <= 0.0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default="docs/results/reproduce/cache", help="a raysfl reproduce cache")
    ns = ap.parse_args(argv)
    paths = sorted(Path(ns.cache).glob("tune-*.json"))
    if not paths:
        print(f"no tune-*.json in {ns.cache}: not a raysfl reproduce cache, or it holds no tuning", file=sys.stderr)
        return 2
    compared = disagree = 0
    print("| row | chosen | runner-up | gap | per tuning seed |")
    print("|---|---|---|---:|---|")
    for path in paths:
        m = margin(json.loads(path.read_text()))
        if m is None:
            continue
        compared += 1
        disagree += m["seeds_disagree"]
        knobs = lambda k: ", ".join(f"{n} {v:g}" for n, v in k.items())  # noqa: E731
        flag = " (the seeds disagree)" if m["seeds_disagree"] else ""
        print(f"| {m['row']} | {knobs(m['chosen'])} | {knobs(m['runner_up'])} | {m['gap']:.4g} | "
              f"{', '.join(f'{d:+.4g}' for d in m['per_seed'])}{flag} |")
    print(f"\n{len(paths)} tunings in {ns.cache}; {compared} with a runner-up run to the end; "
          f"in {disagree} of those the tuning seeds disagree on the choice.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
