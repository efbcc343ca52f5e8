"""A steady round taken apart: each actor call's own work against its waiting, and the driver's
phases between two rounds.

    .venv/bin/python benchmarks/round_anatomy.py [--algo splitfed_v2] [--clients 10] [--rounds 14]
        [--eval off|default] [--resource KEY=VALUE ...] [--out docs/results/round_anatomy.md]

One run with the settings of ``benchmarks/overhead.py`` (digits, the CNN at cut 2, IID, batch
32, one local epoch, seed 0, every client every round). Ray is started here with a worker set-up
hook that wraps, in every actor process, the client actors' ``begin_round`` / ``step`` /
``end_round``, the servers' ``step`` / ``step_part`` and the fed server's ``dispatch`` /
``aggregate`` / ``evaluate``, and inside them the fetching of the other actors' results
(``refs.fetch`` and ``refs.gather``): each call's span splits into the
time it waited for a payload and the rest, its own work (with the thread's CPU time of that
rest). In the driver the phases of ``benchmarks/driver_phases.py`` are timed the same way.
Nothing in raysfl changes; the wrappers add a clock reading and a line written to a file per call.

Reported per round, medians over rounds 3..R-1:

- **head**: from the driver's submission of the round (``Federation.submit_round``) to the first
  client actor's first step call (the fed server's dispatch, the client actors' ``begin_round``;
  with ``--run-ahead on``, the default, the submission goes behind the round before's
  aggregation, so the head runs beside the round before's tail);
- **steps**: from the first step call's start to the last one's end, with per step the client
  actors' own work and their wait for the server's answer, and the server's own work and its
  wait for the smashed data;
- **end of the round**: from the last step call's end until the driver has the round's results
  (the client actors' ``end_round``: the last gradients, the last backward and optimiser step,
  the updates);
- **driver's tail**: from there to the round's end in the driver (the closing ping, the
  aggregation, the snapshot, the metrics row; with ``--run-ahead on`` the next round's planning
  and submission, inside the aggregation);
- **last step to the next round's first**: what lies between two rounds' steps, all of the
  above but the steps;
- the fed server's calls that belong to the round (start after the round before's results are
  in, and before its own are), summed: its dispatch, its aggregation and its
  evaluation (with ``--eval default``: the round before's, where it overlaps this round's
  training, ``--eval-overlap``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import statistics
import tempfile
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from driver_phases import add_resource_flag, resource_settings, wrap_phases
from overhead import COMMON
from sweep import ROOT, machine, run, write_tables

SPANS_ENV = "RAYSFL_ANATOMY_DIR"


def _hook():
    """Run in every Ray worker before it hosts an actor: wrap the calls whose spans are kept."""
    import os
    import threading
    import time

    out = os.environ.get(SPANS_ENV)
    if not out:
        return
    from raysfl.runtime import client_actor, fed_actor, server_actor

    local = threading.local()
    lock = threading.Lock()
    path = os.path.join(out, f"{os.getpid()}.tsv")

    def waited(fn):
        def w(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                local.wait = getattr(local, "wait", 0.0) + time.perf_counter() - t
        return w

    def spanned(name, fn):
        def w(*a, **k):
            local.wait = 0.0
            t0, c0 = time.time(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                t1, c1 = time.time(), time.thread_time()
                with lock, open(path, "a") as f:
                    f.write(f"{name}\t{t0:.6f}\t{t1:.6f}\t{local.wait:.6f}\t{c1 - c0:.6f}\n")
        return w

    client_actor.fetch = waited(client_actor.fetch)
    server_actor.fetch = waited(server_actor.fetch)
    fed_actor.fetch = waited(fed_actor.fetch)
    server_actor.gather = waited(server_actor.gather)
    for cls, names in ((client_actor.ClientActor, ("begin_round", "step", "end_round")),
                       (server_actor.ServerActor, ("step", "step_part")),
                       (fed_actor.FedActor, ("dispatch", "aggregate", "evaluate", "stamped_state"))):
        for n in names:
            setattr(cls, n, spanned(f"{cls.__name__}.{n}", getattr(cls, n)))


def start_ray(spans_dir: str, num_cpus: int) -> None:
    """A local Ray as raysfl starts it (its inline limit, raysfl on the workers' path), plus the hook."""
    import ray

    from raysfl.config import ResourceConfig
    from raysfl.runtime.placement import INLINE_ENV

    os.environ.setdefault(INLINE_ENV, str(ResourceConfig().inline_object_kb * 1024))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    os.environ[SPANS_ENV] = spans_dir
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False, runtime_env={"worker_process_setup_hook": _hook})


def read_spans(spans_dir: str) -> list[tuple]:
    """(name, start, end, waited, cpu) of every wrapped call, all processes, by start."""
    rows = []
    for f in glob.glob(os.path.join(spans_dir, "*.tsv")):
        for line in open(f):
            name, *vals = line.split("\t")
            rows.append((name, *map(float, vals)))
    return sorted(rows, key=lambda r: r[1])


# the driver's phases after Federation.collect_round (benchmarks/driver_phases.py's names)
TAIL = ["Federation.aggregate", "Federation.snapshot_at", "Federation.confirm_snapshot", "rounds.finish_row"]


def anatomy(spans: list[tuple], marks: list[tuple], skip: int = 2) -> dict[str, float]:
    """The parts of the module docstring in ms, medians over the rounds after the first ``skip``
    and before the last. ``spans``: (name, start, end, waited, cpu) of the actors' calls
    (:func:`read_spans`, seconds); ``marks``: (phase, start, end) of the driver's phases. A
    round is a span of ``rounds.run_round``; its calls are those that start after the round
    before's results are in (the end of its ``Federation.collect_round``) and before its own
    are, which holds whether it was submitted in its own turn or behind the round before's
    aggregation (``--run-ahead``)."""
    rounds = sorted((t0, t1) for label, t0, t1 in marks if label == "rounds.run_round")
    submitted = sorted(t0 for label, t0, t1 in marks if label == "Federation.submit_round")
    collected = sorted(t1 for label, t0, t1 in marks if label == "Federation.collect_round")
    step_starts = sorted(s[1] for s in spans if s[0] == "ClientActor.step")
    per: dict[str, list[float]] = collections.defaultdict(list)
    for r0, r1 in rounds[skip:-1]:
        ends_here = [c for c in collected if r0 <= c <= r1]
        if not ends_here:
            continue
        end = ends_here[-1]  # its results in (the last pass: a replay's)
        before = max((c for c in collected if c < r0), default=float("-inf"))
        inside = [s for s in spans if before < s[1] <= end]
        steps = [s for s in inside if s[0] == "ClientActor.step"]
        srv = [s for s in inside if s[0] in ("ServerActor.step", "ServerActor.step_part")]
        ends = [s for s in inside if s[0] == "ClientActor.end_round"]
        subs = [t for t in submitted if before < t <= end]
        later = [t for t in step_starts if t > end]
        if not steps or not ends or not subs:
            continue
        first, last = min(s[1] for s in steps), max(s[2] for s in steps)
        actors = len(ends)
        per["round (driver)"].append(r1 - r0)
        per["head"].append(first - subs[0])
        per["steps"].append(last - first)
        per["end of the round"].append(end - last)
        per["of which the closing ping"].append(sum(t1 - t0 for lab, t0, t1 in marks
                                                    if lab == "federation.ping_all" and last <= t0 <= end))
        per["driver's tail"].append(r1 - end)
        for label in TAIL:  # the driver's phases in its tail
            per[f"of which {label}"].append(sum(t1 - t0 for lab, t0, t1 in marks if lab == label and end <= t0 <= r1))
        if later:
            per["last step to the next round's first"].append(later[0] - last)
        per["step calls per client actor"].append(len(steps) / actors)
        per["client step: own work"].append(statistics.mean(s[2] - s[1] - s[3] for s in steps))
        per["client step: thread CPU of the call"].append(statistics.mean(s[4] for s in steps))
        per["client step: waiting for the server"].append(statistics.mean(s[3] for s in steps))
        if srv:
            per["server step: own work"].append(statistics.mean(s[2] - s[1] - s[3] for s in srv))
            per["server step: waiting for the smashed data"].append(statistics.mean(s[3] for s in srv))
        per["client end_round: own work"].append(statistics.mean(s[2] - s[1] - s[3] for s in ends))
        per["client end_round: waiting"].append(statistics.mean(s[3] for s in ends))
        begins = [s for s in inside if s[0] == "ClientActor.begin_round"]
        if begins:
            per["client begin_round"].append(statistics.mean(s[2] - s[1] for s in begins))
        for name, label in (("FedActor.dispatch", "fed server dispatch"), ("FedActor.aggregate", "fed server aggregate"),
                            ("FedActor.evaluate", "fed server evaluate"), ("FedActor.stamped_state", "fed server snapshot")):
            calls = [s for s in inside if s[0] == name]
            if calls:
                per[f"{label}: own work"].append(sum(s[2] - s[1] - s[3] for s in calls))
                per[f"{label}: waiting"].append(sum(s[3] for s in calls))
                per[f"{label}: thread CPU"].append(sum(s[4] for s in calls))
    return {k: statistics.median(v) * (1 if k == "step calls per client actor" else 1000) for k, v in per.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algo", default="splitfed_v2")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--eval", choices=["off", "default"], default="off")
    ap.add_argument("--out", default=str(ROOT / "docs/results/round_anatomy.md"))
    add_resource_flag(ap)
    args = ap.parse_args()
    resources = resource_settings(ap, args.resource)
    if args.rounds < 5:
        ap.error(f"--rounds must be at least 5 (rounds 3..R-1 are measured), got {args.rounds}")

    marks: list[tuple] = []
    wrap_phases(lambda label, t0, t1: marks.append((label, t0, t1)))

    settings = dict(COMMON, algo=args.algo, clients=args.clients, rounds=args.rounds,
                    **({"resources": resources} if resources else {}))
    if args.eval == "off":
        settings["eval_every"] = args.rounds * 10
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate_run

    try:  # a bad setting: one line now, before Ray starts
        validate_run(raysfl.config_from_kwargs(**settings))
    except ConfigError as e:
        ap.error(str(e))
    with tempfile.TemporaryDirectory(prefix="raysfl-anatomy-") as spans_dir:
        start_ray(spans_dir, os.cpu_count() or 2)
        try:
            rows = run(**settings)
        finally:  # the run's warm actors, then the Ray started here (Ray's own shutdown: its agents go too)
            import ray

            from raysfl.runtime import pool

            pool.clear()
            ray.shutdown()
        spans = read_spans(spans_dir)
    parts = anatomy(spans, marks)
    wall = statistics.median(r["wall_time_s"] for r in rows[2:-1]) * 1000
    per_round = ["round (driver)", "head", "steps", "end of the round", "of which the closing ping", "driver's tail",
                 *(f"of which {t}" for t in TAIL), "last step to the next round's first"]
    per_call = ["client step: own work", "client step: thread CPU of the call", "client step: waiting for the server",
                "server step: own work", "server step: waiting for the smashed data", "client begin_round",
                "client end_round: own work", "client end_round: waiting",
                "fed server dispatch: own work", "fed server aggregate: own work", "fed server aggregate: waiting",
                "fed server aggregate: thread CPU",
                "fed server evaluate: own work", "fed server evaluate: thread CPU", "fed server snapshot: own work"]
    lines = [f"{args.algo}, {args.clients} clients, evaluation {args.eval}"
             f"{''.join(f', {k} {v}' for k, v in resources.items())}: a round's `wall_time_s` {wall:.1f} ms; "
             f"{parts.get('step calls per client actor', 0):.0f} step calls per client actor a round", "",
             "| part of a round | ms (median over rounds) |", "|---|---:|"]
    lines += [f"| {k} | {parts[k]:.1f} |" for k in per_round if k in parts]
    lines += ["", "| a call (mean over a round's calls; the fed server's: their sum) | ms (median over rounds) |",
              "|---|---:|"]
    lines += [f"| {k} | {parts[k]:.2f} |" for k in per_call if k in parts]
    table_rows = [{"algo": args.algo, "clients": args.clients, "eval": args.eval, "part": k, "ms": v}
                  for k, v in parts.items()]
    intro = ("One run with the settings of benchmarks/overhead.py; every client actor's and server's round calls "
             "timed inside their processes (a worker set-up hook), split into waiting for another actor's "
             "results and the call's own work; the driver's phases timed as benchmarks/driver_phases.py does. "
             "Medians over rounds 3..R-1.")
    write_tables(table_rows, args.out, "A steady round taken apart", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
