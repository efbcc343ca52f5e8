"""Memory against the size of the population: peak RSS of the whole process tree (the driver,
the local Ray it starts and every actor) of a run with many virtual clients of which a few
train each round (issue 44's scale goal: 10,000 clients, 100 a round, within 8 GB).

    .venv/bin/python benchmarks/population.py                                  # 10,000 and 1,000 clients
    .venv/bin/python benchmarks/population.py --clients 10000 --per-round 100 --rounds 5 --algos psl
    .venv/bin/python benchmarks/population.py --clients 10000 --rounds 100 --algos psl  # all but ~37 % trained

Every run is its own process (``raysfl.run`` on synthetic 1x8x8 data, digits-sized CNN,
``--samples-per-client`` training samples per client and a fixed test set of 360 samples, so
evaluation costs the same at every population size), watched from here: every 0.5 s the RSS
of each process of its tree is read from ``/proc`` (Linux) and summed. RSS counts pages a
process has touched, shared ones once per process (Ray's object store and torch's libraries
are counted in every process that maps them), so the sum is an upper bound of what the run
holds; PSS (proportional set size) divides every shared page among the processes that map
it, so its sum is what the tree holds. Also reported: the sum right after the actors are up (before round 1), the growth
per round after it, and the median round time. A population effect shows as growth per round
(a state per client that was trained, such as PSL's client-side models) or as a start that
grows with the population.

Writes docs/results/population.md (+ .csv, .parquet), or where ``--table`` says.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import ROOT, write_tables  # noqa: E402

TEST_SAMPLES = 360  # digits' test set size


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_rss(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of ``pid`` and every process below it, summed (/proc/PID/smaps_rollup).
    RSS counts a shared page in every process that maps it; PSS divides it among them."""
    kinds = by_process(pid).values()
    return sum(k[0] for k in kinds), sum(k[1] for k in kinds)


ACTORS = ("ray::ClientActor", "ray::RoleHost", "ray::ServerActor", "ray::FedActor")


def by_process(pid: int) -> dict[str, tuple[int, int, int]]:
    """{kind: (RSS, PSS, anonymous) in bytes} of ``pid``'s tree, summed per kind of process: the
    run's own process ("driver"), each kind of actor (``ray::ClientActor``, ``ray::RoleHost``, ...)
    and "Ray's own" (the raylet, GCS, agents). Anonymous memory is a process's own heap, not the
    object store's shared pages or the libraries' files."""
    kids, todo, out = _children(), [pid], {}
    while todo:
        p = todo.pop()
        todo += kids.get(p, [])
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_text().split("\0")[0]
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024
                      for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines()[1:]}
        except (OSError, IndexError, ValueError):
            continue
        kind = "driver" if p == pid else cmd.split(".")[0] if cmd.startswith(ACTORS) else "Ray's own"
        was = out.get(kind, (0, 0, 0))
        out[kind] = (was[0] + fields.get("Rss", 0), was[1] + fields.get("Pss", 0), was[2] + fields.get("Anonymous", 0))
    return out


def one_run(ns) -> None:
    """The child: one run; prints one JSON line per round (its wall time) and at the start."""
    import numpy as np

    import raysfl
    from raysfl.callbacks import Callback

    rng = np.random.default_rng(0)
    n = ns.clients * ns.samples_per_client
    x = rng.normal(size=(n + TEST_SAMPLES, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, n + TEST_SAMPLES)

    class Report(Callback):
        def on_round(self, row):
            print(json.dumps({"round": row["round"], "wall": row["wall_time_s"]}), flush=True)

    cfg = raysfl.config_from_kwargs(algo=ns.one, clients=ns.clients, clients_per_round=ns.per_round,
                                    rounds=ns.rounds, local_steps=2, batch_size=4, seed=0,
                                    checkpoint_every=ns.checkpoint_every,
                                    progress=False, out=ns.out)
    raysfl.run(cfg, data=(x[:n], y[:n], x[n:], y[n:]), callbacks=[Report()])


def measure(algo: str, ns, out: str) -> dict:
    cmd = [sys.executable, __file__, "--one", algo, "--clients", str(ns.clients_now), "--per-round",
           str(ns.per_round), "--rounds", str(ns.rounds), "--samples-per-client", str(ns.samples_per_client),
           "--checkpoint-every", str(ns.checkpoint_every), "--out", out]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    peak, peak_pss, at_round, walls, t0, kinds = [0], [0], {}, [], time.time(), {}

    def read_rounds():  # the child's round lines, each noted with the tree's RSS when it came
        for line in proc.stdout:
            if line.startswith("{"):
                r = json.loads(line)
                at_round[r["round"]] = tree_rss(proc.pid)[0]
                walls.append(r["wall"])
                if r["round"] in ns.by_process:
                    kinds[r["round"]] = by_process(proc.pid)

    reader = threading.Thread(target=read_rounds, daemon=True)
    reader.start()
    while proc.poll() is None:
        rss, pss = tree_rss(proc.pid)
        peak[0], peak_pss[0] = max(peak[0], rss), max(peak_pss[0], pss)
        time.sleep(0.5)
    reader.join()
    peak = peak[0]
    if proc.returncode:
        raise SystemExit(f"{algo} with {ns.clients_now} clients failed (exit {proc.returncode}): {' '.join(cmd)}")
    rounds = sorted(at_round)
    growth = ((at_round[rounds[-1]] - at_round[rounds[0]]) / (len(rounds) - 1)) if len(rounds) > 1 else 0.0
    return {"algo": algo, "clients": ns.clients_now, "per_round": ns.per_round, "rounds": ns.rounds,
            "checkpoint_every": ns.checkpoint_every,
            "peak_rss_gb": round(peak / 2**30, 2), "peak_pss_gb": round(peak_pss[0] / 2**30, 2),
            "after_round_1_gb": round(at_round[rounds[0]] / 2**30, 2),
            "growth_per_round_mb": round(growth / 2**20, 1), "median_round_s": round(statistics.median(walls), 2),
            "whole_run_s": round(time.time() - t0, 1), "by_process": kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--clients", type=int, nargs="+", default=[10000, 1000])
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--samples-per-client", type=int, default=5)
    ap.add_argument("--checkpoint-every", type=int, default=1, help="as users run: a checkpoint every round")
    ap.add_argument("--algos", nargs="+", default=["psl", "splitfed_v2"])
    ap.add_argument("--by-process", default="", metavar="R1,R2,...",
                    help="also the memory of each kind of process (the driver, each kind of actor, Ray's own) "
                         "after these rounds (before the last, whose end takes the actors down), to see where the growth goes")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)  # the runs' own directory (a child process's)
    ap.add_argument("--table", default=str(ROOT / "docs" / "results" / "population.md"),
                    help="where the table goes (default: docs/results/population.md)")
    ns = ap.parse_args()
    if ns.one:
        ns.clients = ns.clients[0]
        one_run(ns)
        return
    if ns.rounds < 2:
        ap.error(f"--rounds {ns.rounds}: the growth per round needs at least 2 rounds")
    try:
        ns.by_process = sorted({int(r) for r in ns.by_process.split(",") if r.strip()})
    except ValueError:
        ap.error(f"--by-process takes rounds separated by commas (e.g. 10,100), got {ns.by_process!r}")
    if any(not 1 <= r <= ns.rounds for r in ns.by_process):
        ap.error(f"--by-process rounds must be within 1..--rounds {ns.rounds}, got {ns.by_process}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="raysfl-population-") as tmp:
        for clients in ns.clients:
            for algo in ns.algos:
                ns.clients_now = clients
                rows.append(measure(algo, ns, tmp))
                print(rows[-1], flush=True)
    lines = ["| algorithm | clients | a round | rounds | checkpoint every | peak RSS, whole tree (GB) | peak PSS (GB) | RSS after round 1 "
             "(GB) | RSS growth per round (MB) | median round (s) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['algo']} | {r['clients']:,} | {r['per_round']} | {r['rounds']} | {r['checkpoint_every']} | {r['peak_rss_gb']:.2f} | "
                     f"{r['peak_pss_gb']:.2f} | {r['after_round_1_gb']:.2f} | {r['growth_per_round_mb']:.1f} | {r['median_round_s']:.2f} |")
    if ns.by_process:
        lines += ["", "Memory of each kind of process after the rounds named (GB: RSS / PSS / anonymous):", "",
                  "| algorithm | clients | process | " + " | ".join(f"after round {r}" for r in ns.by_process) + " |",
                  "|---|---:|---|" + "---:|" * len(ns.by_process)]
        for r in rows:
            kinds = sorted({k for at in r["by_process"].values() for k in at})
            for k in kinds + ["whole tree"]:
                cells = []
                for rnd in ns.by_process:
                    at = r["by_process"].get(rnd, {})
                    v = at.get(k) if k != "whole tree" else tuple(sum(x[i] for x in at.values()) for i in range(3))
                    cells.append(" / ".join(f"{b / 2**30:.2f}" for b in v) if v and at else "—")
                lines.append(f"| {r['algo']} | {r['clients']:,} | {k} | " + " | ".join(cells) + " |")
    for r in rows:
        r["by_process"] = json.dumps({str(k): v for k, v in r["by_process"].items()})  # one column in the raw rows
    write_tables(rows, ns.table, "Memory against the size of the population",
                 " ".join(__doc__.split("\n\n")[0].split()), "\n".join(lines))


if __name__ == "__main__":
    main()
