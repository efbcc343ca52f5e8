"""The Python API: ``raysfl.run(Config(...))`` runs one experiment end to end.

It validates the config (before Ray starts), prepares the run directory
(``config.json``, ``metrics.parquet``, ``clients.parquet``, ``tb/``, ``checkpoints/``),
loads and partitions the data, samples device profiles, and drives the rounds.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raysfl import checkpoint
from raysfl.algorithms import get_algorithm
from raysfl.algorithms.base import FederationContext
from raysfl.config import Config
from raysfl.errors import ConfigError, RunFailed
from raysfl.metrics import RunLogger
from raysfl.resolve import from_dict, validate

# Settings a resumed run may change (plus the ``resources`` section); everything else must
# match the original run.
RESUMABLE_OVERRIDES = {"rounds", "progress", "checkpoint_every", "eval_every", "resume", "out", "name"}


@dataclass
class RunResult:
    run_dir: Path
    metrics: list[dict]

    @property
    def final(self) -> dict:
        return self.metrics[-1]


def _run_dir(cfg: Config) -> Path:
    name = cfg.name or f"{cfg.algo}-{cfg.dataset}-{cfg.model}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    base = Path(cfg.out) / name
    d, i = base, 1
    while d.exists():
        d, i = Path(f"{base}-{i}"), i + 1
    d.mkdir(parents=True)
    return d


def resume_config(run_dir: str | Path, overrides: dict | None = None) -> Config:
    """The config of an existing run, with the few settings a resume may change."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"cannot resume '{run_dir}': no config.json in it")
    data = json.loads(path.read_text())
    algo_params = data.pop("algo_params", {}) or {}
    data[data["algo"]] = algo_params
    overrides = dict(overrides or {})
    # Where actors run does not change what they compute: resources may change on resume.
    data["resources"] = {**data.get("resources", {}), **overrides.pop("resources", {})}
    for k, v in overrides.items():
        if k not in RESUMABLE_OVERRIDES and data.get(k) != v:
            raise ConfigError(f"cannot change '{k}' when resuming (it was {data.get(k)!r}); "
                              f"allowed: {', '.join(sorted(RESUMABLE_OVERRIDES - {'resume'}))}")
    data.update({k: v for k, v in overrides.items() if k in RESUMABLE_OVERRIDES})
    cfg = from_dict(data)
    cfg.resume = str(run_dir)
    return cfg


def run(cfg: Config) -> RunResult:
    """Run (or resume, if ``cfg.resume`` is set) one experiment and return its metrics."""
    from raysfl.data import label_histograms, load_dataset, partition
    from raysfl.devices import sample_profiles
    from raysfl.models import build_model

    cfg = validate(cfg)
    if cfg.resume:
        run_dir = Path(cfg.resume)
        state = checkpoint.load_latest(run_dir, cfg.to_dict())
    else:
        run_dir, state = _run_dir(cfg), None
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    ds = load_dataset(cfg.dataset, cfg.data_root, cfg.download)
    parts = partition(ds.y_train, cfg.clients, cfg.partition, alpha=cfg.alpha,
                      classes_per_client=cfg.classes_per_client, shards_per_client=cfg.shards_per_client,
                      quantity_skew=cfg.quantity_skew or None, seed=cfg.seed)
    profiles = sample_profiles(cfg.clients, cfg.devices, cfg.seed)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
    ctx = FederationContext(num_clients=cfg.clients, num_blocks=model.num_blocks, valid_cuts=model.valid_cuts(),
                            sizes=np.array([len(p) for p in parts]),
                            histograms=label_histograms(ds.y_train, parts, ds.num_classes), profiles=profiles,
                            block_flops=model.block_flops())
    algo = get_algorithm(cfg.algo)(cfg)
    algo.setup(ctx)
    if not algo.wants_calibration():
        _write_clients(run_dir, ctx, algo)

    start = state["round"] if state else 0
    if start >= cfg.rounds:
        raise ConfigError(f"run '{run_dir}' already finished {start} rounds; pass --rounds > {start} to continue")
    logger = RunLogger(run_dir, start_round=start, progress=cfg.progress, total_rounds=cfg.rounds)
    try:
        if algo.distributed:
            _run_federated(cfg, algo, ds, parts, ctx, run_dir, logger, state)
        else:
            from raysfl.runtime.centralized import run_centralized

            run_centralized(cfg, algo, ds, parts, ctx, run_dir, logger, state)
    finally:
        logger.close()
    return RunResult(run_dir, logger.rows)


def _write_clients(run_dir: Path, ctx: FederationContext, algo) -> None:
    """clients.json: each client's data, device profile and the algorithm's facts about it."""
    (run_dir / "clients.json").write_text(json.dumps([
        {"client": k, "samples": int(ctx.sizes[k]), "label_histogram": ctx.histograms[k].tolist(),
         "device": ctx.profiles[k].to_dict(), **algo.client_info(k)} for k in range(ctx.num_clients)], indent=1) + "\n")


def _calibrate(cfg, algo, fed, ctx, run_dir: Path) -> None:
    """Measured (memory, latency) per client, once per run: kept in calibration.json so a
    resumed run uses the same numbers (and so the same split points)."""
    path = run_dir / "calibration.json"
    if path.is_file():
        profile = {int(k): tuple(v) for k, v in json.loads(path.read_text()).items()}
    else:
        print("raysfl: measuring client devices (memory, latency to the server) ...", flush=True)
        profile = fed.measure(cfg.batch_size)
        path.write_text(json.dumps({str(k): list(v) for k, v in profile.items()}, indent=1) + "\n")
    algo.calibrate(profile)
    _write_clients(run_dir, ctx, algo)


def _run_federated(cfg, algo, ds, parts, ctx, run_dir, logger, state) -> None:
    import ray

    from raysfl.faults import parse_faults
    from raysfl.runtime.driver import Federation
    from raysfl.runtime.placement import check_capacity, init_ray

    num_actors = cfg.resources.num_client_actors(cfg.clients)
    started = init_ray(cfg, num_actors, algo.num_servers if algo.uses_cut else 0)
    fed = None
    try:
        if not os.environ.get("RAY_ADDRESS"):  # a Ray of this process: it will not grow. A job on a
            # cluster (RAY_ADDRESS set) may autoscale: the placement groups wait for it instead
            check_capacity(cfg, num_actors, algo.num_servers if algo.uses_cut else 0)
        fed = Federation(cfg, algo, ds, parts, num_actors, ctx.block_flops, run_name=run_dir.name)
        (run_dir / "placement.json").write_text(json.dumps(fed.placement(), indent=1))
        if algo.wants_calibration():
            _calibrate(cfg, algo, fed, ctx, run_dir)
        counters = {"stream_pos": {}, "sim_total": 0.0, "wall_total": 0.0}
        start = rnd = state["round"] if state else 0
        faults = parse_faults(cfg.faults)
        try:
            if state:
                fed.load_state(state["federation"])
                counters = state["counters"]
            fed.snapshot = state["federation"] if state else fed.get_state()
            for rnd in range(start + 1, cfg.rounds + 1):
                _one_round(cfg, algo, fed, rnd, ctx, counters, logger, run_dir, faults)
        except ray.exceptions.RayError as e:  # an actor died for good, the cluster went away, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            done = logger.rows[-1]["round"] if logger.rows else 0
            raise RunFailed(f"round {rnd} failed ({type(e).__name__}: {first}); metrics of rounds 1..{done} "
                            f"are in {run_dir}; continue from its last checkpoint with --resume {run_dir}") from e
    finally:
        if fed is not None:
            fed.shutdown()
        if started:
            ray.shutdown()


def _one_round(cfg, algo, fed, rnd, ctx, counters, logger, run_dir, faults) -> None:
    """Plan, run (surviving faults), log and checkpoint round ``rnd``.

    A dead client actor or edge server costs only its clients; a dead main server or fed
    server rolls the round back to the last snapshot and retries it (``--max-round-retries``),
    unless the algorithm's clients survive their server (``survives_server_loss``: SuperSFL's
    fallback), in which case the round goes on and the restarted server is restored.
    """
    from raysfl.faults import plan_faults
    from raysfl.runtime.driver import FedServerLost, plan_round

    t0 = time.perf_counter()
    events = {k: 0 for k in EVENT_COLUMNS}
    events["restarts"] += fed.recover()["restarts"]
    plans, server_of = plan_round(cfg, algo, rnd, ctx, counters["stream_pos"])
    rf = plan_faults(faults, rnd, cfg.seed, sorted(plans), fed.num_actors, len(fed.servers))
    down_servers = set(rf.down_servers) | set(algo.servers_down(rnd))
    down = [c for c in plans if server_of.get(c) in down_servers]
    if down:  # their server is unavailable this round: the algorithm decides (default: sit out)
        keep = set(algo.on_server_down(rnd, down))
        events["skipped"] += len(down) - len(keep)
        plans = {c: p for c, p in plans.items() if c not in down or c in keep}
        for c in keep:
            plans[c].local = True  # trains without its server (Algorithm.client_fallback)
    for c, (secs, clock) in rf.delays.items():
        if clock == "real" and c in plans:
            plans[c].delay_s = secs
    sim_delay = {c: secs for c, (secs, clock) in rf.delays.items() if clock == "sim"}
    evaluate = rnd % cfg.eval_every == 0 or rnd == cfg.rounds
    kills = rf.kills
    for attempt in range(cfg.max_round_retries + 1):
        deadline = time.time() + cfg.round_deadline_s if cfg.round_deadline_s else None
        res = fed.run_round(rnd, plans, server_of, kills=kills, deadline=deadline,
                            on_step=lambda d, t: logger.step_progress(rnd, d, t))
        kills = []  # injected faults fire once, not on the retry
        events["failures"] += len(res.dead_clients) + len(res.dead_servers) + int(res.fed_restarted)
        events["restarts"] += res.restarted
        single_server_lost = bool(res.dead_servers) and len(fed.servers) == 1 and not algo.survives_server_loss
        include = _included(cfg, algo, res, ctx, sim_delay)
        try:
            if single_server_lost or res.fed_restarted:
                raise FedServerLost("server" if single_server_lost else "fed server")
            result = fed.finish_round(rnd, include, evaluate)
            events["late_applied"] = fed.late_applied
            break
        except FedServerLost as e:
            if attempt == cfg.max_round_retries:
                raise RunFailed(f"round {rnd}: the {e} died {attempt + 1} times; giving up (raise "
                                f"--max-round-retries or --max-restarts); finished rounds are in {run_dir}") from None
            events["retries"] += 1
            if not (single_server_lost or res.fed_restarted):
                events["failures"] += 1  # the fed server died while aggregating (not counted above)
            events["restarts"] += fed.rollback()
    events["dropped"] = len(res.late | {c for c in res.stats if c not in include and c not in res.failed})
    events["fallbacks"] = sum(1 for st in res.stats.values() if st.fallback_steps)
    bad = sorted(c for c, st in res.stats.items() if st.loss_count and not math.isfinite(st.loss_sum))
    if not bad:  # the state to go back to if a later round fails (a diverged one is not kept)
        fed.snapshot = fed.get_state() if cfg.max_round_retries or (
            cfg.checkpoint_every and (rnd % cfg.checkpoint_every == 0 or rnd == cfg.rounds)) else fed.snapshot
    wall = time.perf_counter() - t0  # the whole round, snapshot included (logging runs on its own thread)
    for c, p in plans.items():
        counters["stream_pos"][c] = p.stream_pos + p.steps * p.batch
    row, client_rows = round_metrics(cfg, algo, rnd, res.stats, ctx, result, wall, counters,
                                     sim_delay=sim_delay, included=set(include), events=events,
                                     server_metrics=res.server_metrics)
    logger.log_round(row, client_rows)
    if bad:  # stop before this round's state reaches a checkpoint; the previous one resumes
        raise RunFailed(f"training diverged: the loss of client(s) {bad[:5]} became NaN/inf in round {rnd} "
                        f"(lr {cfg.lr_at(rnd):g}); lower --lr or --lr-decay; rounds 1..{rnd - 1} are in {run_dir}")
    if cfg.checkpoint_every and (rnd % cfg.checkpoint_every == 0 or rnd == cfg.rounds):
        logger.flush()  # the rounds this checkpoint covers are on disk before it is
        checkpoint.save(run_dir, rnd, {"round": rnd, "counters": counters, "federation": fed.snapshot},
                        cfg.to_dict())


def _included(cfg, algo, res, ctx, sim_delay) -> list[int]:
    """Clients whose update is aggregated: completed, in time on the real and simulated clocks."""
    server_speed = cfg.devices.server_tflops * 1e12
    out = []
    for c, st in sorted(res.stats.items()):
        if c in res.failed or c in res.late:
            continue
        if cfg.sim_deadline_s is not None:
            t = algo.client_sim_time(c, st, ctx.profiles[c], server_speed) + sim_delay.get(c, 0.0)
            if t > cfg.sim_deadline_s:
                continue
        out.append(c)
    return out


EVENT_COLUMNS = ("failures", "restarts", "retries", "dropped", "late_applied", "skipped", "fallbacks")


def round_metrics(cfg, algo, rnd, stats, ctx, result, wall, counters, sim_delay=None, included=None, events=None,
                  server_metrics=None):
    """The metrics.parquet row and clients.parquet rows of one round.

    ``sim_delay``: simulated straggler delay per client; ``included``: clients whose update
    was aggregated (default: all); ``events``: fault counts (EVENT_COLUMNS);
    ``server_metrics``: the servers' recorded figures (``Algorithm.server_metric_names``).
    """
    server_speed = cfg.devices.server_tflops * 1e12
    sim_delay = sim_delay or {}
    included = set(stats) if included is None else included
    client_rows, times = [], []
    for c in sorted(stats):
        st = stats[c]
        t = algo.client_sim_time(c, st, ctx.profiles[c], server_speed) + sim_delay.get(c, 0.0)
        times.append(t)
        tr = st.traffic
        client_rows.append({
            "round": rnd, "client": c, "cut": st.cut, "servers": list(st.servers), "samples": st.samples,
            "steps": st.steps,
            "bytes_up": tr.up, "bytes_down": tr.down, "bytes_smashed_up": tr.smashed_up,
            "bytes_grad_down": tr.grad_down, "bytes_params_up": tr.params_up, "bytes_params_down": tr.params_down,
            "client_flops": st.client_flops, "server_flops": st.server_flops, "sim_time_s": t,
            "train_loss": st.loss_sum / st.loss_count if st.loss_count else float("nan"),
            "delay_s": sim_delay.get(c, 0.0), "failed": bool(st.failed), "included": c in included,
            "fallback_steps": st.fallback_steps, "agg_weight": float(st.agg_weight) if st.agg_weight == st.agg_weight else None,  # null: none set
        })
    sim = algo.round_sim_time(times)
    if cfg.sim_deadline_s is not None:  # the round ends at the deadline at the latest
        sim = min(sim, cfg.sim_deadline_s)
    counters["sim_total"] += sim
    counters["wall_total"] += wall
    loss_n = sum(s.loss_count for s in stats.values())
    nan = float("nan")
    acc, test_loss, extras = result if result is not None else (nan, nan, {})
    row = {
        "round": rnd, "algo": cfg.algo, "test_accuracy": float(acc), "test_loss": float(test_loss),
        "train_loss": sum(s.loss_sum for s in stats.values()) / loss_n if loss_n else float("nan"),
        "participants": len(stats),
        "bytes_up": sum(r["bytes_up"] for r in client_rows),
        "bytes_down": sum(r["bytes_down"] for r in client_rows),
        "bytes_smashed_up": sum(r["bytes_smashed_up"] for r in client_rows),
        "bytes_grad_down": sum(r["bytes_grad_down"] for r in client_rows),
        "bytes_params_up": sum(r["bytes_params_up"] for r in client_rows),
        "bytes_params_down": sum(r["bytes_params_down"] for r in client_rows),
        "client_flops": sum(r["client_flops"] for r in client_rows),
        "server_flops": sum(r["server_flops"] for r in client_rows),
        "sim_time_s": sim, "sim_time_total_s": counters["sim_total"],
        "wall_time_s": wall, "wall_time_total_s": counters["wall_total"],
        "completed": len(included & set(stats)),
        "fallback_steps": sum(s.fallback_steps for s in stats.values()),
        **{k: int((events or {}).get(k, 0)) for k in EVENT_COLUMNS},
    }
    row.update(algo.round_info(rnd))
    row.update({k: float((server_metrics or {}).get(k, nan)) for k in algo.server_metric_names()})
    row.update({k: float(extras.get(k, nan)) for k in algo.eval_metric_names()})
    return row, client_rows


def config_from_kwargs(**kwargs) -> Config:
    """Build a Config from keyword settings, e.g. ``config_from_kwargs(algo="psl", rounds=3)``."""
    return from_dict(kwargs)


__all__ = ["Config", "RunResult", "run", "resume_config", "config_from_kwargs"]
