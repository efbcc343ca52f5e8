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

The comparison directory holds ``compare.json`` (every run's resolved config),
``runs/<algo>-s<seed>/`` (every run's own directory), ``results.md`` and ``results.parquet``
(one row per algorithm), ``runs.parquet`` (one row per run) and the PNGs of :mod:`raysfl.plots`.

An interrupted comparison (SIGINT, SIGTERM) writes the table of the runs that finished, marked
partial; the same command into the same directory continues it: the finished runs are reused
(known by their resolved config, :func:`raysfl.run_key.cache_key`), a run with a checkpoint
continues from it (``--resume``: it ends as it would have uninterrupted), the others run, and
the whole table is written. Another comparison into that directory is refused
(docs/reliability.md, "Signals").
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from raysfl.config import DATA_DEFINING, RUN_DEFAULTS, Config
from raysfl.errors import ConfigError, first_line
from raysfl.runtime.many_runs import runs_at_once, start_local_ray
from raysfl.whole_files import write_text


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
    once: each run's seed fixes its data, profiles, selection and initial model.

    Into a directory an earlier compare of the same runs left (``compare.json``; an interrupted
    one), the runs it finished are reused, those with a checkpoint continue from it and the rest
    run (:func:`earlier_runs`); another comparison there is refused. On SIGINT or SIGTERM the
    runs stop (in threads, after their round in flight), the table of the finished ones is
    written marked partial, and :class:`~raysfl.runtime.interrupts.Interrupted` is raised with
    ``raysfl_compare``: what finished, in words."""
    import dataclasses
    import os
    import shutil
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import ray

    from raysfl.api import run
    from raysfl.plots import plot_runs
    from raysfl.runtime import interrupts
    from raysfl.runtime.placement import shutdown_ray

    out_dir.mkdir(parents=True, exist_ok=True)
    earlier = earlier_runs(configs, out_dir)  # another comparison here: refused before anything is written
    write_plan(configs, out_dir)
    runs = out_dir / "runs"
    todo = [cfg for cfg in configs if not earlier[cfg.name].finished(cfg)]
    stop = threading.Event()  # set on a signal: runs in threads stop after their round in flight
    with interrupts.handling():
        try:
            if len(todo) < len(configs) or any(e.exists for e in earlier.values()):
                print(f"compare: continuing {out_dir}: {len(configs) - len(todo)} of {len(configs)} runs finished "
                      f"before (reused), {sum(earlier[c.name].checkpoint > 0 for c in todo)} continue from their "
                      f"checkpoints", flush=True)
            started = False
            try:
                # a local Ray: as many runs at once as the machine's cores hold, or the number asked for
                started = bool(todo) and start_local_ray(todo, runs_at_once(todo, float(os.cpu_count() or 1),
                                                                            float(_local_gpus()), parallel))
                have = ray.cluster_resources() if todo else {}
                at_once = runs_at_once(todo, have.get("CPU", 0.0), have.get("GPU", 0.0), parallel) if todo else 1
                print(f"compare: {len(configs)} runs, {at_once} at a time", flush=True)

                def one(i: int, cfg: Config) -> Path | None:
                    if stop.is_set():
                        return None
                    before, run_dir = earlier[cfg.name], runs / cfg.name
                    print(f"compare: run {i + 1}/{len(configs)}: {cfg.algo}, seed {cfg.seed}{before.how(cfg)}",
                          flush=True)
                    if before.finished(cfg):
                        return run_dir
                    if before.checkpoint:
                        cfg = dataclasses.replace(cfg, resume=str(run_dir))
                    elif before.exists:  # nothing to continue from: the run again, from its start
                        shutil.rmtree(run_dir)
                    return run(cfg, callbacks=[lambda row: stop.is_set()]).run_dir

                if at_once == 1:
                    dirs = [one(i, cfg) for i, cfg in enumerate(configs)]
                else:  # interleaved progress bars would be unreadable
                    configs = [dataclasses.replace(cfg, progress=False) for cfg in configs]
                    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="raysfl-compare")
                    try:
                        futures = [pool.submit(one, i, cfg) for i, cfg in enumerate(configs)]
                        dirs = [f.result() for f in futures]
                    finally:  # done, failed or interrupted: the runs in flight end their round, checkpointed
                        stop.set()
                        with interrupts.held():
                            pool.shutdown(wait=True)
            finally:
                if started:
                    shutdown_ray()
            rows = summarise(dirs, out_dir, target)
            plot_runs(dirs, out_dir)
            return rows
        except KeyboardInterrupt as e:  # SIGINT or SIGTERM (runtime/interrupts.py): the finished runs' table
            stop.set()
            try:
                with interrupts.held():  # a second signal does not cut the table short
                    e.raysfl_compare = write_partial(configs, out_dir, target)
            except KeyboardInterrupt:
                pass
            except Exception as err:  # noqa: BLE001 - the interrupt is what is reported; the runs are kept
                first = first_line(err, 160)
                e.raysfl_compare = f"the finished runs' table could not be written ({first})"
            raise


@dataclass(frozen=True)
class Earlier:
    """What an earlier compare into the same directory left of one run: whether its directory
    exists, the rounds in its ``metrics.parquet`` and its newest checkpoint's round."""

    exists: bool = False
    rounds: int = 0
    checkpoint: int = 0

    def finished(self, cfg: Config) -> bool:
        return self.rounds >= cfg.rounds

    def how(self, cfg: Config) -> str:
        """How the run goes on, for its progress line ("" for a run not started before)."""
        if self.finished(cfg):
            return ": reused (finished before)"
        if self.checkpoint:
            return f": continued from its checkpoint of round {self.checkpoint}"
        return ": started again (nothing to continue from)" if self.exists else ""


PLAN = "compare.json"  # the comparison's runs ({name: resolved config}): what a later compare here must match


def _key(cfg_dict: dict) -> str:
    """The run key (:func:`raysfl.run_key.cache_key`) of a resolved config as ``to_dict`` or a
    run's ``config.json`` has it."""
    import copy

    from raysfl.resolve import from_dict, validate
    from raysfl.run_key import cache_key

    return cache_key(validate(from_dict(copy.deepcopy(cfg_dict))))


def write_plan(configs: list[Config], out_dir: Path) -> None:
    """``compare.json``: every run's resolved config (written atomically, before any run)."""
    runs = {c.name: c.to_dict() for c in configs}
    write_text(out_dir / PLAN, json.dumps({"runs": runs}, indent=1, default=str) + "\n")


def _difference(there: dict, here: dict) -> str:
    """The first setting two runs' resolved configs differ in, in words."""
    from raysfl.run_key import BOOKKEEPING

    here = json.loads(json.dumps(here, default=str))  # as a file has it: tuples as lists
    for k in sorted(set(there) | set(here)):
        if k in BOOKKEEPING or k in ("resources", "resume", "plugins") or there.get(k) == here.get(k):
            continue
        return f"{k} {there.get(k)!r} there, {here.get(k)!r} here"
    return "settings differ"


def _names(names) -> str:
    names = sorted(names)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def earlier_runs(configs: list[Config], out_dir: Path) -> dict[str, Earlier]:
    """{run name: what an earlier compare into ``out_dir`` left of it}. A run is known by its
    resolved config (:func:`raysfl.run_key.cache_key`, the key of ``raysfl reproduce``'s run
    cache): the earlier comparison's ``compare.json`` must list the same runs with the same
    keys, and every run directory under ``runs/`` must be one of them, its ``config.json``
    of the same key; otherwise a ConfigError (one line, naming the first difference). A
    directory an older raysfl left without ``compare.json`` is checked by its runs alone."""
    from raysfl.api import saved_config
    from raysfl.checkpoint import rounds_saved

    planned = {c.name: c for c in configs}
    fix = "give compare a new --out, or repeat that comparison's own command to finish it"
    plan = out_dir / PLAN
    if plan.exists():
        try:
            recorded = json.loads(plan.read_text())["runs"]
            assert isinstance(recorded, dict)
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            raise ConfigError(f"{plan} is unreadable, so what ran in {out_dir} is unknown; give compare a new "
                              f"--out") from None
        if set(recorded) != set(planned):
            raise ConfigError(f"{out_dir} holds another comparison (its runs: {_names(recorded)}; this one's: "
                              f"{_names(planned)}); {fix}")
        for name, cfg in planned.items():
            there = recorded[name]
            try:
                same = isinstance(there, dict) and _key(there) == _key(cfg.to_dict())
            except ConfigError:
                same = False
            if not same:
                why = _difference(there, cfg.to_dict()) if isinstance(there, dict) else "unreadable"
                raise ConfigError(f"{out_dir} holds another comparison (run {name}: {why}); {fix}")
    runs = out_dir / "runs"
    found = {d.name: d for d in runs.iterdir() if d.is_dir()} if runs.is_dir() else {}
    foreign = [n for n in found if n not in planned]
    if foreign:
        raise ConfigError(f"{runs} holds runs this comparison does not make ({_names(foreign)}); {fix}")
    out = {}
    for name, cfg in planned.items():
        d = found.get(name)
        if d is None:
            out[name] = Earlier()
            continue
        if not (d / "config.json").is_file():
            if d.is_dir() and not any(d.iterdir()):  # made, and interrupted before its config was written
                d.rmdir()
                out[name] = Earlier()
                continue
            raise ConfigError(f"{d} is not a run (no config.json in it); move it away, or {fix}")
        there = saved_config(d)
        try:
            same = _key(there) == _key(cfg.to_dict())
        except ConfigError:
            same = False
        if not same:
            raise ConfigError(f"{d} was made with other settings ({_difference(there, cfg.to_dict())}); {fix}")
        try:
            rows = pq.read_table(d / "metrics.parquet", columns=["round"]).column("round").to_pylist()
        except Exception:  # noqa: BLE001 - missing or damaged: no finished round to read
            rows = []
        out[name] = Earlier(True, max(rows, default=0), max(rounds_saved(d), default=0))
    return out


def write_partial(configs: list[Config], out_dir: Path, target: float) -> str:
    """After an interrupt: the table of the runs that finished, marked partial (none: no table);
    returns what finished, in words (the interrupt's line)."""
    earlier = earlier_runs(configs, out_dir)
    done = [c for c in configs if earlier[c.name].finished(c)]
    text = f"{len(done)} of {len(configs)} runs finished"
    if not done:
        return text
    left = [c.name for c in configs if not earlier[c.name].finished(c)]
    todo = f"still to run: {_names(left)}" if left else "its plots not drawn"
    note = (f"**Partial**: the comparison was interrupted; {text}, {todo}. The same command with --out {out_dir} "
            f"finishes it, reusing these.")
    summarise([out_dir / "runs" / c.name for c in done], out_dir, target, note=note)
    return f"{text} (their table, marked partial: {out_dir / 'results.md'})"


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


def summarise(run_dirs: list[Path], out_dir: Path, target: float, note: str = "") -> list[dict]:
    """results.md / results.parquet (per algorithm) and runs.parquet (per run); ``note``: a
    paragraph above the table (a partial table says so)."""
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
    (out_dir / "results.md").write_text((note + "\n\n" if note else "")
                                        + results_markdown(out, target, shared_settings(run_dirs)))
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
