"""The floor under a cold start: a local Ray's start and bare actors that only import torch and
raysfl, with no run at all.

    .venv/bin/python benchmarks/process_floor.py [--repeats 3]

Each measurement is a fresh Python process that starts a local Ray (5 CPUs, no dashboard, as
the demo's) and N actors whose constructor imports torch and raysfl's actor modules, then
waits until all answer. Variants, taken in turn so that the machine's drift hits them alike:
3 and 6 actors (the demo's processes with and without ``--co-host``); ``PYTHONPATH`` given to
the workers through a ``runtime_env`` (what raysfl did before) or through the environment
they inherit (what it does now); and Ray's dashboard agent in its full mode (what a Ray with
the ``ray[default]`` extras starts, raysfl's case) or its minimal one, forced here by patching
a private Ray function -- an experiment, not something raysfl does (docs/performance.md,
section 6).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from startup import user_env
from sweep import ROOT, write_tables

PROBE = r"""
import json, os, sys, time
actors, env, agent = int(sys.argv[1]), sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
import ray
if agent == "minimal":  # what a Ray without the dashboard's extras starts (private function)
    import ray._private.utils as u
    u.get_dashboard_dependency_error = lambda: ImportError("minimal agent asked for")
kw = {"runtime_env": {"env_vars": {"PYTHONPATH": sys.argv[4]}}} if env == "runtime_env" else {}
ray.init(address="local", num_cpus=5, include_dashboard=False, configure_logging=False, log_to_driver=False, **kw)
t1 = time.perf_counter()

@ray.remote(num_cpus=0.01)
class Bare:
    def __init__(self):
        import torch  # noqa: F401
        import raysfl.runtime.client_actor, raysfl.runtime.fed_actor, raysfl.runtime.server_actor  # noqa: F401

    def ping(self):
        return 1

xs = [Bare.remote() for _ in range(actors)]
ray.get([x.ping.remote() for x in xs])
t2 = time.perf_counter()
print(json.dumps({"ray_s": t1 - t0, "actors_s": t2 - t1, "total_s": t2 - t0}))
ray.shutdown()
"""

VARIANTS = [  # (actors, how PYTHONPATH reaches the workers, dashboard agent)
    (6, "runtime_env", "full"),
    (6, "inherited", "full"),
    (3, "inherited", "full"),
    (3, "inherited", "minimal"),
]


def probe(actors: int, env: str, agent: str) -> dict:
    run_env = user_env()  # the checkout on PYTHONPATH, as benchmarks/startup.py runs the demo
    if env == "runtime_env":
        run_env.pop("PYTHONPATH")
    out = subprocess.run([sys.executable, "-c", PROBE, str(actors), env, agent, str(ROOT)], env=run_env,
                         cwd="/", capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="docs/results/process_floor.md")
    args = ap.parse_args()

    raw = {v: [] for v in VARIANTS}
    for i in range(args.repeats):
        for v in VARIANTS:
            raw[v].append(probe(*v))
            print(f"run {i}: {v} {raw[v][-1]}", flush=True)
    rows = []
    for (actors, env, agent), got in raw.items():
        rows.append({"actors": actors, "pythonpath": env, "agent": agent,
                     **{k: statistics.median(g[k] for g in got) for k in ("ray_s", "actors_s", "total_s")},
                     "total_range": f"{min(g['total_s'] for g in got):.2f}-{max(g['total_s'] for g in got):.2f}"})
    lines = ["| bare actors | PYTHONPATH to the workers | dashboard agent | Ray start (s) | actors (s) | total (s) | "
             "range |", "|---:|---|---|---:|---:|---:|---|"]
    lines += [f"| {r['actors']} | {r['pythonpath']} | {r['agent']} | {r['ray_s']:.2f} | {r['actors_s']:.2f} | "
              f"{r['total_s']:.2f} | {r['total_range']} |" for r in rows]
    lines += ["", f"Medians of {args.repeats} runs of each, taken in turn."]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "The floor under a cold start: Ray and bare actor processes", intro,
                 "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
