"""Running one experiment, start to finish: the run directory, the data and its partition, the
device profiles, the algorithm's set-up, Ray and the actors, then the rounds
(:func:`raysfl.runtime.rounds.run_round`) until ``--rounds``, resuming from the newest
checkpoint when asked.

Run directory: ``config.json``, ``clients.json``, ``placement.json``, ``metrics.parquet``,
``clients.parquet``, ``tb/``, ``checkpoints/`` (and ``calibration.json`` for algorithms that
measure their clients).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from raysfl import checkpoint
from raysfl.algorithms import get_algorithm
from raysfl.algorithms.base import FederationContext
from raysfl.errors import ConfigError, RunFailed
from raysfl.metrics import RunLogger


def run_experiment(cfg) -> tuple[Path, list[dict]]:
    """Run (or resume, if ``cfg.resume`` is set) the validated config ``cfg``; return the run
    directory and its metrics rows."""
    from raysfl.data import hold_out, label_histograms, load_dataset, partition
    from raysfl.devices import sample_profiles
    from raysfl.faults import parse_faults
    from raysfl.models import build_model
    from raysfl.runtime.rounds import Experiment, new_counters

    if cfg.resume:
        run_dir = Path(cfg.resume)
        state = checkpoint.load_latest(run_dir, cfg.to_dict())
    else:
        run_dir, state = _new_run_dir(cfg), None
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    stages = StartupClock(run_dir, cfg.progress)
    ds = load_dataset(cfg.dataset, cfg.data_root, cfg.download)
    parts = partition(ds.y_train, cfg.clients, cfg.partition, alpha=cfg.alpha,
                      classes_per_client=cfg.classes_per_client, shards_per_client=cfg.shards_per_client,
                      quantity_skew=cfg.quantity_skew or None, seed=cfg.seed)
    parts, local_tests = hold_out(parts, cfg.local_test_fraction, cfg.seed)  # --local-test-fraction
    profiles = sample_profiles(cfg.clients, cfg.devices, cfg.seed)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
    ctx = FederationContext(num_clients=cfg.clients, num_blocks=model.num_blocks, valid_cuts=model.valid_cuts(),
                            sizes=np.array([len(p) for p in parts]),
                            histograms=label_histograms(ds.y_train, parts, ds.num_classes), profiles=profiles,
                            block_flops=model.block_flops(), conv_blocks=model.leading_conv_blocks())
    algo = get_algorithm(cfg.algo)(cfg)
    algo.setup(ctx)
    stages.done("setup", f"{cfg.dataset} ({ds.num_train} training samples) split among {cfg.clients} clients "
                         f"({cfg.partition}); model {cfg.model} ({model.num_blocks} blocks); {cfg.algo} set up")
    if not algo.wants_calibration():
        write_clients(run_dir, ctx, algo)

    start = state["round"] if state else 0
    if start >= cfg.rounds:
        raise ConfigError(f"run '{run_dir}' already finished {start} rounds; pass --rounds > {start} to continue")
    logger = RunLogger(run_dir, start_round=start, progress=cfg.progress, total_rounds=cfg.rounds)
    exp = Experiment(cfg, algo, ds, parts, ctx, run_dir, logger, local_tests=local_tests,
                     faults=parse_faults(cfg.faults),
                     counters=state["counters"] if state else new_counters())
    try:
        if algo.protocol.distributed:
            _run_federated(exp, state, stages)
        else:
            from raysfl.runtime.centralized import run_centralized

            run_centralized(exp, state)
    finally:
        logger.close()
    return run_dir, logger.rows


def _new_run_dir(cfg) -> Path:
    name = cfg.name or f"{cfg.algo}-{cfg.dataset}-{cfg.model}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    base = Path(cfg.out) / name
    d, i = base, 1
    while d.exists():
        d, i = Path(f"{base}-{i}"), i + 1
    d.mkdir(parents=True)
    return d


def write_clients(run_dir: Path, ctx: FederationContext, algo) -> None:
    """clients.json: each client's data, device profile and the algorithm's facts about it."""
    (run_dir / "clients.json").write_text(json.dumps([
        {"client": k, "samples": int(ctx.sizes[k]), "label_histogram": ctx.histograms[k].tolist(),
         "device": ctx.profiles[k].to_dict(), **algo.client_info(k)} for k in range(ctx.num_clients)], indent=1) + "\n")


def calibrate(exp, fed) -> None:
    """Measured (memory, latency) per client, once per run: kept in calibration.json so a
    resumed run uses the same numbers (and so the same split points)."""
    path = exp.run_dir / "calibration.json"
    if path.is_file():
        profile = {int(k): tuple(v) for k, v in json.loads(path.read_text()).items()}
    else:
        print("raysfl: measuring client devices (memory, latency to the server) ...", flush=True)
        profile = fed.measure(exp.cfg.batch_size)
        path.write_text(json.dumps({str(k): list(v) for k, v in profile.items()}, indent=1) + "\n")
    exp.algo.calibrate(profile)
    write_clients(exp.run_dir, exp.ctx, exp.algo)


def _run_federated(exp, state: dict | None, stages: "StartupClock") -> None:
    """Start Ray (unless the caller did) and the actors, then run the rounds; a failure Ray
    reports (an actor dead for good, the cluster gone) ends the run with the rounds done so far
    kept and the command that resumes it."""
    import ray

    from raysfl.runtime.federation import Federation
    from raysfl.runtime.placement import check_capacity, fit_resources, init_ray
    from raysfl.runtime.rounds import run_round

    cfg, algo = exp.cfg, exp.algo
    num_actors = cfg.resources.num_client_actors(cfg.clients)
    started = init_ray(cfg, num_actors, algo.protocol.servers)
    fed = None
    try:
        cpus = ray.cluster_resources().get("CPU", 0.0)
        stages.done("ray", f"Ray up ({'started here' if started else 'joined'}, {cpus:g} CPUs)")
        # CPU shares the user left unset: sized to what the cluster has free
        cfg = fit_resources(cfg, num_actors, algo.protocol.servers, ray.available_resources().get("CPU", 0.0))
        if not os.environ.get("RAY_ADDRESS"):  # a Ray of this process: it will not grow. A job on a
            # cluster (RAY_ADDRESS set) may autoscale: the placement groups wait for it instead
            check_capacity(cfg, num_actors, algo.protocol.servers)
        fed = Federation(cfg, algo, exp.ds, exp.parts, num_actors, exp.ctx.block_flops, run_name=exp.run_dir.name,
                         local_tests=exp.local_tests, histograms=exp.ctx.histograms)
        servers = algo.protocol.servers
        stages.done("actors", f"{num_actors + servers + 1} actors ready ({num_actors} client actors hosting "
                              f"{cfg.clients} clients, {servers} server{'s' * (servers != 1)}, 1 fed server)")
        (exp.run_dir / "placement.json").write_text(json.dumps(fed.placement(), indent=1))
        if algo.wants_calibration():
            calibrate(exp, fed)
        fed.warm_up()
        stages.done("warm_up", "warm-up (every actor's first forward/backward)")
        start = rnd = state["round"] if state else 0
        try:
            if state:
                fed.load_state(state["federation"])
            fed.snapshot = state["federation"] if state else fed.get_state()
            stages.done("state", f"{'resumed at round ' + str(start) if state else 'initial model'} in place; "
                                 f"rounds {start + 1}..{cfg.rounds} to go")
            stages.write()
            for rnd in range(start + 1, cfg.rounds + 1):
                run_round(exp, fed, rnd)
        except ray.exceptions.RayError as e:  # an actor died for good, the cluster went away, ...
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            rows = exp.logger.rows
            done = rows[-1]["round"] if rows else 0
            raise RunFailed(f"round {rnd} failed ({type(e).__name__}: {first}); metrics of rounds 1..{done} "
                            f"are in {exp.run_dir}; continue from its last checkpoint with --resume {exp.run_dir}"
                            ) from e
    finally:
        if fed is not None:
            fed.shutdown()
        if started:
            ray.shutdown()


class StartupClock:
    """The start-up stages of a run, timed: printed as they finish (with --progress) and kept
    in the run directory's ``startup.json`` (seconds per stage, and in all), so that round 1's
    ``wall_time_s`` is training only."""

    def __init__(self, run_dir: Path, verbose: bool):
        self.run_dir, self.verbose = Path(run_dir), verbose
        self.t0 = self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def done(self, stage: str, text: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = round(now - self.last, 3)
        self.last = now
        if self.verbose:
            print(f"raysfl: {text} in {self.seconds[stage]:.1f} s", file=sys.stderr, flush=True)

    def write(self) -> None:
        total = round(self.last - self.t0, 3)
        (self.run_dir / "startup.json").write_text(json.dumps({**self.seconds, "total": total}, indent=1) + "\n")
