"""Where the driver's time goes in a steady round: the round's calls, then what it does between
two rounds (aggregation, snapshot, the row), timed in the driver itself.

    .venv/bin/python benchmarks/driver_phases.py [--algo psl] [--clients 10] [--rounds 14]
        [--eval off] [--checkpoint-every 0] [--resource update_sums=off ...]

One run with the settings of ``benchmarks/overhead.py`` (digits, the CNN at cut 2, IID, batch
32, one local epoch, seed 0, every client every round); the driver's phases are wrapped with
timers for the run (nothing else changes), and each is reported as the median over rounds
3..R-1. The phases nest: ``Federation.submit_round`` and ``Federation.collect_round`` (the
round's calls, submitted, then waited for) and ``Federation.aggregate`` (the fed server's
aggregation call, submission and answer) sit inside ``rounds.run_round``; what
``rounds.run_round`` holds beyond the phases listed is planning and bookkeeping. With
``--run-ahead on`` (the default) a round's submission sits inside the round before's
aggregation. Round time is the run's ``wall_time_s`` (the same median).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

import sweep  # noqa: F401  (puts the checkout on sys.path)
from overhead import COMMON
from sweep import machine, run

# (module, object, attribute): the driver's phases of a round, in the order they run
PHASES = [
    ("raysfl.runtime.rounds", None, "run_round"),
    ("raysfl.runtime.round_plan", None, "plan_round"),
    ("raysfl.runtime.federation", "Federation", "submit_round"),
    ("raysfl.runtime.federation", "Federation", "collect_round"),
    ("raysfl.runtime.federation", None, "ping_all"),
    ("raysfl.runtime.federation", "Federation", "aggregate"),
    ("raysfl.runtime.federation", "Federation", "snapshot_at"),
    ("raysfl.runtime.federation", "Federation", "confirm_snapshot"),
    ("raysfl.runtime.rounds", None, "finish_row"),
    ("raysfl.runtime.rounds", None, "checkpoint_and_call_back"),
]


def add_resource_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--resource", action="append", default=[], metavar="KEY=VALUE",
                    help="a resources setting for the run (e.g. update_sums=off); repeatable")


def resource_settings(ap: argparse.ArgumentParser, given: list[str]) -> dict:
    """``--resource KEY=VALUE`` flags as a resources dict; ``ap.error`` for one without ``=``."""
    resources = dict(kv.split("=", 1) for kv in given if "=" in kv)
    if len(resources) != len(given):
        ap.error(f"--resource takes KEY=VALUE, got {given}")
    return resources


def phase_label(module: str, owner: str | None, name: str) -> str:
    """A phase's name in the tables: ``Federation.collect_round``, ``rounds.finish_row``."""
    return f"{owner or module.rsplit('.', 1)[1]}.{name}"


def wrap_phases(record) -> None:
    """Wrap the driver's :data:`PHASES` for this process's runs: ``record(label, start, end)``
    (``time.time()``, so that they compare with other processes' clocks) after each call."""
    import importlib

    def timed(label: str, fn):
        def wrapper(*args, **kw):
            t = time.time()
            try:
                return fn(*args, **kw)
            finally:
                record(label, t, time.time())
        return wrapper

    for module, owner, name in PHASES:
        target = importlib.import_module(module)
        target = getattr(target, owner) if owner else target
        setattr(target, name, timed(phase_label(module, owner, name), getattr(target, name)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="psl")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--eval", choices=["off", "default"], default="off")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="0: none, as benchmarks/overhead.py runs")
    add_resource_flag(ap)
    args = ap.parse_args()
    resources = resource_settings(ap, args.resource)
    if args.rounds < 5:
        ap.error(f"--rounds must be >= 5, got {args.rounds}")
    times: dict[str, list[float]] = collections.defaultdict(list)
    wrap_phases(lambda label, t0, t1: times[label].append(t1 - t0))
    rows = run(algo=args.algo, clients=args.clients, rounds=args.rounds, model="cnn", cut=2,
               eval_every=1 if args.eval == "default" else 10**6, checkpoint_every=args.checkpoint_every, **COMMON,
               **({"resources": resources} if resources else {}))
    wall = statistics.median(r["wall_time_s"] for r in rows[2:-1]) * 1000
    print(f"\nMachine: {machine()}\n{args.algo}, {args.clients} clients, evaluation {args.eval}"
          f"{''.join(f', {k} {v}' for k, v in resources.items())}: "
          f"round (wall_time_s) {wall:.1f} ms\n")
    print("| phase | ms per round (median) |\n|---|---:|")
    for module, owner, name in PHASES:
        label = phase_label(module, owner, name)
        got = times[label]
        per_round = len(got) / len(rows)  # calls a round (ping_all: once a round here)
        mid = got[2:-1] if len(got) > 4 else got
        if mid:
            print(f"| {label}{'' if per_round < 1.5 else f' (x{per_round:.0f})'} | {statistics.median(mid) * 1000:.2f} |")


if __name__ == "__main__":
    main()
