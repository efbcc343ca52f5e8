"""BESplit's tables, scaled down: BESplit-G and BESplit-A against SplitFed, FedAvg and FedProx
across Dirichlet kappa with rounds to target accuracy (Tables 3, 5 and 7, Fig. 4), the
readings of Evidential Aggregation, Table 4's ablations, and the evidential loss's knobs.

    .venv/bin/python benchmarks/besplit_compare.py --table main [--dataset digits] [--rounds 30]
        [--seeds 0 1 2] [--kappas 0.1 0.5 1] [--section]
    .venv/bin/python benchmarks/besplit_compare.py --table readings|ablations|knobs [--kappas 0.1 1]
    .venv/bin/python benchmarks/besplit_compare.py --table seeds [--seeds 0 ... 19] [--jobs 2] [--cache DIR]
    .venv/bin/python benchmarks/besplit_compare.py --table full|aux [--seeds 0 ... 19] [--jobs 2] [--cache DIR]

Same data, partition, local test splits, model, cut, participation and seed for every run:
10 clients (all of them every round), Dirichlet kappa label mixes, every client holding a
seeded 20 % test split of its own data (Sec. 3.1; never trained on), the 4-block CNN cut
after its two conv blocks, one local epoch, batch 32, SGD with momentum 0.9 and lr 0.05 for
every algorithm. SplitFed is SplitFed V1 (one server-side model per client, as in BESplit);
FedAvg and FedProx (mu 0.01) train the whole CNN on the clients. BESplit runs with its
defaults; one run gives BESplit-G (the global model) and BESplit-A (the clients' auxiliary
models). The paper's metric is accuracy on the clients' own test splits (mean over
clients: ``acc_g_local``, ``acc_aux_local``, and ``test_accuracy_local`` for the
baselines' global model); accuracy on the global balanced test set is given beside it. Each
figure is the final round's and the mean of the last 5 rounds. ``readings``: BCC and the
auxiliary models off, EA's readings against sample-weighted and simple averaging;
``ablations`` and ``knobs``: the auxiliary models off; ``seeds``: EA against plain averaging
(BCC and the auxiliary models off) on many paired seeds; ``full``: the whole of BESplit (EA,
BCC, DTD) on many paired seeds, BESplit-A against BESplit-G; ``aux``: the same, with the auxiliary
model's optimiser kept across rounds or restarted, and a gradient clip, at kappa 0.1 and 1.
Nothing is tuned to the comparison.
"""

from __future__ import annotations

import argparse
import statistics
import numpy as np

from sweep import ROOT, evaluated, fmt, mean_std, prerun, run, start_ray, write_tables

COMMON = dict(model="cnn", clients=10, partition="dirichlet", cut=2, local_epochs=1, batch_size=32, momentum=0.9,
              lr=0.05, optimizer="sgd", local_test_fraction=0.2)
BASELINES = {"splitfed_v1": "SplitFed (V1)", "fedavg": "FedAvg", "fedprox": "FedProx"}
PRINTED = {"ea_average": "all", "ea_epistemic": "entropy", "ea_compare": "pooled", "csr_model": "training"}
# EA's readings (docs/besplit.md, "Evidential Aggregation"): BCC and DTD off
READINGS = {
    "sample-weighted average (--no-ea)": {"ea": False},
    "simple average (--no-ea --plain-weights uniform)": {"ea": False, "plain_weights": "uniform"},
    "EA as printed": {**PRINTED, "ea_samples": False},
    "EA as printed, times n_k": PRINTED,
    "seen classes, MI, n_k (pooled, W_S_k training)": {"ea_average": "seen", "ea_compare": "pooled",
                                                       "csr_model": "training"},
    "... compared per class": {"ea_average": "seen", "csr_model": "training"},
    "... pooled, round-start model": {"ea_average": "seen", "ea_compare": "pooled"},
    "... per class, round-start model": {"ea_average": "seen"},
    "default: per class, round-start, per sample, MI, n_k": {},
    "default without n_k": {"ea_samples": False},
    "default with vacuity N/S for MI": {"ea_epistemic": "vacuity"},
}
# Table 4 (BESplit-G, auxiliary models off); "w/o EA" twice: the paper's "simple average
# aggregation" (Sec. 5.3) and FedAvg's sample-weighted average
ABLATIONS = {"BESplit": {}, "w/o EA (simple average)": {"ea": False, "plain_weights": "uniform"},
             "w/o EA (sample-weighted)": {"ea": False}, "w/o E": {"ea_evidence": False},
             "w/o U_ale": {"ea_ale": False}, "w/o U_epi": {"ea_epi": False}, "w/o BCC": {"bcc": False}}
# (exp evidence and T = the run's rounds are the defaults; with --set anneal_rounds=10 the
# evidence rows are at T = 10, and one T row repeats the first)
KNOBS = {"exp evidence": {}, "softplus evidence": {"evidence": "softplus"}, "relu evidence": {"evidence": "relu"},
         "exp, T = 10 rounds (Sensoy et al.)": {"anneal_rounds": 10}, "exp, T = the run's rounds": {"anneal_rounds": None}}
# EA against plain averaging on many seeds (BCC and DTD off): at kappa 0.1 one run's last rounds
# swing by 20-30 points, so a difference is only read from many paired seeds
SEEDS = {"EA (default: --ea-sides server)": {"ea_sides": "server"},
         "EA on both sides (--ea-sides both)": {"ea_sides": "both"},
         "sample-weighted average (--no-ea)": {"ea": False},
         "simple average (--no-ea --plain-weights uniform)": {"ea": False, "plain_weights": "uniform"}}
# the whole of BESplit on many seeds: BESplit-A (the auxiliary models) against BESplit-G (the
# global model) in one run, with BCC and the annealing horizon T as the variants that move G
# (T given explicitly: None is the run's rounds, the default, so the rows read the same runs
# whatever the default)
FULL = {"BESplit (defaults: T = the run's rounds)": {"anneal_rounds": None},
        "w/o BCC (--no-bcc)": {"bcc": False, "anneal_rounds": None},
        "T = 10 (--anneal-rounds 10; the default until 2026-11-24)": {"anneal_rounds": 10},
        "w/o BCC, T = 10": {"bcc": False, "anneal_rounds": 10}}
# the auxiliary model's optimiser state kept across rounds (the default since 2026-11-25) or
# restarted every round, and the gradient clip on every evidential step (5 by default since
# 2026-11-25; 0: none), on many seeds (the clip given explicitly, so the rows read the same
# runs whatever the default)
AUX = {"BESplit (defaults: optimiser kept, clip 5)": {"anneal_rounds": None, "evidential_clip": 5.0},
       "no clip (--evidential-clip 0)": {"anneal_rounds": None, "evidential_clip": 0.0},
       "no clip, optimiser restarted every round (--evidential-clip 0 --no-keep-aux-optimizer; "
       "until 2026-11-25)": {"anneal_rounds": None, "evidential_clip": 0.0, "keep_aux_optimizer": False}}
TARGETS = (0.5, 0.7, 0.8, 0.9)
LAST = 5


def figures(metrics: list[dict], key: str) -> dict:
    """Final and last-5 mean of ``key`` and the first round reaching each target."""
    accs = [r[key] for r in metrics]
    return {"final": accs[-1], "last5": statistics.mean(accs[-LAST:]),
            **{f"rta_{t:.0%}": next((r["round"] for r in metrics if r[key] >= t), None) for t in TARGETS}}


def rho_implied(dataset: str, kappa: float, seed: int) -> dict:
    """BCC's plan on the true label mixes of the run's training splits, equal EA weights (App.
    D.2's analysis): biased clients (eq. 11), pairs (eq. 33), and the share of all training
    rows that eqs. (31)-(32) would move in one epoch."""
    from raysfl.algorithms.besplit.bcc import bcc_pairs, biased_clients, mix_ratio, overrepresented
    from raysfl.data import hold_out, label_histograms, load_dataset, partition

    ds = load_dataset(dataset)
    parts = partition(ds.y_train, COMMON["clients"], "dirichlet", alpha=kappa, seed=seed)
    parts, _ = hold_out(parts, COMMON["local_test_fraction"], seed)
    h = label_histograms(ds.y_train, parts, ds.num_classes).astype(np.float64)
    p_g, dists = h.sum(0) / h.sum(), h / h.sum(1, keepdims=True)
    biased = biased_clients(dists, p_g)
    pairs = bcc_pairs(dists, p_g, biased)
    moved = 0.0
    for a, b in pairs:
        for lender, borrower in ((a, b), (b, a)):
            classes = overrepresented(dists[lender], dists[borrower])[0]
            moved += sum(mix_ratio(dists[lender][n], dists[borrower][n], p_g[n], 0.5, 0.5) * h[lender][n]
                         for n in classes)
    return {"rho_biased": len(biased), "rho_pairs": len(pairs), "rho_moved_frac": moved / h.sum()}


def paired(d: np.ndarray) -> str:
    """A paired difference over seeds, in points: ``mean ± standard error``."""
    se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return f"{d.mean():+.1f} ± {se:.1f}"


def seeds_tables(rows: list[dict], kappas: list[float]) -> list[str]:
    """The seeds table: each averaging's mean ± std over the seeds, and EA's paired difference
    from each plain average (mean ± standard error over seeds; seeds where EA is at or above
    it, and within 3 points of it), on the mean of the last rounds and on the final round."""
    body = []
    for kappa in kappas:
        by = {lb: {r["seed"]: r for r in rows if r["algo"] == lb and r["kappa"] == kappa} for lb in SEEDS}
        seeds = sorted(set.intersection(*(set(v) for v in by.values())))
        body += [f"kappa {kappa:g}, {len(seeds)} seeds: BESplit-G (`acc_g_local`) on the clients' own test splits, %",
                 "", f"| averaging | last-{LAST} mean | final round |", "|---|---:|---:|"]
        for lb in SEEDS:
            body.append(f"| {lb} | " + " | ".join(mean_std([by[lb][s][f"local_{k}"] for s in seeds], ".1f", 100)
                                                   for k in ("last5", "final")) + " |")
        body += ["", "Each EA reading minus each plain average, paired by seed (points; mean ± standard error; "
                 "seeds where EA is >= it / within 3 points of it or above):", "",
                 f"| EA | against | last-{LAST} mean | final round |", "|---|---|---:|---:|"]
        for ea_label in (lb for lb in SEEDS if lb.startswith("EA")):
            for lb in (lb for lb in SEEDS if not lb.startswith("EA")):
                cells = []
                for k in ("last5", "final"):
                    d = 100 * np.array([by[ea_label][s][f"local_{k}"] - by[lb][s][f"local_{k}"] for s in seeds])
                    cells.append(f"{paired(d)} ({int((d >= 0).sum())}/{len(d)}, "
                                 f"{int((d >= -3).sum())}/{len(d)})")
                body.append(f"| {ea_label} | {lb} | " + " | ".join(cells) + " |")
        body += ["", f"Per seed, last-{LAST} mean, %:", "", "| seed | " + " | ".join(SEEDS) + " |",
                 "|---|" + "---:|" * len(SEEDS)]
        body += [f"| {s} | " + " | ".join(f"{100 * by[lb][s]['local_last5']:.1f}" for lb in SEEDS) + " |"
                 for s in seeds]
        body.append("")
    return body


def full_tables(rows: list[dict], kappas: list[float], variants: dict) -> list[str]:
    """The full-BESplit table: per variant, BESplit-G and BESplit-A (last-5 mean on the
    clients' own splits) over the seeds, A - G paired by seed (mean ± standard error), and on
    how many seeds A >= 75 % and A is within 5 points of G (issue 24's second criterion)."""
    body = []
    for kappa in kappas:
        seeds = sorted({r["seed"] for r in rows if r["kappa"] == kappa})
        by = {(r["algo"], r["seed"]): r for r in rows if r["kappa"] == kappa}
        body += [f"kappa {kappa:g}, {len(seeds)} seeds: the clients' own test splits, mean of the last {LAST} "
                 "rounds, %", "", "| variant | BESplit-G | BESplit-A | A − G (± s.e.) | A >= 75 % | "
                 "A within 5 points of G | both |", "|---|---:|---:|---:|---:|---:|---:|"]
        for label in variants:
            g = np.array([by[(f"{label}: G", s)]["local_last5"] for s in seeds])
            a = np.array([by[(f"{label}: A", s)]["local_last5"] for s in seeds])
            d = 100 * (a - g)
            level, close = a >= 0.75, np.abs(d) <= 5
            body.append(f"| {label} | {mean_std(list(g), '.1f', 100)} | {mean_std(list(a), '.1f', 100)} | "
                        f"{paired(d)} | {int(level.sum())}/{len(d)} | {int(close.sum())}/{len(d)} | "
                        f"{int((level & close).sum())}/{len(d)} |")
        body += ["", f"Per seed, last-{LAST} mean, % (G / A):", "", "| seed | " + " | ".join(variants) + " |",
                 "|---|" + "---:|" * len(variants)]
        body += [f"| {s} | " + " | ".join(f"{100 * by[(f'{lb}: G', s)]['local_last5']:.1f} / "
                                          f"{100 * by[(f'{lb}: A', s)]['local_last5']:.1f}" for lb in variants) + " |"
                 for s in seeds]
        body.append("")
    return body


def parse_knob(text: str) -> tuple[str, object]:
    """``--set KNOB=VALUE``: a BESplit parameter and its value (JSON: 30, 0.5, true, "server"; a
    bare word is a string). Checked against BESplit's parameters, so a typo stops the script."""
    import dataclasses
    import json

    from raysfl.algorithms.besplit.spec import BESplitParams

    name, sep, value = text.partition("=")
    knobs = [f.name for f in dataclasses.fields(BESplitParams)]
    if not sep or name not in knobs:
        raise SystemExit(f"--set {text!r}: expected KNOB=VALUE with KNOB one of {', '.join(knobs)}")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", required=True, choices=["main", "readings", "ablations", "knobs", "seeds", "full", "aux"])
    ap.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 2 (seeds, full, aux: 0 ... 19)")
    ap.add_argument("--baselines", nargs="+", choices=list(BASELINES), default=list(BASELINES),
                    help="main: the baselines to run (default: all; SplitFed V1 and FedAvg take the same steps)")
    ap.add_argument("--kappas", type=float, nargs="+", default=None,
                    help="default: 0.1 0.5 1 (main), 0.1 (readings), 0.1 1 (ablations, knobs)")
    ap.add_argument("--num-cpus", type=int, default=None,
                    help="logical CPUs of the local Ray (default: 4, or 3 per run with --jobs)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each needs 2.5 CPUs of the local Ray)")
    ap.add_argument("--cache", default=None, help="keep each run's rows in this directory and reuse them")
    ap.add_argument("--out", default=None, help="default: docs/results/besplit-<dataset>-<table>[-<rounds>r].md")
    ap.add_argument("--section", action="store_true", help="also write the tables into docs/besplit.md")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="a BESplit knob for every BESplit run of the table, e.g. --set anneal_rounds=30 "
                         "(repeatable; a variant's own setting wins)")
    args = ap.parse_args()
    knobs = dict(parse_knob(a) for a in args.set)
    kappas = args.kappas or {"main": [0.1, 0.5, 1.0], "readings": [0.1], "seeds": [0.1],
                             "full": [0.1], "aux": [0.1, 1.0]}.get(args.table, [0.1, 1.0])
    args.seeds = args.seeds or (list(range(20)) if args.table in ("seeds", "full", "aux") else [0, 1, 2])
    rounds_tag = "" if args.rounds == 30 else f"-{args.rounds}r"
    knobs_tag = "".join(f"-{k}{v}" for k, v in knobs.items())
    out = args.out or f"docs/results/besplit-{args.dataset}-{args.table}{rounds_tag}{knobs_tag}.md"

    start_ray(args.num_cpus or max(4, 3 * args.jobs))
    rows = []

    def record(label, kappa, seed, metrics, key, local_key, **extra):
        g, loc = figures(metrics, key), figures(metrics, local_key)
        rows.append({"table": args.table, "algo": label, "kappa": kappa, "seed": seed,
                     **{f"global_{k}": v for k, v in g.items()}, **{f"local_{k}": v for k, v in loc.items()},
                     "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6, **extra})
        r = rows[-1]
        print(f"kappa {kappa:<4} seed {seed} {label:<48} local final {r['local_final']:.4f} last5 "
              f"{r['local_last5']:.4f}  global final {r['global_final']:.4f} last5 {r['global_last5']:.4f}",
              flush=True)

    variants = {"readings": READINGS, "ablations": ABLATIONS, "knobs": KNOBS, "seeds": SEEDS,
                "full": FULL, "aux": AUX}.get(args.table, {})
    off = {"readings": {"dtd": False, "bcc": False}, "seeds": {"dtd": False, "bcc": False},
           "full": {}, "aux": {}}.get(args.table, {"dtd": False})

    def settings(seed, kappa, algo="besplit", **params):
        extra = {"besplit": {k: (args.rounds if v is None else v) for k, v in {**knobs, **params}.items()}}
        extra = extra if algo == "besplit" else {}
        return dict(algo=algo, dataset=args.dataset, rounds=args.rounds, seed=seed, alpha=kappa, **COMMON, **extra)

    def besplit(seed, kappa, **params):
        return evaluated(run(cache=args.cache, **settings(seed, kappa, **params)))

    jobs = [settings(seed, kappa, **({} if args.table == "main" else off), **params)
            for kappa in kappas for seed in args.seeds
            for params in ([{}] if args.table == "main" else variants.values())]
    jobs += [settings(seed, kappa, algo) for kappa in kappas for seed in args.seeds
             for algo in (args.baselines if args.table == "main" else ())]
    args.cache = prerun(jobs, args.cache, args.jobs)  # with --jobs: every run first, several at once
    for kappa in kappas:
        for seed in args.seeds:
            if args.table == "main":
                m = besplit(seed, kappa)
                bcc = {"bcc_lent_frac": statistics.mean(r["bcc_lent_frac"] for r in m[1:]),
                       "bcc_pairs": statistics.mean(r["bcc_pairs"] for r in m[1:]),
                       "bcc_biased": statistics.mean(r["bcc_biased"] for r in m[1:]),
                       **rho_implied(args.dataset, kappa, seed)}
                record("BESplit-G", kappa, seed, m, "test_accuracy", "acc_g_local", **bcc)
                record("BESplit-A", kappa, seed, m, "acc_aux", "acc_aux_local")
                for algo, label in ((a, BASELINES[a]) for a in args.baselines):
                    m = evaluated(run(cache=args.cache, **settings(seed, kappa, algo)))
                    record(label, kappa, seed, m, "test_accuracy", "test_accuracy_local")
                continue
            for label, params in variants.items():
                m = besplit(seed, kappa, **off, **params)
                if args.table in ("full", "aux"):
                    record(f"{label}: G", kappa, seed, m, "test_accuracy", "acc_g_local")
                    record(f"{label}: A", kappa, seed, m, "acc_aux", "acc_aux_local")
                    continue
                record(label, kappa, seed, m, "test_accuracy", "acc_g_local",
                       ea_weight_max=statistics.mean(r["ea_weight_max"] for r in m))

    def group(label, kappa):
        return [r for r in rows if r["algo"] == label and r["kappa"] == kappa]

    def both(rs, kind):  # "final / last-5 mean", in %
        return " / ".join(mean_std([r[f"{kind}_{k}"] for r in rs], ".1f", 100) for k in ("final", "last5"))

    head = ["| | " + " | ".join(f"kappa {k:g}" for k in kappas) + " |", "|---|" + "---:|" * len(kappas)]
    if args.table == "main":
        labels = ["BESplit-G", "BESplit-A", *(BASELINES[a] for a in args.baselines)]
        body = [f"Accuracy on the clients' own test splits (the paper's metric; mean over clients), % — final "
                f"round / mean of the last {LAST} rounds:", "", *head]
        body += [f"| {lb} | " + " | ".join(both(group(lb, k), "local") for k in kappas) + " |" for lb in labels]
        body += ["", f"Accuracy on the global, balanced test set, % — final round / mean of the last {LAST} rounds:",
                 "", *head]
        body += [f"| {lb} | " + " | ".join(both(group(lb, k), "global") for k in kappas) + " |" for lb in labels]
        for kappa in kappas:
            body += ["", f"Rounds to target accuracy on the clients' test splits, kappa {kappa:g} (Table 5 style; "
                     "mean over the seeds that reach it, how many in brackets):", "",
                     "| | " + " | ".join(f"{t:.0%}" for t in TARGETS) + " | total MB |",
                     "|---|" + "---:|" * (len(TARGETS) + 1)]
            for lb in labels:
                rs = group(lb, kappa)
                cells = []
                for t in TARGETS:
                    hits = [r[f"local_rta_{t:.0%}"] for r in rs if r[f"local_rta_{t:.0%}"] is not None]
                    cells.append(f"{fmt(statistics.mean(hits), '.1f') if hits else '—'} ({len(hits)}/{len(rs)})")
                body.append(f"| {lb} | " + " | ".join(cells) + f" | {statistics.mean(r['total_mb'] for r in rs):.1f} |")
        body += ["", "BCC per round (BESplit runs, rounds 2 on; mean over seeds) next to what eqs. (11), (33) and "
                 "(31)-(32) imply on the true label mixes with equal weights, per epoch:", "",
                 "| kappa | biased clients | pairs | lent rows / own rows | implied: biased | pairs | "
                 "moved rows / all rows |", "|---|---:|---:|---:|---:|---:|---:|"]
        for kappa in kappas:
            rs = group("BESplit-G", kappa)

            def avg(k, spec=".1f", rs=rs):
                return format(statistics.mean(r[k] for r in rs), spec)
            body.append(f"| {kappa:g} | {avg('bcc_biased')} | {avg('bcc_pairs')} | "
                        f"{100 * statistics.mean(r['bcc_lent_frac'] for r in rs):.1f} % | {avg('rho_biased')} | "
                        f"{avg('rho_pairs')} | {100 * statistics.mean(r['rho_moved_frac'] for r in rs):.1f} % |")
    elif args.table == "seeds":
        body = seeds_tables(rows, kappas)
    elif args.table in ("full", "aux"):
        body = full_tables(rows, kappas, variants)
    else:
        body = [f"BESplit-G on the clients' own test splits, % — final round / mean of the last {LAST} rounds "
                f"(in brackets: the largest weight, mean over rounds and seeds):", "", *head]
        for label in variants:
            cells = [f"{both(group(label, k), 'local')} ({statistics.mean(r['ea_weight_max'] for r in group(label, k)):.2f})"
                     for k in kappas]
            body.append(f"| {label} | " + " | ".join(cells) + " |")
    intro = (f"{args.dataset}, {args.rounds} rounds, seeds {args.seeds}"
             + "".join(f", {k} = {v} in every BESplit run" for k, v in knobs.items())
             + "; mean ± standard deviation over the seeds. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    md = "\n".join(body)
    title = {"main": "BESplit vs SplitFed, FedAvg and FedProx across Dirichlet kappa",
             "readings": "Evidential Aggregation's readings", "ablations": "BESplit's ablations (Table 4)",
             "knobs": "The evidential loss's knobs",
             "seeds": "Evidential Aggregation against plain averaging, many seeds",
             "full": "The whole of BESplit on many seeds: BESplit-A against BESplit-G",
             "aux": "The auxiliary model's optimiser state, and a gradient clip, on many seeds"}[args.table]
    write_tables(rows, out, f"{title} ({args.dataset})", intro, md, doc=ROOT / "docs" / "besplit.md" if args.section
                 else None)


if __name__ == "__main__":
    main()
