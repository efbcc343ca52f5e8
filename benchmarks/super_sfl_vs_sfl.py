"""SuperSFL against split federated learning, and the paper's Table III and Fig. 6, offline.

    .venv/bin/python benchmarks/super_sfl_vs_sfl.py compare --dataset digits    # Table I's claim
    .venv/bin/python benchmarks/super_sfl_vs_sfl.py compare --dataset mnist5k
    .venv/bin/python benchmarks/super_sfl_vs_sfl.py availability                # Table III, both modes
    .venv/bin/python benchmarks/super_sfl_vs_sfl.py ablation                    # Fig. 6 with TPGF's figures
    .venv/bin/python benchmarks/super_sfl_vs_sfl.py heads                       # the client classifier
    .venv/bin/python benchmarks/super_sfl_vs_sfl.py table-i                     # the paper's MB per round

Every table runs on its own (``--seeds``, ``--rounds`` to try it small first) and writes
docs/results/super-sfl-<table>.md (+ .csv, .parquet) and its section of docs/super-sfl.md.

Shared setting (the digits preset of examples/super_sfl.py): the 4-block CNN, 10 clients,
all of them every round, Dirichlet alpha = 0.5 (the paper's Sec. III-A), one local epoch of
batches of 32, SGD lr 0.05 with momentum 0.9, devices with 0.5-4 GB of memory and 20-200 ms
latency (so that eq. 1 gives a 4-block model depths 1-3; seed 0: 2, 2 and 6 clients).

``compare``: SuperSFL (paper defaults) against SplitFed V1 and V2 (cut after block 2) and
FedAvg, on identical data, partitions, device profiles and seeds. Per algorithm: rounds and
MB (up + down, every client) until the super-network / global model first reaches the
target accuracy, final accuracy, and MB per round. The paper's Table I claims 2-5x fewer
rounds and up to 20x less communication than SFL.

``availability``: the server's gradients reach the clients in that fraction of rounds
(exactly round(10 a) of every 10, drawn from the seed), in both readings of Table III:
``gradients`` (the server trains on the smashed data in every round, its gradient is missing
or late in the other rounds, and the clients take Alg. 3's local step) and ``server`` (the
server is off in the other rounds). 100 % is the same run in both modes.

``ablation``: the client weight of eq. 3 with both factors, without the loss term, without
the depth term, and fixed at 0.5 (Sec. IV), at the paper's clip tau = 0.5 (and the modes
given to ``--unclipped`` without the clip), with the round means of w_client and of the
encoder gradients' L2 norms that TPGF fuses.

``heads``: the client classifier on feature maps, spatial (pooled to at most 4x4 and
flattened) against one value per channel, with the server's gradients in every round.

Reported per setting: the super-network's final test accuracy (all L blocks: the model of
every paper table) and the clients' own paths (global encoder prefix + own classifier) on
their own label mix (``acc_local_own``) and on the balanced test set (``acc_local``); mean ±
standard deviation over the seeds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from sweep import evaluated, fmt, mean_std, run, start_ray, to_target, write_tables

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from super_sfl import PRESETS  # noqa: E402

DOC = "docs/super-sfl.md"

# The paper's numbers (CIFAR-10, ViT-16): Table III, Fig. 6, and Table I (rounds, MB to target).
PAPER_AVAILABILITY = {1.0: "95.58 ± 1.08", 0.7: "93.81 ± 2.59", 0.5: "93.12 ± 2.11", 0.2: "91.03 ± 1.17",
                      0.1: "89.77 ± 2.22", 0.0: "86.36 ± 3.25"}
PAPER_ABLATION = {"full": "96.93", "no_loss": "91.47", "no_depth": "88.66", "equal": "85.89"}
PAPER_TABLE_I = [  # (data set, clients, target %, SFL rounds, SSFL rounds, SFL MB, SSFL MB)
    ("CIFAR-10", 50, 70, 11, 5, 9075, 466), ("CIFAR-10", 100, 75, 19, 12, 21463, 939),
    ("CIFAR-100", 50, 75, 35, 15, 28938, 7194), ("CIFAR-100", 100, 80, 100, 22, 165358, 9719)]

ALGOS = {"super_sfl": {}, "splitfed_v1": {"cut": 2}, "splitfed_v2": {"cut": 2}, "fedavg": {}}
TARGETS = {"digits": 0.85, "mnist5k": 0.90}
UNCLIPPED = 1e9  # clip_norm that never binds


def shared(dataset: str, rounds: int | None) -> dict:
    """The settings every run of a table shares (the digits preset; ``dataset`` swapped in)."""
    p = dict(PRESETS["digits"])
    p.pop("target", None)
    return {"dataset": dataset, "model": p["model"], "clients": p["clients"], "lr": p["lr"],
            "rounds": rounds or p["rounds"], "partition": "dirichlet", "alpha": 0.5, "local_epochs": 1.0,
            "batch_size": 32, "momentum": 0.9, "devices": {"memory_gb": p["memory_gb"]}}


def para(i: int) -> str:
    """Paragraph ``i`` of this docstring (the tables' introductions)."""
    return __doc__.split("\n\n")[i].strip()


def doc(args) -> str | None:
    """The docs page whose section a table replaces: only for tables written to docs/results/
    (the default), not for trial runs elsewhere (``--out /tmp/...``)."""
    return DOC if args.out is None or Path(args.out).parent == Path("docs/results") else None


def _last(metrics: list[dict], key: str) -> float:
    return float(evaluated(metrics)[-1].get(key, float("nan")))


def _round_mean(metrics: list[dict], key: str) -> float | None:
    vals = [r[key] for r in metrics if key in r and r[key] == r[key]]
    return statistics.mean(vals) if vals else None


def _ms(rows: list[dict], key: str, spec: str = ".2f", scale: float = 100) -> str:
    return mean_std([r[key] for r in rows if r[key] is not None and r[key] == r[key]], spec, scale)


# ----------------------------------------------------------------------------- compare
def compare(args) -> None:
    common = shared(args.dataset, args.rounds)
    target = args.target or TARGETS.get(args.dataset, 0.85)
    rows = []
    for seed in args.seeds:
        for algo, extra in ALGOS.items():
            metrics = run(algo=algo, seed=seed, **common, **extra)
            hit = to_target(metrics, target)
            total = sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6
            rows.append({"algo": algo, "seed": seed, "rounds_to_target": hit["round"], "mb_to_target": hit["mb"],
                         "final_accuracy": _last(metrics, "test_accuracy"),
                         "own_path_own_mix": _last(metrics, "acc_local_own") if algo == "super_sfl" else None,
                         "mb_per_round": total / len(metrics), "total_mb": total})
            r = rows[-1]
            print(f"{args.dataset} seed {seed} {algo:<12} rounds→{target}: {fmt(r['rounds_to_target'])}  "
                  f"MB→target {fmt(r['mb_to_target'], '.1f')}  final {r['final_accuracy']:.4f}", flush=True)

    lines = [f"| algorithm | reached {100 * target:.0f} % | rounds to target | MB to target | MB per round | "
             "final accuracy (%) |", "|---|---:|---:|---:|---:|---:|"]
    for algo in ALGOS:
        rs = [r for r in rows if r["algo"] == algo]
        hit = [r for r in rs if r["rounds_to_target"] is not None]
        lines.append(f"| {algo} | {len(hit)}/{len(rs)} | {_ms(hit, 'rounds_to_target', '.1f', 1)} | "
                     f"{_ms(hit, 'mb_to_target', '.1f', 1)} | {_ms(rs, 'mb_per_round', '.2f', 1)} | "
                     f"{_ms(rs, 'final_accuracy')} |")
    lines += ["", "Per seed (rounds / MB to target; — = not reached):", "",
              "| seed | " + " | ".join(ALGOS) + " |", "|---:|" + "---:|" * len(ALGOS)]
    for seed in args.seeds:
        by = {r["algo"]: r for r in rows if r["seed"] == seed}
        lines.append(f"| {seed} | " + " | ".join(
            f"{fmt(by[a]['rounds_to_target'])} / {fmt(by[a]['mb_to_target'], '.1f')}" for a in ALGOS) + " |")
    ratios = []
    for base in ("splitfed_v1", "splitfed_v2"):
        for seed in args.seeds:
            by = {r["algo"]: r for r in rows if r["seed"] == seed}
            s, b = by["super_sfl"], by[base]
            if s["rounds_to_target"] and b["rounds_to_target"]:
                ratios.append((base, seed, b["rounds_to_target"] / s["rounds_to_target"], b["mb_to_target"] / s["mb_to_target"]))
    paper_r = [t[3] / t[4] for t in PAPER_TABLE_I]
    paper_mb = [t[5] / t[6] for t in PAPER_TABLE_I]
    lines += ["", f"SplitFed / SuperSFL, per seed where both reached the target (paper, Table I, SFL / SSFL: "
              f"{min(paper_r):.1f}-{max(paper_r):.1f}x the rounds, {min(paper_mb):.1f}-{max(paper_mb):.1f}x the MB):",
              "", "| baseline | seed | rounds ratio | MB ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {b} | {s} | {rr:.2f} | {mr:.2f} |" for b, s, rr, mr in ratios] or ["| — | — | — | — |"]
    own = [r["own_path_own_mix"] for r in rows if r["own_path_own_mix"] is not None]
    lines += ["", f"SuperSFL's own paths on their clients' label mix, final round: {mean_std(own, '.2f', 100)} %."]
    intro = (f"{args.dataset}, {common['rounds']} rounds, target accuracy {target}, seeds {args.seeds}. "
             f"{para(3)} {para(4)}")
    write_tables(rows, args.out or f"docs/results/super-sfl-vs-sfl-{args.dataset}.md",
                 f"SuperSFL vs SplitFed V1/V2 and FedAvg ({args.dataset}, Table I's claim)", intro,
                 "\n".join(lines), doc=doc(args))


# ----------------------------------------------------------------------------- availability
def availability(args) -> None:
    common = shared(args.dataset, args.rounds)
    rows = []
    server_levels = args.levels if args.server_mode_levels is None else args.server_mode_levels
    for level in args.levels:
        for mode in args.modes:
            if level == 1.0 and mode != args.modes[0]:  # the server answers every round: one run serves both
                rows += [{**r, "mode": mode} for r in rows if r["availability"] == 1.0 and r["mode"] == args.modes[0]]
                continue
            if mode == "server" and level not in server_levels:
                continue
            for seed in args.seeds:
                metrics = run(algo="super_sfl", seed=seed, **common,
                              super_sfl={"server_availability": level, "availability_mode": mode})
                rows.append({"availability": level, "mode": mode, "seed": seed,
                             "final_accuracy": _last(metrics, "test_accuracy"),
                             "own_path_own_mix": _last(metrics, "acc_local_own"),
                             "own_path_balanced": _last(metrics, "acc_local"),
                             "server_rounds": sum(int(r["server_available"]) for r in metrics),
                             "fallback_steps": sum(r["fallback_steps"] for r in metrics),
                             "total_mb": sum(r["bytes_up"] + r["bytes_down"] for r in metrics) / 1e6})
                r = rows[-1]
                print(f"availability {level} {mode} seed {seed}: super-network {r['final_accuracy']:.4f}, "
                      f"own paths {r['own_path_own_mix']:.4f} (own mix) {r['own_path_balanced']:.4f} (balanced)",
                      flush=True)
    head = "| server-gradient availability | server rounds |"
    sub = "|---:|---:|"
    for mode in args.modes:
        head += f" {mode}: super-network | {mode}: own paths, own mix | {mode}: own paths, balanced |"
        sub += "---:|---:|---:|"
    lines = [head + " paper, CIFAR-10 ViT |", sub + "---:|"]
    for level in args.levels:
        rs = [r for r in rows if r["availability"] == level]
        line = f"| {100 * level:.0f} % | {rs[0]['server_rounds']} / {common['rounds']} |"
        for mode in args.modes:
            m = [r for r in rs if r["mode"] == mode]
            line += f" {_ms(m, 'final_accuracy')} | {_ms(m, 'own_path_own_mix')} | {_ms(m, 'own_path_balanced')} |"
        lines.append(line + f" {PAPER_AVAILABILITY.get(level, '—')} |")
    intro = (f"{args.dataset}, {common['rounds']} rounds, seeds {args.seeds}; accuracies in %. "
             f"{para(3)} {para(5)} {para(8)}")
    write_tables(rows, args.out or "docs/results/super-sfl-availability.md",
                 "SuperSFL: server-gradient availability (Table III), both readings", intro, "\n".join(lines), doc=doc(args))


# ----------------------------------------------------------------------------- ablation
def ablation(args) -> None:
    common = shared(args.dataset, args.rounds)
    rows = []
    grid = [(args.clip_norm, f) for f in args.fusions] + [(UNCLIPPED, f) for f in args.unclipped]
    for clip, fusion in grid:
        for seed in args.seeds:
            metrics = run(algo="super_sfl", seed=seed, **common, super_sfl={"fusion": fusion, "clip_norm": clip})
            w, gl = _round_mean(metrics, "tpgf_w_client"), _round_mean(metrics, "grad_norm_local")
            gs = _round_mean(metrics, "grad_norm_server")
            rows.append({"clip_norm": clip, "fusion": fusion, "seed": seed,
                         "final_accuracy": _last(metrics, "test_accuracy"),
                         "own_path_own_mix": _last(metrics, "acc_local_own"),
                         "own_path_balanced": _last(metrics, "acc_local"),
                         "w_client": w, "grad_norm_local": gl,
                         "grad_norm_local_raw": _round_mean(metrics, "grad_norm_local_raw"),
                         "grad_norm_server": gs,
                         # |w g_local| / (|w g_local| + |(1 - w) g_server|) from the round means
                         "local_share": w * gl / (w * gl + (1 - w) * gs) if None not in (w, gl, gs) else None})
            r = rows[-1]
            print(f"clip {clip} fusion {fusion} seed {seed}: super-network {r['final_accuracy']:.4f}, "
                  f"w_client {fmt(w)}, |g_local| {fmt(gl)}, |g_server| {fmt(gs)}", flush=True)
    lines = ["| clip tau | TPGF client weight | super-network (%) | own paths, own mix (%) | w_client | "
             "\\|g_local\\| clipped (raw) | \\|g_server\\| | local share of the step | paper, CIFAR-10 ViT (%) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for clip, fusion in grid:
        rs = [r for r in rows if r["clip_norm"] == clip and r["fusion"] == fusion]
        mean = lambda k: statistics.mean(r[k] for r in rs)  # noqa: E731
        label = "none" if clip >= UNCLIPPED else f"{clip:g}"
        lines.append(f"| {label} | {fusion} | {_ms(rs, 'final_accuracy')} | {_ms(rs, 'own_path_own_mix')} | "
                     f"{mean('w_client'):.3f} | {mean('grad_norm_local'):.3f} ({mean('grad_norm_local_raw'):.2f}) | "
                     f"{mean('grad_norm_server'):.2f} | {100 * mean('local_share'):.1f} % | "
                     f"{PAPER_ABLATION[fusion] if clip == 0.5 else '—'} |")
    intro = (f"{args.dataset}, {common['rounds']} rounds, seeds {args.seeds}; w_client and the norms are means "
             f"over rounds and seeds of the per-round means over clients (metrics tpgf_w_client, grad_norm_local, "
             f"grad_norm_local_raw, grad_norm_server); clip 'none' is tau = {UNCLIPPED:g}. "
             f"{para(3)} {para(6)} {para(8)}")
    write_tables(rows, args.out or "docs/results/super-sfl-ablation.md", "SuperSFL: TPGF ablation (Fig. 6)",
                 intro, "\n".join(lines), doc=doc(args))


def heads(args) -> None:
    common = shared(args.dataset, args.rounds)
    rows = []
    for head in ("spatial", "pooled"):
        for seed in args.seeds:
            metrics = run(algo="super_sfl", seed=seed, **common, super_sfl={"classifier_head": head})
            rows.append({"classifier_head": head, "seed": seed, "final_accuracy": _last(metrics, "test_accuracy"),
                         "own_path_own_mix": _last(metrics, "acc_local_own"),
                         "own_path_balanced": _last(metrics, "acc_local")})
            r = rows[-1]
            print(f"head {head} seed {seed}: super-network {r['final_accuracy']:.4f}, own paths "
                  f"{r['own_path_own_mix']:.4f} (own mix) {r['own_path_balanced']:.4f} (balanced)", flush=True)
    lines = ["| client classifier | super-network (%) | own paths, own mix (%) | own paths, balanced (%) |",
             "|---|---:|---:|---:|"]
    for head in ("spatial", "pooled"):
        rs = [r for r in rows if r["classifier_head"] == head]
        lines.append(f"| {head} | {_ms(rs, 'final_accuracy')} | {_ms(rs, 'own_path_own_mix')} | "
                     f"{_ms(rs, 'own_path_balanced')} |")
    intro = f"{args.dataset}, {common['rounds']} rounds, seeds {args.seeds}. {para(3)} {para(7)} {para(8)}"
    write_tables(rows, args.out or "docs/results/super-sfl-heads.md", "SuperSFL: the client classifier",
                 intro, "\n".join(lines), doc=doc(args))


def table_i_arithmetic() -> str:
    """The paper's Table I as MB per round (its MB / its rounds): what the method must explain."""
    lines = ["| data set | clients | SFL MB/round | SSFL MB/round | ratio |", "|---|---:|---:|---:|---:|"]
    for ds, n, _, r_sfl, r_ssfl, mb_sfl, mb_ssfl in PAPER_TABLE_I:
        a, b = mb_sfl / r_sfl, mb_ssfl / r_ssfl
        lines.append(f"| {ds} | {n} | {a:.0f} | {b:.0f} | {a / b:.1f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", choices=["compare", "availability", "ablation", "heads", "table-i"])
    ap.add_argument("--dataset", default="digits", choices=["digits", "mnist5k"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rounds", type=int, default=None, help="default: 20 (the digits preset)")
    ap.add_argument("--target", type=float, default=None, help="compare: default 0.85 (digits), 0.90 (mnist5k)")
    ap.add_argument("--levels", type=float, nargs="+", default=[1.0, 0.7, 0.5, 0.2, 0.1, 0.0])
    ap.add_argument("--modes", nargs="+", default=["gradients", "server"], choices=["gradients", "server"])
    ap.add_argument("--server-mode-levels", type=float, nargs="+", default=None,
                    help="availability: the levels run in server mode too (default: all of --levels)")
    ap.add_argument("--fusions", nargs="*", default=["full", "no_loss", "no_depth", "equal"],
                    help="ablation: fusion modes at --clip-norm")
    ap.add_argument("--clip-norm", type=float, default=0.5, help="ablation: tau (the paper's 0.5)")
    ap.add_argument("--unclipped", nargs="*", default=["full", "equal"],
                    help="ablation: fusion modes also run without the clip")
    ap.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray")
    ap.add_argument("--out", default=None, help="default: docs/results/super-sfl-<table>.md")
    args = ap.parse_args()
    if args.table == "table-i":
        print(table_i_arithmetic())
        return
    start_ray(args.num_cpus)
    {"compare": compare, "availability": availability, "ablation": ablation, "heads": heads}[args.table](args)


if __name__ == "__main__":
    main()
