"""``raysfl compare``: several algorithms on identical data, partitions, device profiles and
seeds, one results table, and the plots.

Every run of a comparison shares the settings that define the data and the federation --
data set, model, cut, clients, clients per round, rounds, partition and its parameters,
local test splits, local work, batch size, device profiles -- taken from the user's settings, else from the
paper setting (``dataset_defaults`` for the data set, then ``config_defaults``) of the
*first* algorithm listed, else from raysfl's defaults: ``--algos gapsl,psl`` runs in GAPSL's
setting (10 clients, Dirichlet 0.1, its cut), as the paper ran its baselines, and never mixes
two papers' settings (GAPSL's Dirichlet 0.1 with BESplit's Dirichlet 1). Participation too:
every algorithm trains ``--clients-per-round`` clients a round (all of them if not given);
FLEX-SFL maps it to its participation rate rho. Learning settings the user leaves out (lr,
momentum, ...) follow each algorithm's paper defaults; an algorithm without a value of its
own (a baseline) takes the first algorithm's. Seeds are 0 .. n-1 (or those listed); the same
seed gives every algorithm the same partition, profiles and selection stream.

Runs go as many at once as the Ray cluster's CPUs and GPUs hold (``--parallel`` overrides),
each in a thread of this driver with its own actors and placement groups; a run's results
do not depend on what ran beside it.

The comparison directory holds ``runs/<algo>-s<seed>/`` (every run's own directory),
``results.md`` and ``results.parquet`` (one row per algorithm), ``runs.parquet`` (one row
per run) and the PNGs of :mod:`raysfl.plots`.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from raysfl.config import DATA_DEFINING, RUN_DEFAULTS, Config
from raysfl.errors import ConfigError
from raysfl.runtime.many_runs import runs_at_once, start_local_ray


def comparison_configs(algos: list[str], settings: dict, seeds: int | list[int], out_dir: Path) -> list[Config]:
    """One validated Config per (algorithm, seed), sharing the data-defining settings. ``seeds``:
    a count n (seeds 0..n-1) or the seeds themselves."""
    from raysfl.resolve import from_dict, validate

    if not algos:
        raise ConfigError("compare needs at least one algorithm (--algos a,b,...)")
    if len(set(algos)) != len(algos):
        raise ConfigError(f"--algos lists an algorithm twice: {','.join(algos)}")
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {seeds}")
        seeds = list(range(seeds))
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must list distinct seeds, got {','.join(map(str, seeds)) or 'none'}")
    from raysfl.algorithms import get_algorithm

    base = Config()
    first = get_algorithm(algos[0])
    dataset = settings.get("dataset", base.dataset)
    paper = {**first.config_defaults, **first.dataset_defaults.get(dataset, {})}  # the comparison's setting
    shared = {k: paper.get(k, RUN_DEFAULTS.get(k, getattr(base, k))) for k in DATA_DEFINING}
    shared.update({k: v for k, v in settings.items() if k in DATA_DEFINING})
    # the same participation for every algorithm: the clients per round given, else all of them
    # (an algorithm that selects by its own rule maps it to its own knob, e.g. FLEX-SFL's rho)
    shared["clients_per_round"] = shared["clients_per_round"] or shared["clients"]
    from raysfl.algorithms import ALGORITHMS

    for name in settings:  # an algorithm's section (a file's, or a flag such as --mu) must be compared
        if name in ALGORITHMS and name not in algos:
            flags = ", ".join("--" + str(k).replace("_", "-") for k in settings[name])
            raise ConfigError(f"settings for algorithm '{name}' ({flags}) given, but '{name}' is not in "
                              f"--algos {','.join(algos)}")
    configs = []
    for algo in algos:
        cls = get_algorithm(algo)
        own = {**cls.config_defaults, **cls.dataset_defaults.get(dataset, {})}
        learning = {k: v for k, v in paper.items() if k not in DATA_DEFINING and k not in own}
        mine = {k: v for k, v in settings.items() if k not in ALGORITHMS or k == algo}  # only its own knobs
        for seed in seeds:
            data = {**learning, **mine, **shared, "algo": algo, "seed": seed, "name": f"{algo}-s{seed}",
                    "out": str(out_dir / "runs")}
            configs.append(validate(from_dict(data)))
    return configs


def compare(configs: list[Config], out_dir: Path, target: float = 0.8, parallel: int | None = None) -> list[dict]:
    """Run every config on one Ray, as many at once as the cluster holds (``parallel``
    overrides), then write the tables and plots. Results do not depend on how many ran at
    once: each run's seed fixes its data, profiles, selection and initial model."""
    import dataclasses
    import os
    from concurrent.futures import ThreadPoolExecutor

    import ray

    from raysfl.api import run
    from raysfl.plots import plot_runs
    from raysfl.runtime.placement import shutdown_ray

    out_dir.mkdir(parents=True, exist_ok=True)
    for cfg in configs:
        if (out_dir / "runs" / cfg.name).exists():
            raise ConfigError(f"{out_dir / 'runs' / cfg.name} already exists; give compare a new --out")
    # a local Ray: as many runs at once as the machine's cores hold, or the number asked for
    started = start_local_ray(configs, runs_at_once(configs, float(os.cpu_count() or 1), float(_local_gpus()),
                                                    parallel))
    try:
        have = ray.cluster_resources()
        at_once = runs_at_once(configs, have.get("CPU", 0.0), have.get("GPU", 0.0), parallel)
        print(f"compare: {len(configs)} runs, {at_once} at a time", flush=True)

        def one(i: int, cfg: Config) -> Path:
            print(f"compare: run {i + 1}/{len(configs)}: {cfg.algo}, seed {cfg.seed}", flush=True)
            return run(cfg).run_dir

        if at_once == 1:
            dirs = [one(i, cfg) for i, cfg in enumerate(configs)]
        else:  # interleaved progress bars would be unreadable
            configs = [dataclasses.replace(cfg, progress=False) for cfg in configs]
            with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="raysfl-compare") as pool:
                dirs = list(pool.map(one, range(len(configs)), configs))
    finally:
        if started:
            shutdown_ray()
    rows = summarise(dirs, out_dir, target)
    plot_runs(dirs, out_dir)
    return rows


def shared_settings(run_dirs: list[Path]) -> str:
    """The data-defining settings every run shares: the figures' caption (:func:`raysfl.plots.group_runs`)."""
    from raysfl.plots import group_runs, load_runs

    return group_runs(load_runs(run_dirs, []), [])[1]


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def to_target(rows: list[dict], target: float) -> tuple[int, float, float] | None:
    """(round, simulated seconds, bytes sent up + down) when the test accuracy of metrics
    ``rows`` first reaches ``target``; None if it never does."""
    sent = 0.0
    for r in rows:
        sent += r["bytes_up"] + r["bytes_down"]
        if r["test_accuracy"] == r["test_accuracy"] and r["test_accuracy"] >= target:
            return r["round"], r["sim_time_total_s"], sent
    return None


def run_rows(run_dir: Path, target: float) -> dict:
    """One run's figures from its metrics.parquet and config.json."""
    cfg = json.loads((Path(run_dir) / "config.json").read_text())
    rows = pq.read_table(Path(run_dir) / "metrics.parquet").to_pylist()
    ev = [r for r in rows if r["test_accuracy"] == r["test_accuracy"]]
    sent = float(sum(r["bytes_up"] + r["bytes_down"] for r in rows))
    hit = to_target(rows, target)
    nan = float("nan")
    return {"algo": cfg["algo"], "seed": cfg["seed"], "run_dir": str(run_dir), "rounds": len(rows),
            "final_accuracy": ev[-1]["test_accuracy"] if ev else nan,
            "rounds_to_target": hit[0] if hit else None, "sim_s_to_target": hit[1] if hit else None,
            "bytes_to_target": hit[2] if hit else None, "total_bytes": sent,
            "sim_time_total_s": rows[-1]["sim_time_total_s"] if rows else nan,
            "participants": statistics.mean(r["participants"] for r in rows) if rows else nan,
            "fallbacks": sum(r.get("fallbacks", 0) for r in rows), "failures": sum(r.get("failures", 0) for r in rows)}


def _mean(values) -> float | None:
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.mean(vals) if vals else None


def summarise(run_dirs: list[Path], out_dir: Path, target: float) -> list[dict]:
    """results.md / results.parquet (per algorithm) and runs.parquet (per run)."""
    per_run = [run_rows(d, target) for d in run_dirs]
    pq.write_table(pa.Table.from_pylist(per_run), out_dir / "runs.parquet")
    out = []
    for algo in dict.fromkeys(r["algo"] for r in per_run):
        rs = [r for r in per_run if r["algo"] == algo]
        accs = [r["final_accuracy"] for r in rs]
        out.append({"algo": algo, "seeds": len(rs), "final_accuracy_mean": statistics.mean(accs),
                    "final_accuracy_std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
                    "reached_target": sum(r["rounds_to_target"] is not None for r in rs),
                    "rounds_to_target": _mean(r["rounds_to_target"] for r in rs),
                    "sim_s_to_target": _mean(r["sim_s_to_target"] for r in rs),
                    "bytes_to_target": _mean(r["bytes_to_target"] for r in rs),
                    "total_bytes": statistics.mean(r["total_bytes"] for r in rs),
                    "participants": statistics.mean(r["participants"] for r in rs),
                    "fallbacks": sum(r["fallbacks"] for r in rs), "failures": sum(r["failures"] for r in rs)})
    pq.write_table(pa.Table.from_pylist(out), out_dir / "results.parquet")
    (out_dir / "results.md").write_text(results_markdown(out, target, shared_settings(run_dirs)))
    return out


def results_markdown(rows: list[dict], target: float, shared: str = "") -> str:
    def f(v, spec):
        return "—" if v is None else format(v, spec)

    lines = [f"| algorithm | seeds | clients / round | final accuracy | reached {target:.0%} | rounds to {target:.0%} | "
             f"simulated s to {target:.0%} | MB to {target:.0%} | total MB | fallbacks | failures |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mb_t = None if r["bytes_to_target"] is None else r["bytes_to_target"] / 1e6
        lines.append(f"| {r['algo']} | {r['seeds']} | {r['participants']:.1f} | "
                     f"{r['final_accuracy_mean']:.4f} ± {r['final_accuracy_std']:.4f} | "
                     f"{r['reached_target']}/{r['seeds']} | {f(r['rounds_to_target'], '.1f')} | "
                     f"{f(r['sim_s_to_target'], '.1f')} | {f(mb_t, '.2f')} | {r['total_bytes'] / 1e6:.2f} | "
                     f"{r['fallbacks']} | {r['failures']} |")
    settings = f"Shared settings (as the figures' caption): {shared}.\n\n" if shared else ""
    return (settings + "\n".join(lines)
            + "\n\nMeans over seeds; the target columns average the seeds that reached it.\n")
