"""GAPSL's Tables I-III and ablations (Sec. V), re-measured on digits and mnist5k, plus the
readings of the paper that raysfl had to choose between.

    .venv/bin/python benchmarks/gapsl_compare.py --tables main readings eta            # digits, ~3 h
    .venv/bin/python benchmarks/gapsl_compare.py --tables table1 --dataset mnist5k --rounds 20

Every run is in GAPSL's paper setting (Sec. IV-4, ``GAPSL.config_defaults``): 10 clients,
Dirichlet alpha = 0.1, SGD with momentum 0.9, lr 0.005 on the clients and 0.01 on the
server, the CNN cut after its first conv layer (cut 1: ~1 % of its parameters on the
clients, as VGG-16's four conv layers are 1.8 % of VGG-16), batch 32, one local epoch. The
baselines of the paper's tables run in the same setting, as ``raysfl compare --algos
gapsl,...`` runs them: SFL (``splitfed_v2``), EPSSL (``epsl``, phi 0.5), vanilla SL (``sl``),
and PSL (``psl``) in two forms -- as it is (the server averages over the group's samples, each
client takes its own epoch of steps) and the *fair* PSL (``psl (fair)``: the server sums the
clients' losses as GAPSL's eq. 8 does and every client takes GAPSL's step count, so the two
differ only by LGI/GDA). Same seeds (0, 1, 2) give every algorithm the same partition and
initial model. Nothing is tuned to the comparison; eta is swept and reported.

Tables (``--tables``): ``main`` (the default setting at cut 1 and cut 2, with the evaluation
columns), ``readings`` (each choice this implementation made against its alternative),
``eta`` (eq. 6's eta), ``local`` (with 20 % local test splits), ``table1`` (IID and non-IID),
``table2`` (10-40 devices), ``table3`` (Dirichlet alpha), ``ablations`` (Sec. V-C). Finished
runs are cached in ``--cache`` (``sweep.run``'s cache, one directory per hash of ``raysfl/``'s
code), so tables that share runs share them and an interrupted sweep resumes.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import json
import math
import statistics
from pathlib import Path

from sweep import ROOT, evaluated, fmt, mean_std, run, start_ray, write_tables

from raysfl.algorithms.gapsl import GAPSL

PAPER = {**GAPSL.config_defaults, "local_epochs": 1.0, "batch_size": 32}
BASELINES = {"SFL (splitfed_v2)": ("splitfed_v2", {}), "EPSSL (epsl)": ("epsl", {}), "vanilla SL (sl)": ("sl", {}),
             "PSL": ("psl", {}), "PSL (fair)": ("psl", {"psl": {"server_reduction": "sum"}, "equal_steps": True})}
GAPSL_RUN = {"GAPSL": ("gapsl", {})}
READINGS = {  # each of GAPSL's defaults against the reading it replaced or the alternative the paper allows
    "GAPSL (defaults)": {},
    "eq. 8: every client its own cut gradient": {"cut_gradients": "own"},
    "eq. 8: mean, not sum": {"gda_reduction": "mean"},
    "eq. 7: second order (double backprop)": {"gda_regularizer": "second_order"},
    "eq. 7: second order, lambda 0.05": {"gda_regularizer": "second_order", "gda_lambda": 0.05},
    "round: each client its own epoch": {"round_steps": "epoch"},
    "eq. 2: no t/T (Algorithm 1)": {"time_scaling": False},
    "all three old readings (own, epoch, cut 2)": {"cut_gradients": "own", "round_steps": "epoch", "cut": 2},
}
ETAS = (0.0, 0.25, 0.5, 1.0, 2.0)
ABLATIONS = {"GAPSL": {}, "Non-LGI": {"lgi": "none"}, "Rand-LGI": {"lgi": "random"}, "Non-GDA": {"gda": "none"},
             "Rand-GDA": {"gda": "random"}, "Non-LGI + Non-GDA": {"lgi": "none", "gda": "none"}}
TABLE_ALGOS = {**GAPSL_RUN, **BASELINES}
CUT2_ALGOS = ["GAPSL", "PSL", "PSL (fair)", "SFL (splitfed_v2)"]  # the old split, for comparison
# only in the main table: PSL's two differences from GAPSL taken one at a time
MAIN_EXTRA = {"PSL (equal steps)": ("psl", {"equal_steps": True}),
              "PSL (sum)": ("psl", {"psl": {"server_reduction": "sum"}})}
DEVICES = (10, 40)         # the paper's 10 and 40 (Table II also has 20 and 30)
ALPHAS = (0.9, 0.5, 0.3)   # the paper's Table III, without 0.7


def code_hash() -> str:
    """Of the package's code (its syntax trees without docstrings; comments are not in them): a
    cached run is reused only by the same code, whatever happened to its documentation."""
    h = hashlib.sha256()
    for p in sorted((ROOT / "raysfl").rglob("*.py")):
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
        h.update(p.relative_to(ROOT).as_posix().encode() + ast.dump(tree).encode())
    return h.hexdigest()[:16]


class Runner:
    """Runs one configuration (through :func:`sweep.run`'s cache, in a directory named after the
    code's hash) and summarises it as a row."""

    def __init__(self, cache: Path, rounds: int, dataset: str):
        self.rounds, self.dataset = rounds, dataset
        self.cache = cache / code_hash()

    @functools.lru_cache(maxsize=None)
    def equal_steps(self, clients: int, partition: str, alpha: float, seed: int, local_test_fraction: float) -> int:
        """GAPSL's step count per round (``EqualSteps.plan_steps``): one epoch of the mean client."""
        from raysfl.data import hold_out, load_dataset
        from raysfl.data import partition as split

        y = load_dataset(self.dataset).y_train
        parts, _ = hold_out(split(y, clients, partition, alpha=alpha, seed=seed), local_test_fraction, seed)
        return max(1, math.ceil(statistics.mean(len(p) for p in parts) / PAPER["batch_size"]))

    def __call__(self, label: str, algo: str, seed: int, **over) -> dict:
        settings = {**PAPER, "dataset": self.dataset, "rounds": self.rounds, **over}
        if settings.pop("equal_steps", False):
            settings["local_steps"] = self.equal_steps(settings["clients"], settings["partition"], settings["alpha"],
                                                        seed, settings.get("local_test_fraction", 0.0))
        params = {k: v for k, v in settings.items() if isinstance(v, dict)}
        summary = summarise(run(cache=self.cache, algo=algo, seed=seed, **settings))
        row = {"variant": label, "algo": algo, "seed": seed, "dataset": self.dataset, "rounds": self.rounds,
               "clients": settings["clients"], "alpha": settings["alpha"], "partition": settings["partition"],
               "cut": settings["cut"], "params": json.dumps(params, sort_keys=True), **summary}
        print(f"{label:<44} seed {seed} {settings['partition']:<9} a={settings['alpha']:<4} n={settings['clients']:<3} "
              f"cut {settings['cut']}  final {row['final_accuracy']:.4f}  last5 {row['last5_accuracy']:.4f}", flush=True)
        return row


def summarise(metrics: list[dict]) -> dict:
    ev = evaluated(metrics)
    last = ev[-1]

    def mean_of(key, rows=metrics):
        vals = [r[key] for r in rows if key in r and r[key] == r[key]]
        return statistics.mean(vals) if vals else None

    return {"final_accuracy": last["test_accuracy"],
            "last5_accuracy": statistics.mean(r["test_accuracy"] for r in ev[-5:]),
            "best_accuracy": max(r["test_accuracy"] for r in ev),
            "avg_client_accuracy": last.get("test_accuracy_avg_client"),
            "label_mix_accuracy": last.get("test_accuracy_label_mix"),
            "own_class_share": last.get("own_class_share"),
            "local_accuracy": last.get("test_accuracy_local"),
            "grad_angle_deg": mean_of("grad_angle_deg"), "gda_kept": mean_of("gda_kept"),
            "lgi_skipped": mean_of("lgi_skipped"), "gda_reg_rel_max": max(
                (r["gda_reg_rel"] for r in metrics if r.get("gda_reg_rel") == r.get("gda_reg_rel")
                 and "gda_reg_rel" in r), default=None),
            "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6,
            "wall_s": sum(r["wall_time_s"] for r in metrics)}


def pct(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
    return mean_std(vals, ".1f", 100) if vals else "—"


def group(rows: list[dict], **match) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def seeds_line(args) -> str:
    return (f"{args.dataset}, {args.rounds} rounds, seeds {args.seeds}; accuracy in % as mean ± standard deviation "
            f"over the seeds (final round; 'last 5' = mean of the last 5 rounds).")


# ---------------------------------------------------------------------------------------------- tables
def table_main(run_one, args) -> tuple[list[dict], str]:
    """The acceptance setting at cut 1 and at the old cut 2, with every evaluation column."""
    algos = {**TABLE_ALGOS, **MAIN_EXTRA}
    at = {1: list(algos), 2: CUT2_ALGOS}
    rows = [run_one(label, algos[label][0], s, cut=cut, **algos[label][1])
            for cut in args.cuts for label in at[cut] for s in args.seeds]
    lines = ["| cut | algorithm | final acc. | last 5 | client models averaged (eval only) | on own label mix | "
             "predictions in own classes | server steps with < 3 clients | total MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for cut in args.cuts:
        for label in at[cut]:
            g = group(rows, cut=cut, variant=label)
            lines.append(f"| {cut} | {label} | {pct(g, 'final_accuracy')} | {pct(g, 'last5_accuracy')} | "
                         f"{pct(g, 'avg_client_accuracy')} | {pct(g, 'label_mix_accuracy')} | {pct(g, 'own_class_share')} | "
                         f"{pct(g, 'lgi_skipped')} | {statistics.mean(r['total_mb'] for r in g):.1f} |")
    gap = [a["final_accuracy"] - b["final_accuracy"] for a, b in zip(group(rows, cut=1, variant="GAPSL"),
                                                                    group(rows, cut=1, variant="PSL"))]
    fair = [a["final_accuracy"] - b["final_accuracy"] for a, b in zip(group(rows, cut=1, variant="GAPSL"),
                                                                     group(rows, cut=1, variant="PSL (fair)"))]
    lines += ["", f"At cut 1, GAPSL minus PSL per seed: {', '.join(f'{100 * d:+.1f}' for d in gap)} points "
                  f"(mean {100 * statistics.mean(gap):+.1f}); minus the fair PSL: "
                  f"{', '.join(f'{100 * d:+.1f}' for d in fair)} (mean {100 * statistics.mean(fair):+.1f})."]
    return rows, "\n".join(lines)


def table_readings(run_one, args):
    rows = [run_one(label, "gapsl", s, **{"gapsl": {k: v for k, v in over.items() if k != "cut"}},
                    **({"cut": over["cut"]} if "cut" in over else {}))
            for label, over in READINGS.items() for s in args.seeds]
    lines = ["| GAPSL variant | final acc. | last 5 | kept by GDA | steps with < 3 clients | largest eq. 7 share of the step |",
             "|---|---:|---:|---:|---:|---:|"]
    for label in READINGS:
        g = group(rows, variant=label)
        reg = [r["gda_reg_rel_max"] for r in g if r["gda_reg_rel_max"] is not None]
        lines.append(f"| {label} | {pct(g, 'final_accuracy')} | {pct(g, 'last5_accuracy')} | {pct(g, 'gda_kept')} | "
                     f"{pct(g, 'lgi_skipped')} | {fmt(max(reg), '.3f') if reg else '—'} |")
    return rows, "\n".join(lines)


def table_eta(run_one, args):
    rows = [run_one(f"eta {eta}", "gapsl", s, gapsl={"gda_eta": eta}) for eta in ETAS for s in args.seeds]
    lines = ["| eta (eq. 6) | final acc. | last 5 | kept by GDA |", "|---:|---:|---:|---:|"]
    for eta in ETAS:
        g = group(rows, variant=f"eta {eta}")
        lines.append(f"| {eta} | {pct(g, 'final_accuracy')} | {pct(g, 'last5_accuracy')} | {pct(g, 'gda_kept')} |")
    return rows, "\n".join(lines)


def table_local(run_one, args):
    algos = {k: TABLE_ALGOS[k] for k in ("GAPSL", "PSL", "PSL (fair)")}
    rows = [run_one(label, algo, s, local_test_fraction=0.2, **over) for label, (algo, over) in algos.items()
            for s in args.seeds]
    lines = ["| algorithm | global test set | each client's local test split | on own label mix |",
             "|---|---:|---:|---:|"]
    for label in algos:
        g = group(rows, variant=label)
        lines.append(f"| {label} | {pct(g, 'final_accuracy')} | {pct(g, 'local_accuracy')} | "
                     f"{pct(g, 'label_mix_accuracy')} |")
    return rows, "\n".join(lines)


def _sweep_table(run_one, args, axis: str, values, settings_of, header: str):
    rows = [run_one(label, algo, s, **settings_of(v), **over) for v in values
            for label, (algo, over) in TABLE_ALGOS.items() for s in args.seeds]
    lines = [f"| {header} | " + " | ".join(TABLE_ALGOS) + " |", "|---|" + "---:|" * len(TABLE_ALGOS)]
    for v in values:
        cells = [pct([r for r in group(rows, variant=label) if r[axis] == settings_of(v)[axis]], "final_accuracy")
                 for label in TABLE_ALGOS]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    return rows, "\n".join(lines)


def table_table1(run_one, args):
    return _sweep_table(run_one, args, "partition", ("non-IID (Dirichlet 0.1)", "IID"),
                        lambda v: {"partition": "iid"} if v == "IID" else {"partition": "dirichlet"}, "setting")


def table_table2(run_one, args):
    return _sweep_table(run_one, args, "clients", DEVICES, lambda v: {"clients": v}, "devices (Dirichlet 0.1)")


def table_table3(run_one, args):
    return _sweep_table(run_one, args, "alpha", ALPHAS, lambda v: {"alpha": v}, "Dirichlet alpha")


def table_ablations(run_one, args):
    rows = [run_one(label, "gapsl", s, gapsl=over) for label, over in ABLATIONS.items() for s in args.seeds]
    lines = ["| variant (Sec. V-C) | final acc. | last 5 | kept by GDA |", "|---|---:|---:|---:|"]
    for label in ABLATIONS:
        g = group(rows, variant=label)
        lines.append(f"| {label} | {pct(g, 'final_accuracy')} | {pct(g, 'last5_accuracy')} | {pct(g, 'gda_kept')} |")
    return rows, "\n".join(lines)


TABLES = {"main": (table_main, "GAPSL against its baselines in the default setting, cut 1 and cut 2"),
          "readings": (table_readings, "GAPSL's readings of the paper against their alternatives"),
          "eta": (table_eta, "eta of eq. 6 (the paper gives no value)"),
          "local": (table_local, "Local test splits (--local-test-fraction 0.2)"),
          "table1": (table_table1, "Table I: IID and non-IID"),
          "table2": (table_table2, "Table II: number of devices (Dirichlet 0.1)"),
          "table3": (table_table3, "Table III: data heterogeneity"),
          "ablations": (table_ablations, "Ablations of LGI and GDA (Sec. V-C, Figs. 20-21)")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", nargs="+", default=["main"], choices=list(TABLES))
    ap.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--cuts", type=int, nargs="+", default=[1, 2], choices=[1, 2], help="cuts of the main table")
    ap.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray")
    ap.add_argument("--cache", default=str(ROOT / "runs" / "gapsl-cache"),
                    help="directory of finished runs (one subdirectory per version of the code)")
    ap.add_argument("--doc", default="docs/gapsl.md", help="document whose marked sections get the tables")
    args = ap.parse_args()

    start_ray(args.num_cpus)
    run_one = Runner(Path(args.cache), args.rounds, args.dataset)
    for name in args.tables:
        build, title = TABLES[name]
        rows, body = build(run_one, args)
        stem = f"gapsl-{name}" + ("" if args.dataset == "digits" else f"-{args.dataset}")
        write_tables(rows, f"docs/results/{stem}.md", f"{title} ({args.dataset})", seeds_line(args) + " " +
                     __doc__.split("\n\n")[2], body, doc=args.doc)


if __name__ == "__main__":
    main()
