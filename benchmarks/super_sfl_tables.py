"""SuperSFL's Table III (server-gradient availability) and Fig. 6 (TPGF ablation), offline.

    .venv/bin/python benchmarks/super_sfl_tables.py availability [--levels 1 0.7 0.5 0.2 0.1 0] [--seeds 0 1 2]
    .venv/bin/python benchmarks/super_sfl_tables.py ablation [--modes full no_loss no_depth equal] [--seeds 0 1 2]

Both use the settings of examples/super_sfl.py for the data set (digits: the 4-block CNN,
10 clients, lr 0.05, 20 rounds, Dirichlet alpha = 0.5, client depths from eq. 1 on devices
with 0.5-4 GB of memory and 20-200 ms latency).
``availability``: the server answers in that fraction of rounds (drawn from the seed); in the
other rounds every client trains on its local classifier alone (Alg. 3). ``ablation``: the
client weight of eq. 3 with both factors, without the loss term, without the depth term,
and fixed at 0.5. Reported per setting: the super-network's final test accuracy (all L
blocks) and the clients' own-path accuracy (encoder prefix + local classifier), mean and
standard deviation over seeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweep import evaluated, mean_std, run, start_ray, write_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from super_sfl import PRESETS  # noqa: E402

# The paper's numbers (CIFAR-10, ViT-16): Table III and Fig. 6.
PAPER_AVAILABILITY = {1.0: "95.58 ± 1.08", 0.7: "93.81 ± 2.59", 0.5: "93.12 ± 2.11", 0.2: "91.03 ± 1.17",
                      0.1: "89.77 ± 2.22", 0.0: "86.36 ± 3.25"}
PAPER_ABLATION = {"full": "96.93", "no_loss": "91.47", "no_depth": "88.66", "equal": "—"}


def _settings(dataset: str, data_root: str | None, rounds: int | None) -> dict:
    p = dict(PRESETS[dataset])
    p.pop("target", None)
    if "memory_gb" in p:
        p["devices"] = {"memory_gb": p.pop("memory_gb")}
    if rounds:
        p["rounds"] = rounds
    return dict(algo="super_sfl", dataset=dataset, data_root=data_root, **p)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["availability", "ablation"])
    ap.add_argument("--levels", type=float, nargs="+", default=[1.0, 0.7, 0.5, 0.2, 0.1, 0.0])
    ap.add_argument("--modes", nargs="+", default=["full", "no_loss", "no_depth", "equal"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None, help="default: the example's preset")
    ap.add_argument("--dataset", default="digits", choices=sorted(PRESETS))
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default=None, help="default: docs/results/super-sfl-<experiment>.md")
    args = ap.parse_args()

    common = _settings(args.dataset, args.data_root, args.rounds)
    key = "availability" if args.experiment == "availability" else "fusion"
    values = args.levels if args.experiment == "availability" else args.modes
    start_ray(args.num_cpus)
    rows = []
    for v in values:
        for seed in args.seeds:
            params = {"server_availability": v} if key == "availability" else {"fusion": v}
            metrics = evaluated(run(**common, seed=seed, super_sfl=params))
            last = metrics[-1]
            rows.append({key: v, "seed": seed, "final_accuracy": last["test_accuracy"],
                         "local_accuracy": last["acc_local"],
                         "server_rounds": sum(int(r["server_available"]) for r in metrics),
                         "fallback_steps": sum(r["fallback_steps"] for r in metrics)})
            print(f"{key}={v} seed={seed}: super-network {last['test_accuracy']:.4f}, "
                  f"own path {last['acc_local']:.4f}", flush=True)

    paper = PAPER_AVAILABILITY if key == "availability" else PAPER_ABLATION
    head = ("| server availability | server rounds | super-network accuracy (%) | own-path accuracy (%) "
            "| paper, CIFAR-10 ViT (%) |")
    lines = [head, "|---:|---:|---:|---:|---:|"]
    for v in values:
        rs = [r for r in rows if r[key] == v]
        label = f"{100 * v:.0f} %" if key == "availability" else v
        lines.append(f"| {label} | {rs[0]['server_rounds']} / {common['rounds']} | "
                     f"{mean_std([r['final_accuracy'] for r in rs], '.2f', 100)} | "
                     f"{mean_std([r['local_accuracy'] for r in rs], '.2f', 100)} | {paper.get(v, '—')} |")
    if key == "fusion":
        lines[0] = "| TPGF client weight |" + lines[0].split("|", 2)[2]
    title = ("SuperSFL: server-gradient availability (Table III)" if key == "availability"
             else "SuperSFL: TPGF ablation (Fig. 6)")
    intro = (f"{args.dataset}, {common['rounds']} rounds, {common['clients']} clients, seeds {args.seeds}; "
             f"mean ± standard deviation over the seeds. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    out = args.out or f"docs/results/super-sfl-{args.experiment}.md"
    write_tables(rows, out, title, intro, "\n".join(lines))


if __name__ == "__main__":
    main()
