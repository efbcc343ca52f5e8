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
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raysfl import checkpoint
from raysfl.algorithms import get_algorithm
from raysfl.algorithms.base import FederationContext
from raysfl.errors import ConfigError, RunFailed
from raysfl.metrics import RunLogger


@dataclass
class Prepared:
    """What a run computes before any actor starts, from its config alone (and the seed):
    the data and its partition, the device profiles, the initial model, the set-up algorithm."""

    ds: object                 # raysfl.data.DatasetArrays
    parts: list                # each client's training indices
    local_tests: list          # each client's local test indices (--local-test-fraction)
    model: object              # the initial raysfl.models.SplitModel (every actor starts from a copy)
    ctx: FederationContext
    algo: object               # the algorithm instance, set up


def prepare(cfg) -> Prepared:
    """Load and partition the data, sample the device profiles, build the model once (its
    shapes and FLOPs) and set the algorithm up (``algo.setup``), as the run does; also used
    to rebuild a finished run's algorithm (``raysfl.api.load_run``)."""
    from raysfl.data import hold_out, label_histograms, load_dataset, partition
    from raysfl.devices import sample_profiles
    from raysfl.models import build_model

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
    return Prepared(ds, parts, local_tests, model, ctx, algo)


def run_experiment(cfg, callbacks=None) -> tuple[Path, list[dict], "object", "object", bool]:
    """Run (or resume, if ``cfg.resume`` is set) the validated config ``cfg``; return the run
    directory, its metrics rows, the set-up algorithm, the initial model and whether a
    callback stopped the run early (``callbacks``: :class:`raysfl.callbacks.Callbacks`)."""
    from raysfl.callbacks import Callbacks
    from raysfl.faults import parse_faults
    from raysfl.runtime.rounds import Experiment, new_counters

    callbacks = callbacks if isinstance(callbacks, Callbacks) else Callbacks(callbacks)
    if cfg.mlflow is not None:  # --mlflow URI: the MLflow tracker, as if passed as a callback
        from raysfl.trackers import MLflowLogger

        callbacks.items.append(MLflowLogger(cfg.mlflow))
    if cfg.resume:
        run_dir = Path(cfg.resume)
        state = checkpoint.load_latest(run_dir, cfg.to_dict())
    else:
        run_dir, state = _new_run_dir(cfg), None
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    p = prepare(cfg)
    if state:
        check_same_model(state, p.model, run_dir)
    if not p.algo.wants_calibration():
        write_clients(run_dir, p.ctx, p.algo)

    start = state["round"] if state else 0
    if start >= cfg.rounds:
        raise ConfigError(f"run '{run_dir}' already finished {start} rounds; pass --rounds > {start} to continue")
    logger = RunLogger(run_dir, start_round=start, progress=cfg.progress, total_rounds=cfg.rounds, config=cfg.to_dict())
    exp = Experiment(cfg, p.algo, p.ds, p.parts, p.ctx, run_dir, logger, local_tests=p.local_tests,
                     faults=parse_faults(cfg.faults),
                     counters=state["counters"] if state else new_counters(), model=p.model, callbacks=callbacks)
    error = None
    try:
        callbacks.start(run_dir, cfg.to_dict())
        if p.algo.protocol.distributed:
            _run_federated(exp, state)
        else:
            from raysfl.runtime.centralized import run_centralized

            run_centralized(exp, state)
    except BaseException as e:
        error = e
        raise
    finally:
        try:
            logger.close(stopped=exp.stopped)
        finally:
            callbacks.end(run_dir, logger.rows, error)
    return run_dir, logger.rows, p.algo, p.model, exp.stopped


def check_same_model(state: dict, model, run_dir: Path) -> None:
    """A resumed run's model has the checkpoint's parameter names and shapes (your own model
    given again may not)."""
    saved = state["federation"]["fed"]["global"] if "federation" in state else state.get("model", {})
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(np.shape(v)) for k, v in saved.items()}
    diff = sorted(k for k in have if got.get(k) != have[k])
    if diff:
        raise ConfigError(f"the model does not match the checkpoint of '{run_dir}' (first difference: "
                          f"{diff[0]}); resume with the model the run started with")


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


def _run_federated(exp, state: dict | None) -> None:
    """Start Ray (unless the caller did) and the actors, then run the rounds; a failure Ray
    reports (an actor dead for good, the cluster gone) ends the run with the rounds done so far
    kept and the command that resumes it."""
    import ray

    from raysfl.runtime.federation import Federation
    from raysfl.runtime.placement import check_capacity, init_ray
    from raysfl.runtime.rounds import run_round, save_checkpoint

    cfg, algo = exp.cfg, exp.algo
    num_actors = cfg.resources.num_client_actors(cfg.clients)
    started = init_ray(cfg, num_actors, algo.protocol.servers)
    fed = None
    try:
        if not os.environ.get("RAY_ADDRESS"):  # a Ray of this process: it will not grow. A job on a
            # cluster (RAY_ADDRESS set) may autoscale: the placement groups wait for it instead
            check_capacity(cfg, num_actors, algo.protocol.servers)
        fed = Federation(cfg, algo, exp.ds, exp.parts, num_actors, exp.ctx.block_flops, run_name=exp.run_dir.name,
                         local_tests=exp.local_tests, histograms=exp.ctx.histograms, model=exp.model)
        (exp.run_dir / "placement.json").write_text(json.dumps(fed.placement(), indent=1))
        if algo.wants_calibration():
            calibrate(exp, fed)
        start = rnd = state["round"] if state else 0
        try:
            if state:
                fed.load_state(state["federation"])
            fed.snapshot = state["federation"] if state else fed.get_state()
            for rnd in range(start + 1, cfg.rounds + 1):
                run_round(exp, fed, rnd)
                if exp.callbacks.round(exp.logger.rows[-1]):  # a callback asked to stop here
                    exp.stopped = True
                    if cfg.checkpoint_every and not exp.due(rnd, cfg.checkpoint_every):
                        fed.snapshot = fed.get_state()
                        save_checkpoint(exp, fed, rnd)
                    break
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
