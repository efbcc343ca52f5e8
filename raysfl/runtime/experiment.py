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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from raysfl.algorithms import plugin_of
from raysfl.algorithms.roles import FederationContext
from raysfl.data import own_partition
from raysfl.errors import ConfigError, RunFailed, first_line
from raysfl.metrics import RunLogger
from raysfl.runtime import interrupts


@dataclass
class Prepared:
    """What a run computes before any actor starts, from its config alone (and the seed):
    the data and its partition, the device profiles, the initial model, the algorithm and its
    planner, set up."""

    ds: object                 # raysfl.data.DatasetArrays
    parts: list                # each client's training indices
    local_tests: list          # each client's local test indices (--local-test-fraction)
    model: object              # the initial raysfl.models.SplitModel (every actor starts from a copy)
    ctx: FederationContext
    spec: type                 # the algorithm (raysfl.algorithms.Algorithm)
    planner: object            # its planner, set up


def run_experiment(cfg, algo, callbacks=None, warm=None) -> tuple[Path, list[dict], "object", "object", bool]:
    """Run (or resume, if ``cfg.resume`` is set) the validated config ``cfg`` with its resolved
    algorithm ``algo`` (:func:`raysfl.resolve.validate_run`); return the run
    directory, its metrics rows, what :func:`prepare` made (the initial model, the algorithm
    and its planner) and whether a callback stopped the run early (``callbacks``:
    :class:`raysfl.callbacks.Callbacks`). ``warm``: ``--init-from``'s starting model
    (:class:`raysfl.warm_start.WarmStart`), checked before the call.

    Everything that can be checked without Ray is checked before the run directory is written:
    the Ray address, the checkpoint and metrics files of a resumed run, the data set. An error
    raised once the run directory exists carries it (``raysfl_run_dir``), so the CLI can put the
    traceback of an unexpected one there.
    """
    import ray

    from raysfl.runtime.placement import check_ray_address

    if algo.runs_actors and not ray.is_initialized():
        check_ray_address()
    if cfg.resume:
        run_dir = Path(cfg.resume)
        from raysfl import checkpoint

        state = checkpoint.load_latest(run_dir, cfg.to_dict())
        if state["round"] >= cfg.rounds:
            raise ConfigError(f"run '{run_dir}' already finished {state['round']} rounds; pass --rounds > "
                              f"{state['round']} to continue")
        _check_recorded(run_dir, state["round"])
        from raysfl.metrics import read_rows

        metrics = run_dir / "metrics.parquet"
        checkpoint.verify_resume(run_dir, state["round"], read_rows(metrics) if metrics.exists() else None)
    else:
        run_dir, state = None, None
    stages = StartupClock(None, cfg.progress)  # the run directory is known once the data loads
    ds = _load_data(cfg, on_nodes=algo.runs_actors)
    check_fault_steps(cfg, ds, algo)
    from raysfl import user_metrics

    metrics = user_metrics.of_config(cfg)  # imported, or given to raysfl.run: one line if not
    if run_dir is None and own_partition.is_own(cfg.partition):  # a function's ids: checked before the run dir
        split_clients(cfg, ds)
    warm = warm if state is None else None  # a resume starts from its own checkpoint
    if run_dir is None:
        run_dir = _new_run_dir(cfg)
    try:
        return _run_in(cfg, algo, run_dir, state, ds, stages, callbacks, metrics, warm)
    except BaseException as e:
        try:
            e.raysfl_run_dir = run_dir
        except AttributeError:  # an exception type without a __dict__
            pass
        raise


def check_fault_steps(cfg, ds, algo) -> None:
    """A kill at ``step=S`` past the most local steps a client takes in a round is refused before
    the run starts (it could never fire there). With --local-steps validation did it; with
    --local-epochs the count comes from the clients' shares of the data, known once it is split.
    Algorithms that plan their own steps (GAPSL) are not checked."""
    from raysfl.faults import check_steps, parse_faults
    from raysfl.runtime.planning import client_schedule

    faults = [f for f in parse_faults(cfg.faults) if f.step is not None]
    if not faults or cfg.local_steps is not None or algo.plans_own_steps:
        return
    parts, _ = client_splits(cfg, ds, cfg.resume)
    most = max(client_schedule(cfg, len(p), 0)[0] for p in parts)  # --epoch: a round from an epoch's start
    check_steps(faults, most, f"the most a client takes with --local-epochs {cfg.local_epochs:g}")


def check_node_faults(cfg, placement: list[dict]) -> None:
    """``kill:node`` needs a worker node holding the run's actors (not the head, not the
    driver's node), and an ``index=I`` below their number: refused in one line once the actors
    are placed, before the first round."""
    from raysfl.faults import parse_faults
    from raysfl.runtime.node_faults import worker_nodes

    faults = [f for f in parse_faults(cfg.faults) if f.role == "node"]
    if not faults:
        return
    nodes = worker_nodes(placement)
    for f in faults:
        if not nodes:
            raise ConfigError(f"fault {f.text()}: no worker node holds this run's actors (they are on the head or "
                              f"the driver's node, which kill:node spares); run on a cluster with worker nodes")
        if f.index is not None and f.index >= len(nodes):
            raise ConfigError(f"fault {f.text()}: index {f.index} out of range; {len(nodes)} worker node(s) hold this "
                              f"run's actors (index 0..{len(nodes) - 1})")


def _load_data(cfg, on_nodes: bool = False):
    """The data set (with ``--validation``: its training split's held-out share in place of the
    test split), or a one-line ConfigError when its files cannot be read (a truncated download,
    random bytes under --data-root). ``on_nodes``: a run of actors, whose file-backed set is read
    on each actor's node when it joins a cluster; the driver then reads only the training labels
    and the test split (:mod:`raysfl.data.landing`)."""
    from raysfl.data import landing, load_dataset
    from raysfl.data.arrays import with_validation
    from raysfl.data.datasets import is_file_backed

    try:
        if on_nodes and is_file_backed(cfg.dataset) and not cfg.download and landing.joins_a_cluster():
            return landing.labels_only(cfg.dataset, cfg.data_root, cfg.validation)
        return with_validation(load_dataset(cfg.dataset, cfg.data_root, cfg.download), cfg.validation)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the reader raised: it names no value the user can fix
        first = first_line(e, 200, empty="")
        why = f"{type(e).__name__}: {first}" if first else f"{type(e).__name__} in its reader"
        where = f" under data root '{cfg.data_root}'" if cfg.data_root else ""
        raise ConfigError(f"dataset '{cfg.dataset}'{where} cannot be read ({why}); "
                          f"replace its files (or pass --download to fetch them again)") from None


def _check_recorded(run_dir: Path, done: int) -> None:
    """The metrics files a resume appends to must be readable: refuse (and change nothing)
    rather than lose the rounds they hold."""
    import pyarrow.parquet as pq

    for name in ("metrics.parquet", "clients.parquet"):
        path = run_dir / name
        if not path.exists():
            continue
        try:
            pq.read_table(path)
        except Exception as e:  # noqa: BLE001 - pyarrow's errors for a damaged file vary
            first = first_line(e, 160)
            raise ConfigError(f"cannot resume '{run_dir}': {name} is unreadable ({first}); move it away to resume "
                              f"without the {name.split('.')[0]} of rounds 1..{done}") from None


def split_clients(cfg, ds, run_dir=None) -> list[np.ndarray]:
    """The clients' training indices (``--partition``, seeded). Real-valued targets are split by
    their quantile bins (``--target-bins``, ours; ``iid`` reads no label). A partition of yours
    (:mod:`raysfl.data.own_partition`) is kept in ``run_dir`` (``partition.npy``), and read from
    there when the run directory has it (a resume)."""
    from raysfl.data import own_partition, partition, quantile_bins

    if own_partition.is_own(cfg.partition):
        return own_partition.split(cfg, ds, run_dir)
    labels = ds.y_train if ds.targets == "classes" else quantile_bins(ds.y_train, cfg.target_bins)
    return partition(labels, cfg.clients, cfg.partition, alpha=cfg.alpha,
                     classes_per_client=cfg.classes_per_client, shards_per_client=cfg.shards_per_client,
                     quantity_skew=cfg.quantity_skew or None, seed=cfg.seed)


def client_splits(cfg, ds, run_dir=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The clients' (training indices, local test indices): :func:`split_clients`, then each
    client's ``--local-test-fraction`` held out (:func:`raysfl.data.hold_out`)."""
    from raysfl.data import hold_out

    return hold_out(split_clients(cfg, ds, run_dir), cfg.local_test_fraction, cfg.seed)


def local_chance(cfg, ds=None, own_models: bool = False) -> float:
    """What a constant prediction scores on the local test splits of a run of ``cfg`` (NaN
    without them), from its data and partition alone, without the run: each client's commonest
    class with ``own_models``, else one class for all (:meth:`ClientViews.chance
    <raysfl.runtime.fed_actor.ClientViews.chance>`). ``raysfl reproduce`` gives the floors to
    runs made before their columns existed."""
    from raysfl.data import constant_accuracy

    if not cfg.local_test_fraction:
        return float("nan")
    ds = ds if ds is not None else _load_data(cfg)
    if ds.targets != "classes":
        return float("nan")
    return constant_accuracy(ds.y_train, client_splits(cfg, ds)[1], per_split=own_models)


def prepare(cfg, algo, ds=None, model=None, run_dir=None) -> Prepared:
    """Load (unless given) and partition the data, sample the device profiles, build the model
    once (its shapes and FLOPs; ``model``: the initial model already built, a warm start's) and
    set the resolved algorithm's planner up (``planner.setup``), as the run does; also used to
    rebuild a finished run's roles (``raysfl.api.load_run``). ``run_dir``: the run's directory,
    which keeps a partition of yours (:func:`split_clients`)."""
    from raysfl.data import label_histograms
    from raysfl.devices import sample_profiles
    from raysfl.models import build_model
    from raysfl.objective import get_loss

    if ds is None:
        ds = _load_data(cfg)
    parts, local_tests = client_splits(cfg, ds, run_dir)
    profiles = sample_profiles(cfg.clients, cfg.devices, cfg.seed)
    if model is None:
        model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
    # real-valued targets have no classes: one column, every sample (raysfl.objective)
    histograms = (label_histograms(ds.y_train, parts, ds.num_classes) if ds.targets == "classes"
                  else np.array([[len(p)] for p in parts], dtype=np.int64))
    ctx = FederationContext(num_clients=cfg.clients, num_blocks=model.num_blocks, valid_cuts=model.valid_cuts(),
                            sizes=np.array([len(p) for p in parts]),
                            histograms=histograms, profiles=profiles,
                            block_flops=model.block_flops(), conv_blocks=model.leading_conv_blocks(),
                            num_classes=ds.num_classes, loss=get_loss(cfg.loss))
    algo.planner.setup(ctx)
    return Prepared(ds, parts, local_tests, model, ctx, algo.spec, algo.planner)


def _run_in(cfg, algo, run_dir: Path, state: dict | None, ds, stages: "StartupClock", callbacks, metrics=None,
            warm=None):
    from raysfl.callbacks import Callbacks
    from raysfl.faults import parse_faults

    callbacks = callbacks if isinstance(callbacks, Callbacks) else Callbacks(callbacks)
    if cfg.mlflow is not None:  # --mlflow URI: the MLflow tracker, as if passed as a callback
        from raysfl.trackers import MLflowLogger

        callbacks.items.append(MLflowLogger(cfg.mlflow, artifact_location=cfg.mlflow_artifacts))
    plugin = plugin_of(algo.spec)
    started = _warm_record(run_dir) if warm is None else warm.record  # --init-from's checkpoint, kept on resume
    (run_dir / "config.json").write_text(json.dumps({**cfg.to_dict(), **({"plugins": [plugin]} if plugin else {}),
                                                     **({"init_from_checkpoint": started} if started else {})},
                                                    indent=2) + "\n")
    _write_own_keys(run_dir, cfg.model)
    stages.run_dir = run_dir
    model = warm.model if warm is not None else None
    launch = None
    if algo.runs_actors:
        # Ray and the actors' processes start on this thread while the data are partitioned and
        # the model is built on another: the two are the longest stages of a cold start
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="raysfl-setup") as threads:
            future = threads.submit(stages.timed, "setup", "setting up",
                                    lambda: prepare(cfg, algo, ds, model, run_dir))
            try:
                launch = launch_actors(cfg, algo.servers, run_dir.name, stages)
            finally:
                try:
                    p = future.result()
                except BaseException:
                    if launch is not None:
                        from raysfl.runtime import pool

                        pool.destroy(launch.actors)
                    raise
    else:
        p = stages.timed("setup", "setting up", lambda: prepare(cfg, algo, ds, model, run_dir))
    if metrics is not None:  # each called once on the initial model's outputs: a bad one stops here, in one line
        try:
            probe_metrics(metrics, p.model, p.ds, p.ctx.loss)
        except ConfigError:
            if launch is not None:
                from raysfl.runtime import pool

                pool.destroy(launch.actors)
            raise
        p.ctx.metrics = metrics
    if state:  # the checkpoint's tensors fit the run's model, before any reaches an actor
        from raysfl.runtime.checkpoint_fit import check_checkpoint

        try:
            check_checkpoint(state, p.model, run_dir, p.spec)
        except ConfigError:
            if launch is not None:  # started for nothing: their CPUs go back to Ray
                from raysfl.runtime import pool

                pool.destroy(launch.actors)
            raise
    stages.say(f"{cfg.dataset} ({ds.num_train} training samples) split among {cfg.clients} clients "
               f"({cfg.partition}); model {cfg.model} ({p.model.num_blocks} blocks); {cfg.algo} set up "
               f"in {stages.seconds['setup']:.1f} s")
    if warm is not None:
        stages.say(f"initial model: the final model of {cfg.init_from} (its round {warm.record['round']} checkpoint)")
    if not p.planner.measures_clients:
        write_clients(run_dir, p.ctx, p.planner)

    from raysfl.runtime.rounds import Experiment, new_counters  # torch: imported beside Ray's start, not before it

    start = state["round"] if state else 0
    logger = RunLogger(run_dir, start_round=start, progress=cfg.progress, total_rounds=cfg.rounds, config=cfg.to_dict())
    exp = Experiment(cfg, p.spec, p.planner, p.ds, p.parts, p.ctx, run_dir, logger, local_tests=p.local_tests,
                     faults=parse_faults(cfg.faults),
                     counters=state["counters"] if state else new_counters(), model=p.model, callbacks=callbacks)
    error = None
    try:
        callbacks.start(run_dir, cfg.to_dict())
        if p.planner.exchange is not None:
            _run_federated(exp, state, stages, launch)
        else:
            from raysfl.runtime.centralized import run_centralized

            run_centralized(exp, state)
    except BaseException as e:
        error = e
        raise
    finally:
        try:
            with interrupts.held(second_cuts_short=True):  # a signal now waits for the run's files to close
                logger.close(stopped=exp.stopped)
            if error is None:
                from raysfl.trained import global_state_dict

                callbacks.model(lambda: global_state_dict(cfg, run_dir, algo.spec))
        finally:
            callbacks.end(run_dir, logger.rows, error)
    _warn_thin_rounds(cfg, logger.rows)
    return run_dir, logger.rows, p, exp.stopped


def _warm_record(run_dir: Path) -> dict | None:
    """The ``init_from_checkpoint`` a resumed run's config.json holds (None: none, or not readable)."""
    try:
        return json.loads((run_dir / "config.json").read_text()).get("init_from_checkpoint")
    except (OSError, ValueError, AttributeError):
        return None


def _write_own_keys(run_dir: Path, model_name: str) -> None:
    """``model_keys.json``: your module's keys of a model you brought (:mod:`raysfl.models.own_keys`)."""
    from raysfl.models import custom, own_keys

    if custom.is_custom(model_name):
        own_keys.write(run_dir, getattr(custom.lookup(model_name), "own_keys", None))


def _warn_thin_rounds(cfg, rows: list[dict]) -> None:
    """One closing line when rounds included fewer clients than --min-included asks for."""
    from raysfl.checkpoint import round_ranges

    thin = [r["round"] for r in rows if r.get("below_min_included")]
    if thin:
        print(f"raysfl: warning: {len(thin)} of {len(rows)} rounds included fewer than {cfg.min_included:.0%} of "
              f"their selected clients (rounds {round_ranges(thin, 10)}; column below_min_included)",
              file=sys.stderr)


def _new_run_dir(cfg) -> Path:
    name = cfg.name or f"{cfg.algo}-{cfg.dataset}-{cfg.model}-s{cfg.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    base = Path(cfg.out) / name
    d, i = base, 1
    while True:  # the first free name, claimed by mkdir itself: two runs started in the same second
        try:     # (threads of one process, or two processes) never share a directory
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            d, i = Path(f"{base}-{i}"), i + 1
        except OSError as e:
            raise ConfigError(f"cannot create the run directory '{d}' in --out '{cfg.out}': "
                              f"{e.strerror or e}") from None


def write_clients(run_dir: Path, ctx: FederationContext, planner) -> None:
    """clients.json: each client's data, device profile and the planner's facts about it."""
    (run_dir / "clients.json").write_text(json.dumps([
        {"client": k, "samples": int(ctx.sizes[k]), "label_histogram": ctx.histograms[k].tolist(),
         "device": ctx.profiles[k].to_dict(), **planner.client_info(k)} for k in range(ctx.num_clients)],
        indent=1) + "\n")


def calibrate(exp, fed) -> None:
    """Measured (memory, latency) per client, once per run: kept in calibration.json so a
    resumed run uses the same numbers (and so the same split points)."""
    path = exp.run_dir / "calibration.json"
    if path.is_file():
        try:
            profile = {int(k): tuple(v) for k, v in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError) as e:
            raise ConfigError(f"{path} is unreadable ({e}); move it away to measure the clients again (their "
                              f"split points may then differ from the rounds already run)") from None
    else:
        print("raysfl: measuring client devices (memory, latency to the server) ...", flush=True)
        profile = fed.measure(exp.cfg.batch_size)
        path.write_text(json.dumps({str(k): list(v) for k, v in profile.items()}, indent=1) + "\n")
    exp.planner.calibrate(profile)
    write_clients(exp.run_dir, exp.ctx, exp.planner)


def probe_metrics(metrics, model, ds, loss, rows: int = 64) -> None:
    """Call the metrics of your own once on ``model``'s outputs for the first ``rows`` test rows
    (:meth:`raysfl.user_metrics.UserMetrics.probe`): what each returns fixes the run's columns."""
    import torch

    from raysfl.data.landing import NotOnTheDriver
    from raysfl.evaluation import evaluate_predictions

    x, y = ds.x_test[:rows], np.asarray(ds.y_test)[:rows]
    if isinstance(x, NotOnTheDriver):  # a validation split of images read on the nodes: the columns
        x = np.zeros(x.shape, dtype=np.uint8)  # depend on what the metrics return, not on the pixels
    outputs: list = []
    evaluate_predictions(model, x, y, ds.to_tensor, loss=loss, outputs=outputs)
    metrics.probe(torch.cat(outputs), torch.from_numpy(np.array(y)))


def ship_by_value(spec, loss=None, fns=()) -> None:
    """An algorithm or a loss from your own code (a ``--plugin`` module, a module your script
    imports, a test module) reaches the actors by value, so the nodes need not have it
    installed; raysfl's own, an installed package's (``nn.SmoothL1Loss``) and a script's
    ``__main__`` objects travel as Ray ships them anyway."""
    import sysconfig

    from ray import cloudpickle

    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "purelib", "platlib")}
    fn = getattr(loss, "fn", None)
    for obj in (spec, spec.params_cls, *spec.roles().values(), *([fn] if fn is not None else []), *fns):
        name = getattr(obj, "__module__", None) or type(obj).__module__ or ""
        top = name.split(".")[0]
        if not top or top in ("raysfl", "builtins", "__main__") or top not in sys.modules:
            continue
        where = getattr(sys.modules[top], "__file__", None)
        if where is None or any(Path(where).resolve().is_relative_to(d) for d in installed):
            continue
        cloudpickle.register_pickle_by_value(sys.modules[top])


@dataclass
class Launch:
    """Ray and a run's actors, started (the actors' processes may still be coming up)."""

    cfg: object                # the config with its CPU shares fitted to the cluster
    actors: object             # raysfl.runtime.pool.ActorSet
    started_ray: bool          # this run started the local Ray (kept for later runs of the process)


def launch_actors(cfg, num_servers: int, run_name: str, stages: "StartupClock") -> Launch:
    """Start Ray (unless this process has one) and the run's actors: a warm set from the pool
    when an earlier run of this process left one of the same shape, new processes otherwise
    (their start is not waited for here)."""
    import ray

    from raysfl.models import custom
    from raysfl.runtime.placement import (alive_nodes, check_capacity, fit_resources, init_ray, resolve_co_host,
                                          resolve_device_payloads, resolve_direct_payloads, resolve_eval_cpus,
                                          resolve_eval_overlap, resolve_snapshot_refs)
    from raysfl.runtime import pool

    num_actors = cfg.resources.num_client_actors(cfg.clients)
    if ray.is_initialized():
        started = False
        stages.mark("ray")
    else:
        started = stages.timed("ray", "starting Ray", lambda: init_ray(cfg, num_actors, num_servers))
        cpus = ray.cluster_resources().get("CPU", 0.0)
        stages.say(f"Ray up ({'started here' if started else 'joined'}, {cpus:g} CPUs) in {stages.seconds['ray']:.1f} s")
    # CPU shares the user left unset: sized to what the cluster has free (idle pooled actors' included)
    free = ray.available_resources().get("CPU", 0.0) + pool.held_cpus()
    nodes = alive_nodes()  # counted once for the choices that depend on it
    cfg = resolve_co_host(resolve_direct_payloads(fit_resources(cfg, num_actors, num_servers, free), nodes),
                          custom.is_custom(cfg.model), nodes)
    cfg = resolve_snapshot_refs(cfg, nodes)  # after direct_payloads, which it depends on
    cfg = resolve_eval_overlap(cfg, num_actors, num_servers, nodes)  # before the evaluation's CPUs, which it decides
    cfg = resolve_device_payloads(resolve_eval_cpus(cfg, num_actors, num_servers, nodes), nodes)
    if not os.environ.get("RAY_ADDRESS"):  # a Ray of this process: it will not grow. A job on a
        # cluster (RAY_ADDRESS set) may autoscale: the placement groups wait for it instead
        check_capacity(cfg, num_actors, num_servers)
    from raysfl.runtime.federation import start_actors  # torch: after Ray's start, which the set-up's import of it overlaps

    return Launch(cfg, start_actors(cfg, num_actors, num_servers, run_name), started)


def _run_federated(exp, state: dict | None, stages: "StartupClock", launch: Launch) -> None:
    """Set the actors up for this run, then run the rounds; a failure Ray reports (an actor dead
    for good, the cluster gone) ends the run with the rounds done so far kept and the command
    that resumes it. The actors go back to the pool for the next run of this process (killed
    after a failure); Ray stays up until the process exits."""
    import ray

    from raysfl.runtime.federation import Federation, FedServerLost
    from raysfl.runtime.rounds import resume_hint, run_round, settle_on_the_way_out, settle_pending
    from raysfl.runtime.run_ahead import drop_ahead

    planner = exp.planner
    cfg = exp.cfg = launch.cfg
    num_actors, num_servers = len(launch.actors.clients), len(launch.actors.servers)
    fed = None
    ok = False
    try:
        mine = getattr(exp.ctx, "metrics", None)  # metrics of your own: their functions, as a loss's
        ship_by_value(exp.spec, exp.ctx.loss, [*mine.fns.values(), *[mine.aggregate] * bool(mine.aggregate)]
                      if mine is not None else ())
        fed = stages.timed("actors", f"starting {num_actors + num_servers + 1} actors", lambda: Federation(
            cfg, exp.spec, planner, exp.ctx, planner.shared(), exp.ds, exp.parts, num_actors,
            run_name=exp.run_dir.name, local_tests=exp.local_tests, model=exp.model, actors=launch.actors,
            on_ready=stages.counter("actors up")))
        shared = " in one process (--co-host)" if cfg.resources.co_host == "on" else ""
        stages.say(f"{num_actors + num_servers + 1} actors ready ({num_actors} client actors hosting {cfg.clients} "
                   f"clients, {num_servers} server{'s' * (num_servers != 1)} and 1 fed server{shared}) in "
                   f"{stages.seconds['actors']:.1f} s")
        fed.run_dir = exp.run_dir  # its checkpoints' kept states, should a restarted fed server need them
        fed.checkpoints_written = exp.writer.wait  # ... and before a manifest changes the files one is linking
        placed = fed.placement()
        (exp.run_dir / "placement.json").write_text(json.dumps(placed, indent=1))
        check_node_faults(cfg, placed)  # kill:node needs a worker node holding actors
        if planner.measures_clients:
            calibrate(exp, fed)
        stages.timed("warm_up", "warming up (every actor's first forward/backward)", fed.warm_up)
        start = rnd = state["round"] if state else 0
        try:
            if state:
                from raysfl.runtime.checkpoint_fit import load_federation

                load_federation(fed, state["federation"], exp.run_dir, state)
            if state:
                fed.snapshot, fed.snapshot_round = state["federation"], start
            else:
                fed.snapshot_at(start)
            stages.mark("state")
            stages.say(f"{'resumed at round ' + str(start) if state else 'initial model'} in place; "
                       f"rounds {start + 1}..{cfg.rounds} to go; started in {stages.total:.1f} s")
            stages.write()
            for rnd in range(start + 1, cfg.rounds + 1):
                run_round(exp, fed, rnd)  # its callbacks see its row (a round later with --eval-overlap)
                if exp.stopped:  # a callback asked to stop
                    drop_ahead(exp, fed)  # the next round, if it went behind this one's aggregation (--run-ahead)
                    break
            settle_pending(exp, fed)  # none: the last round is evaluated at once
            ok = True
        except KeyboardInterrupt:  # SIGINT or SIGTERM (runtime/interrupts.py): keep the rounds that finished
            if exp.ahead is not None:  # cut short between asking for its round's snapshot and confirming it
                fed.drop_unconfirmed()  # (--run-ahead): the snapshot before is the one a checkpoint may take
            settle_on_the_way_out(exp, fed)
            checkpoint_finished(exp, fed)
            raise
        except FedServerLost as e:  # outside a round's retries: a callback's stop, whose state was lost
            raise RunFailed(f"round {rnd}'s checkpoint was not written ({e}); metrics of rounds 1..{rnd} are in "
                            f"{exp.run_dir}; {resume_hint(exp)}") from None
        except ray.exceptions.RayError as e:  # an actor died for good, the cluster went away, ...
            from raysfl.runtime.refs import is_death

            if isinstance(e, ray.exceptions.RayTaskError) and not is_death(e):
                raise  # an error in our own code, not a failure of the cluster: its traceback is wanted
            settle_on_the_way_out(exp, fed, timeout=10.0)
            first = first_line(e, None)
            rows = exp.logger.rows
            done = rows[-1]["round"] if rows else 0
            raise RunFailed(f"round {rnd} failed ({type(e).__name__}: {first}); metrics of rounds 1..{done} "
                            f"are in {exp.run_dir}; {resume_hint(exp)}") from e
    finally:
        try:
            with interrupts.held(second_cuts_short=True):  # a signal now waits for it, then goes on below
                exp.writer.wait(quiet=not ok)  # the last checkpoint on disk before the run ends
        finally:
            if fed is not None:
                fed.release(keep=ok)
            else:
                from raysfl.runtime import pool

                pool.destroy(launch.actors)


def checkpoint_finished(exp, fed) -> None:
    """On an interrupt: the newest finished round gets its checkpoint if it has none (between
    the rounds --checkpoint-every N saves) and its state is at hand (the snapshot taken after
    it: with retries, the default, or deadlines). --checkpoint-every 0 saves nothing."""
    from raysfl import checkpoint
    from raysfl.runtime.rounds import save_checkpoint

    rows = exp.logger.rows
    if not rows or not exp.cfg.checkpoint_every:
        return
    with interrupts.held():
        exp.writer.wait(quiet=True)  # the one under way is on disk, or said lost
    done = rows[-1]["round"]
    if done in checkpoint.rounds_saved(exp.run_dir) or fed.snapshot_round != done:
        return
    with interrupts.held():  # a second signal does not cut the save short
        try:
            if fed.snapshot is not None and fed.snapshot_round == done:
                save_checkpoint(exp, fed, done)
        except Exception as e:  # noqa: BLE001 - an actor gone with the signal: the older checkpoint stays
            print(f"raysfl: warning: could not checkpoint round {done} on the way out "
                  f"({type(e).__name__}: {first_line(e, 200, empty='')})", file=sys.stderr)


class StartupClock:
    """The start-up stages of a run, timed: each said when it starts and when it ends (with
    --progress), and kept in the run directory's ``startup.json`` (seconds per stage, and from
    the start to the first round), so that round 1's ``wall_time_s`` is training only. Stages
    may overlap (Ray starts while the data are set up), and time may pass outside every stage
    (the driver's own imports and bookkeeping, a busy machine): ``startup.json`` names both,
    ``overlapped`` (seconds counted in two stages at once) and ``other`` (in none), so that its
    stages minus ``overlapped`` plus ``other`` are its ``total`` (issue 46)."""

    def __init__(self, run_dir: Path | None, verbose: bool):
        import threading

        self.run_dir, self.verbose = run_dir, verbose
        self.t0 = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self._spans: list[tuple[float, float]] = []  # (start, end) of every timed stage, from t0
        self._lock = threading.Lock()

    @property
    def total(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, text: str) -> None:
        if self.verbose:
            with self._lock:
                print(f"raysfl: {text}", file=sys.stderr, flush=True)

    def timed(self, stage: str, doing: str, fn):
        """Run ``fn`` as stage ``stage``, saying ``doing ...`` first; returns its result."""
        self.say(f"{doing} ...")
        t = time.perf_counter()
        try:
            return fn()
        finally:
            end = time.perf_counter()
            self.seconds[stage] = round(end - t, 3)
            with self._lock:
                self._spans.append((t - self.t0, end - self.t0))

    def mark(self, stage: str) -> None:
        """A stage that took no time of its own (Ray already up, the state in place)."""
        self.seconds.setdefault(stage, 0.0)

    def counter(self, what: str):
        """A callback ``(done, total)`` that says progress (``3/6 actors up``) as it changes."""
        last = [-1]

        def tick(done: int, total: int) -> None:
            if done != last[0] and 0 < done < total:
                last[0] = done
                self.say(f"{done}/{total} {what}")
        return tick

    def write(self) -> None:
        total = self.total
        out = {k: self.seconds.get(k, 0.0) for k in ("setup", "ray", "actors", "warm_up", "state")}
        with self._lock:
            spans = sorted(self._spans)
        covered, reach = 0.0, 0.0  # the time inside at least one stage: the union of the spans
        for start, end in spans:
            covered += max(0.0, end - max(start, reach))
            reach = max(reach, end)
        out["overlapped"] = round(sum(out.values()) - covered, 3)
        out["other"] = round(total - covered, 3)
        (Path(self.run_dir) / "startup.json").write_text(json.dumps({**out, "total": round(total, 3)},
                                                                    indent=1) + "\n")
