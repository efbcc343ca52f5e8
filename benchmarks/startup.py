"""Start-up, as a user meets it: commands that should answer at once, the demo's first round,
and the second run of a process (a warm federation).

    .venv/bin/python benchmarks/startup.py [--repeats 3]

Measured, each as whole processes started exactly as a user types them (median of
``--repeats``):

1. **Instant commands**: ``raysfl --help``, ``raysfl run --help``, ``raysfl list`` and an
   argument error (``raysfl run --rounds -1``): seconds from start to exit (target: under 1 s).
2. **Fast start**: ``python examples/flex_sfl.py --rounds 1`` (the demo, on the embedded
   digits): seconds from the command to the line that says the run has started (Ray up,
   actors set up, the initial model in place: round 1 begins) and to round 1's progress line
   (target: the first round within 8 s), with the run's own ``startup.json`` stages (set-up,
   Ray, actors, warm-up; set-up overlaps Ray and the actors); and the same with
   ``--co-host off`` (a process per server and fed server), taken in turn with it.
3. **A warm federation**: one Python process calls ``raysfl.run`` twice with the same settings
   (``splitfed_v2``, 10 clients, 2 rounds): the second run's start-up stages from its
   ``startup.json`` (target: at most 1 s of set-up), Ray and its actors kept from the first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sweep import ROOT, write_tables

COMMANDS = {
    "raysfl --help": ["--help"],
    "raysfl run --help": ["run", "--help"],
    "raysfl list": ["list"],
    "raysfl run --rounds -1 (an argument error)": ["run", "--rounds", "-1"],
}
STAGES = ("setup", "ray", "actors", "warm_up", "total")

WARM = r"""
import json, sys, time
import raysfl
out = sys.argv[1]
times = []
for i in range(2):
    t = time.perf_counter()
    res = raysfl.run(raysfl.config_from_kwargs(algo="splitfed_v2", rounds=2, out=out, name=f"warm-{i}",
                                               progress=False, checkpoint_every=0))
    times.append(time.perf_counter() - t)
    print(json.dumps({"run": i, "seconds": times[-1], **json.loads((res.run_dir / "startup.json").read_text())}),
          flush=True)
"""


def user_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def command_seconds(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "raysfl", *args], env=user_env(), cwd=str(ROOT), capture_output=True,
                   timeout=120)
    return time.perf_counter() - t0


def demo(out: Path, name: str, extra: tuple[str, ...] = ()) -> dict:
    """The demo as a process: seconds to 'started' and to round 1's line, and its startup.json."""
    cmd = [sys.executable, "examples/flex_sfl.py", "--rounds", "1", "--out", str(out), "--name", name,
           "--checkpoint-every", "0", *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=user_env(), cwd=str(ROOT), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    started = first = None
    for line in proc.stderr:
        now = time.perf_counter() - t0
        if started is None and "rounds 1..1 to go" in line:
            started = now
        if first is None and line.lstrip("\r").startswith("round    1/"):
            first = now
    proc.wait(timeout=600)
    stages = json.loads((out / name / "startup.json").read_text())
    return {"to_start_s": started, "to_round1_s": first, "exit_s": time.perf_counter() - t0,
            **{f"stage_{k}": stages.get(k) for k in STAGES}}


def warm(out: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", WARM, str(out)], env=user_env(), cwd=str(ROOT), capture_output=True,
                          text=True, timeout=900, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs/results/startup.md"))
    args = ap.parse_args()

    rows = []
    for name, argv in COMMANDS.items():
        secs = [command_seconds(argv) for _ in range(args.repeats)]
        rows.append({"measure": name, "seconds": statistics.median(secs), "target_s": 1.0})
        print(f"{name:<45} {rows[-1]['seconds']:.2f} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="raysfl-startup-") as tmp:
        demos, apart = [], []  # apart: a process per server and fed server (--co-host off), taken in turn
        for i in range(args.repeats):
            demos.append(demo(Path(tmp), f"demo-{i}"))
            apart.append(demo(Path(tmp), f"demo-apart-{i}", ("--co-host", "off")))
        for d in demos + apart:
            print(f"demo: started {d['to_start_s']:.1f} s, round 1 done {d['to_round1_s']:.1f} s, stages "
                  f"{ {k: d[f'stage_{k}'] for k in STAGES} }", flush=True)
        warms = [r for _ in range(args.repeats) for r in warm(Path(tmp) / f"warm-{_}")]
    med = lambda key, xs: statistics.median(x[key] for x in xs)  # noqa: E731
    rows.append({"measure": "demo: command to the start of round 1", "seconds": med("to_start_s", demos),
                 "target_s": 8.0})
    rows.append({"measure": "demo: command to the end of round 1", "seconds": med("to_round1_s", demos),
                 "target_s": None})
    rows.append({"measure": "demo with --co-host off (a process per server): command to the start of round 1",
                 "seconds": med("to_start_s", apart), "target_s": None})
    second = [w for w in warms if w["run"] == 1]
    first = [w for w in warms if w["run"] == 0]
    rows.append({"measure": "raysfl.run, second run of a process: start-up (startup.json total)",
                 "seconds": med("total", second), "target_s": 1.0})
    rows.append({"measure": "raysfl.run, first run of that process: start-up", "seconds": med("total", first),
                 "target_s": None})
    lines = ["| measure | median (s) | target | met |", "|---|---:|---:|---|"]
    for r in rows:
        target = "—" if r["target_s"] is None else f"< {r['target_s']:g} s"
        met = "—" if r["target_s"] is None else ("yes" if r["seconds"] <= r["target_s"] else "no")
        lines.append(f"| {r['measure']} | {r['seconds']:.2f} | {target} | {met} |")
    lines += ["", f"The demo's start-up stages (median seconds of {args.repeats}; set-up runs beside Ray and the "
                  "actors' start):", "", "| " + " | ".join(STAGES) + " |", "|" + "---:|" * len(STAGES),
              "| " + " | ".join(f"{med('stage_' + k, demos):.2f}" for k in STAGES) + " |", "",
              "The second run of a process (warm: Ray and the actors kept):", "",
              "| " + " | ".join(STAGES) + " |", "|" + "---:|" * len(STAGES),
              "| " + " | ".join(f"{med(k, second):.2f}" for k in STAGES) + " |"]
    intro = __doc__.split("\n\n", 2)[2].strip()
    write_tables(rows, args.out, "Start-up: commands, the demo's first round, a warm second run", intro,
                 "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
