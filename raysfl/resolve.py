"""Resolve a run's settings: dicts and files become one validated :class:`Config`.

:func:`from_dict` applies (possibly nested) settings on top of a Config, including the
chosen algorithm's own params section; :func:`validate` checks every value *before* Ray
starts, so bad input fails fast with a one-line :class:`~raysfl.errors.ConfigError` naming
the value and what is allowed. This module sits above the algorithm registry, the data
catalogue and the model catalogue; :mod:`raysfl.config` below it holds only the dataclasses
and the choices of the shared settings. Nothing here imports torch (or Ray), so bad input is
refused before anything heavy is loaded (``tests/test_startup_imports.py``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import tempfile
import unicodedata
from pathlib import Path

from raysfl.algorithms import ALGORITHMS, get_algorithm, load_recorded_plugins
from raysfl.algorithms.knobs import check_knobs
from raysfl.algorithms.spec import ResolvedAlgorithm, resolve_algorithm
from raysfl.config import (AGGREGATION_WEIGHTS, CLIENT_BANK, CO_HOST, DEVICE_PAYLOADS, DIRECT_PAYLOADS, EPOCH_RULES,
                           EVAL_OVERLAP, OPTIMIZERS, RUN_DEFAULTS, SECTIONS, SERVER_STREAM, STRATEGIES, TRANSFER_DTYPES,
                           RUN_AHEAD, SNAPSHOT_REFS, UPDATE_SUMS, Config, coerce)
from raysfl.data import DATASETS, PARTITIONERS, check_dataset_args, dataset_info
from raysfl.errors import ConfigError, excerpt
from raysfl.data import custom as custom_data
from raysfl.data import own_partition
from raysfl.models import MODELS, model_info
from raysfl.models import custom as custom_model


MAX_ROUNDS = 10_000_000
MAX_INT = 2**63 - 1
# What the device profiles may hold: wide enough for any real device, narrow enough that the
# simulated clock stays finite and fits TensorBoard's integer steps (milliseconds).
DEVICE_BOUNDS = {"memory_gb": (1e-6, 1e6), "latency_ms": (0.0, 1e7), "cpu_ghz": (1e-6, 1e6),
                 "uplink_mbps": (1e-6, 1e9), "downlink_mbps": (1e-6, 1e9), "flops_per_cycle": (1e-6, 1e6),
                 "server_tflops": (1e-6, 1e9)}


def from_dict(data: dict, base: Config | None = None) -> Config:
    """Build a Config from a (possibly nested) dict, on top of ``base``.

    Settings the dict leaves out stay as in ``base`` (default: a fresh :class:`Config`); those
    still None then take the algorithm's paper setting or raysfl's default
    (:func:`resolve_defaults`, which :func:`validate` applies to a ``Config(...)`` too). The
    algorithm's settings go under its name (``gapsl: {...}``) or under ``algo_params``, as
    :meth:`Config.to_dict` writes them: a run's ``config.json`` is a config file.
    """
    cfg = dataclasses.replace(base) if base else Config()
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping of settings, got {type(data).__name__}")
    top = {f.name for f in dataclasses.fields(Config)} - {"devices", "resources", "algo_params"}
    algo_sections: dict = {}
    if "plugins" in data:  # the modules of an algorithm of your own, as a run's config.json records them
        load_recorded_plugins(data["plugins"], "this configuration")
    for key, value in data.items():
        if key in ("plugins", "init_from_checkpoint"):  # config.json's records: the plugins are loaded above,
            continue                                   # the warm start's checkpoint is what it was
        if not isinstance(key, str):
            raise ConfigError(f"setting names must be text, got {excerpt(key)}")
        k = key.replace("-", "_")
        if k in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"section {excerpt(key)} must be a mapping, got {excerpt(value)}")
            section = dataclasses.replace(getattr(cfg, k))
            names = {f.name for f in dataclasses.fields(SECTIONS[k])}
            for sk, sv in value.items():
                sk = str(sk).replace("-", "_")
                if sk not in names:
                    raise ConfigError(f"unknown setting {excerpt(f'{k}.{sk}')}; allowed: {', '.join(sorted(names))}")
                setattr(section, sk, coerce(SECTIONS[k], sk, sv, f"{k}."))
            setattr(cfg, k, section)
        elif k == "faults":  # a string or a list (of strings or mappings): stored as one string
            from raysfl.faults import parse_faults

            cfg.faults = ",".join(f.text() for f in parse_faults(value))
        elif k == "lr_schedule" and callable(value):  # your function (raysfl.schedules): recorded by its path
            cfg.lr_schedule = value
        elif k in top:
            setattr(cfg, k, coerce(Config, k, value, ""))
        elif isinstance(value, dict) or k in ALGORITHMS:
            if not isinstance(value, dict):
                raise ConfigError(f"section {excerpt(key)} must be a mapping of {key}'s settings, got {excerpt(value)}")
            algo_sections[k] = value
        else:
            owner = _knob_owner(k)
            hint = (f" ({excerpt(k)} is a setting of algorithm {excerpt(owner)}: put it under a '{owner}:' section, or pass "
                    f"--{k.replace('_', '-')})") if owner else _suggest(k, top | set(SECTIONS))
            raise ConfigError(f"unknown setting {excerpt(key)}{hint}; allowed: {', '.join(sorted(top | set(SECTIONS)))}")
    algo_cls = get_algorithm(cfg.algo)
    if "algo_params" in algo_sections:  # as Config.to_dict and every run's config.json write it
        algo_sections[algo_cls.name] = {**algo_sections.pop("algo_params"), **algo_sections.get(algo_cls.name, {})}
    params = cfg.algo_params if isinstance(cfg.algo_params, algo_cls.params_cls) else algo_cls.params_cls()
    for section_name, values in algo_sections.items():
        if section_name != algo_cls.name:
            _refuse_section(section_name, values, cfg.algo)
        names = {f.name for f in dataclasses.fields(params)}
        for sk, sv in values.items():
            sk = str(sk).replace("-", "_")
            if sk not in names:
                raise ConfigError(
                    f"unknown setting {excerpt(f'{section_name}.{sk}')}; allowed: {', '.join(sorted(names)) or 'none'}")
            setattr(params, sk, coerce(type(params), sk, sv, f"{section_name}."))
    cfg.algo_params = params
    return resolve_defaults(cfg)


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _knob_owner(name: str) -> str | None:
    """The algorithm whose params have a field ``name`` (None if none does)."""
    for algo, cls in ALGORITHMS.items():
        if name in {f.name for f in dataclasses.fields(cls.params_cls)}:
            return algo
    return None


def _refuse_section(name: str, values: dict, algo: str) -> None:
    """A section that is not this run's algorithm's: another algorithm's settings (a CLI flag
    such as --mu arrives as its algorithm's section) or an unknown section. Neither is
    silently ignored."""
    if name in ALGORITHMS:
        knobs = ", ".join(f"{excerpt(f'{name}.{k}')} (--{str(k).replace('_', '-')})" for k in list(values)[:3])
        knobs = (knobs + (f" and {len(values) - 3:,} more" if len(values) > 3 else "")) or f"section {excerpt(name)}"
        raise ConfigError(f"{knobs} belong{'s' if len(values) == 1 else ''} to algorithm {excerpt(name)}, not to this "
                          f"run's algorithm {excerpt(algo)}; drop {'it' if len(values) <= 1 else 'them'} or run --algo {name}")
    allowed = ["devices", "resources", algo]
    raise ConfigError(f"unknown section {excerpt(name)}{_suggest(name, set(allowed) | set(ALGORITHMS))}; allowed: "
                      f"{', '.join(allowed)} (this run's algorithm)")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _check_eval_rounds(cfg: Config) -> None:
    """``--eval-rounds``: a list of rounds and ranges, given instead of ``--eval-every``."""
    from raysfl.config import round_set

    try:
        round_set(cfg.eval_rounds)
    except ValueError as e:
        raise ConfigError(f"eval-rounds: {e}") from None
    _check(not cfg.eval_rounds or cfg.eval_every == 1,
           f"give eval-every ({cfg.eval_every}) or eval-rounds ({excerpt(cfg.eval_rounds)}), not both")


def _check_types(cfg: Config) -> None:
    """Every setting has its field's type -- also in a ``Config(...)`` built in Python, which
    :func:`from_dict` did not see: each value goes through :func:`raysfl.config.coerce` (in
    place: ``np.int64(3)`` becomes 3), so a list where a name or a number goes is refused naming
    the setting."""
    for obj, where in ((cfg, ""), (cfg.devices, "devices."), (cfg.resources, "resources."),
                       (cfg.algo_params, f"{cfg.algo}.")):
        for f in dataclasses.fields(obj):
            if obj is cfg and f.name == "faults" and not isinstance(cfg.faults, str):  # a list, as from_dict takes
                from raysfl.faults import parse_faults

                cfg.faults = ",".join(x.text() for x in parse_faults(cfg.faults))
            elif f.name not in ("devices", "resources", "algo_params"):
                setattr(obj, f.name, coerce(type(obj), f.name, getattr(obj, f.name), where))


def _check_finite(obj, where: str, flags: bool) -> None:
    """Every float (and float range) of a settings dataclass is a finite number."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        values = v if isinstance(v, tuple) else (v,)
        if any(isinstance(x, float) and not math.isfinite(x) for x in values):
            name = f.name.replace("_", "-") if flags else f"{where}{f.name}"
            raise ConfigError(f"{name} must be a finite number, got {v}")


def _writable_dir(path: str, what: str) -> None:
    """``path`` is a directory this process can write in, or can be created as one. Tried by
    creating (and removing) a temporary directory: permission bits say little for root, a
    read-only or special file system (/proc, /sys) says more by refusing."""
    p = Path(path).expanduser()
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {excerpt(path)} cannot be used: {excerpt(probe)} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".raysfl-write-test-", dir=probe))
    except OSError as e:
        raise ConfigError(f"{what} {excerpt(path)} is not a writable directory: cannot create files in {excerpt(probe)} "
                          f"({e.strerror or e})") from None


def _check_ints(cfg: Config) -> None:
    """Every integer setting fits a 64-bit integer (Parquet, NumPy and TensorBoard store them so):
    --rounds 99999999999999999999999 is refused, not overflowed later."""
    for obj, where in ((cfg, ""), (cfg.resources, "resources."), (cfg.algo_params, f"{cfg.algo}.")):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and not -MAX_INT <= v <= MAX_INT:
                name = f.name.replace("_", "-") if not where else f"{where}{f.name}"
                raise ConfigError(f"{name} is out of range: {v} (allowed: at most {MAX_INT:,})")


def _check_text(value: str, what: str) -> None:
    """A name or path is text that can be written down: valid UTF-8 (not raw bytes from the
    command line), no control characters (a newline, a tab, an escape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(value) if isinstance(value, str) else value
        raise ConfigError(f"{what} must be valid UTF-8 text, got the bytes {excerpt(raw)}") from None
    bad = sorted({c for c in value if unicodedata.category(c) == "Cc"})
    _check(not bad, f"{what} must not contain control characters (newline, tab, ...), got {excerpt(value)}")


def check_name(name: str | None) -> None:
    """A run name is one directory name inside --out: no path separators, not '.' or '..', not
    blank, printable UTF-8 text."""
    if name is None:
        return
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    _check(bool(name) and name not in (".", "..") and not any(c in name for c in seps) and "\0" not in name,
           f"name must be one directory name inside --out (no '/', not '.' or '..'), got {excerpt(name)}")
    _check(bool(name.strip()), f"name must not be blank, got {excerpt(name)}")
    _check_text(name, "name")
    _check(len(name.encode()) <= 200, f"name must be at most 200 bytes long, got {len(name.encode())}")


def resolve_defaults(cfg: Config, algo_cls=None) -> Config:
    """Fill the settings left None: the algorithm's paper setting for the data set
    (``dataset_defaults``), then its general one (``config_defaults``), then raysfl's own (:data:`raysfl.config.RUN_DEFAULTS`). In place; returns ``cfg``."""
    algo_cls = algo_cls or get_algorithm(cfg.algo)
    if cfg.lr_schedule is not None:  # before a paper's lr_decay: the schedule replaces it
        _resolve_schedule(cfg)
    for defaults in (algo_cls.dataset_defaults.get(cfg.dataset, {}), algo_cls.config_defaults):
        for name, value in defaults.items():
            if getattr(cfg, name) is None:
                setattr(cfg, name, value)
    for name, value in RUN_DEFAULTS.items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
    return cfg


def _resolve_schedule(cfg: Config) -> None:
    """``lr_schedule`` as the text the run records (raysfl.schedules.canonical: every key written,
    a function as its module path). It replaces ``lr_decay``: one left unset is 1 (a paper's
    decay does not apply); one set to anything but 1 is a second schedule, refused."""
    from raysfl.schedules import canonical

    decay = coerce(Config, "lr_decay", cfg.lr_decay, "")
    if decay is not None and decay != 1:
        given = excerpt(cfg.lr_schedule) if isinstance(cfg.lr_schedule, str) else "a function"
        raise ConfigError(f"lr-decay {decay:g} and lr-schedule {given} both set the lr schedule; give one "
                          f"(lr-decay D is lr-schedule exp:gamma=D)")
    cfg.lr_decay = 1.0
    cfg.lr_schedule = canonical(cfg.lr_schedule, coerce(Config, "rounds", cfg.rounds, ""))


def _check_loss(cfg: Config, algo_cls, info) -> None:
    """The run's loss (raysfl.objective) exists, fits the data's targets and the algorithm."""
    from raysfl import objective

    if objective.is_custom(cfg.loss):
        _check(objective.lookup(cfg.loss) is not None, str(objective.missing(cfg.loss)))
    else:
        _check(cfg.loss in objective.BUILT_IN,
               f"unknown loss {excerpt(cfg.loss)}; allowed: {', '.join(objective.BUILT_IN)} (or your own: "
               f"raysfl.run(cfg, data=..., loss=fn))")
    targets = objective.get_loss(cfg.loss).targets
    if targets != info.targets:
        words = {"classes": "class labels", "values": "real-valued targets"}
        hint = ("built-in data sets have class labels: give your own data, raysfl.run(cfg, data=(x, y), "
                f"loss={excerpt(cfg.loss)})" if info.targets == "classes" else
                "give the loss that fits them (mse, bce or a function of yours), or class labels")
        _check(False, f"loss {excerpt(cfg.loss)} trains on {words[targets]} but data set {excerpt(cfg.dataset)} has "
                      f"{words[info.targets]}; {hint}")
    _check(algo_cls.losses is None or cfg.loss in algo_cls.losses,
           f"{cfg.algo} trains with {' or '.join(algo_cls.losses or ())} only (its steps are written for it), "
           f"got loss {excerpt(cfg.loss)}")
    _check(targets in algo_cls.targets,
           f"{cfg.algo} needs class labels (it reads them itself); loss {excerpt(cfg.loss)} trains on real-valued targets")


def _check_init_from(run_dir: str) -> None:
    """``--init-from RUN``: a run directory with a config and a checkpoint to take the weights
    from (whether they fit this run's model is checked once the data are known:
    raysfl.warm_start). A resume takes its weights from its own checkpoint instead."""
    _check_text(run_dir, "init-from")
    p = Path(run_dir).expanduser()
    _check(p.is_dir(), f"init-from {excerpt(run_dir)} is not a directory; give the directory of a finished run")
    _check((p / "config.json").is_file(), f"init-from {excerpt(run_dir)} is not a run directory (no config.json in it)")
    _check(any((p / "checkpoints").glob("round_*.pt")),
           f"init-from {excerpt(run_dir)} has no checkpoint to start from (checkpoints/round_*.pt; it ran with "
           f"--checkpoint-every 0, or did not finish a round)")


def validate(cfg: Config) -> Config:
    """Check every value before Ray starts; returns cfg with its defaults and algo_params resolved."""
    return validate_run(cfg)[0]


def validate_run(cfg: Config) -> tuple[Config, ResolvedAlgorithm]:
    """:func:`validate`, and the run's algorithm resolved once (its spec and planner), which the
    runtime is given instead of looking the algorithm up by name."""
    algo_cls = get_algorithm(cfg.algo)
    resolve_defaults(cfg, algo_cls)
    if cfg.algo_params is None or not isinstance(cfg.algo_params, algo_cls.params_cls):
        cfg.algo_params = algo_cls.params_cls()
    _check_types(cfg)
    _check_finite(cfg, "", flags=True)
    _check_finite(cfg.devices, "devices.", flags=False)
    _check_finite(cfg.resources, "resources.", flags=False)
    check_knobs(cfg.algo_params)  # each knob against its declaration: choices, bounds, finite numbers
    if custom_data.is_custom(cfg.dataset):  # your own data (raysfl.run(cfg, data=...)): given to this run?
        _check(custom_data.lookup(cfg.dataset) is not None, str(custom_data.missing(cfg.dataset)))
    else:
        _check(cfg.dataset in DATASETS, f"unknown dataset {excerpt(cfg.dataset)}; allowed: {', '.join(DATASETS)}")
    if custom_model.is_custom(cfg.model):  # your own model (raysfl.run(cfg, model=...))
        _check(custom_model.lookup(cfg.model) is not None, str(custom_model.missing(cfg.model)))
    else:
        _check(cfg.model in MODELS, f"unknown model {excerpt(cfg.model)}; allowed: {', '.join(MODELS)}")
    _check(cfg.partition in PARTITIONERS or own_partition.is_own(cfg.partition),
           f"unknown partition {excerpt(cfg.partition)}; allowed: {', '.join(PARTITIONERS)}, a .npy file of client "
           f"ids (one per training sample) or your own, raysfl.run(cfg, partition=...)")
    _check(1 <= cfg.rounds <= MAX_ROUNDS, f"rounds must be between 1 and {MAX_ROUNDS:,}, got {cfg.rounds}")
    _check_ints(cfg)
    _check(cfg.clients >= 1, f"clients must be >= 1, got {cfg.clients}")
    if cfg.clients_per_round is not None:
        _check(1 <= cfg.clients_per_round <= cfg.clients,
               f"clients-per-round must be between 1 and clients ({cfg.clients}), got {cfg.clients_per_round}")
    _check(cfg.alpha > 0, f"alpha must be > 0, got {cfg.alpha}")
    _check(cfg.batch_size >= 1, f"batch-size must be >= 1, got {cfg.batch_size}")
    _check(cfg.lr > 0, f"lr must be > 0, got {cfg.lr}")
    _check(cfg.server_lr is None or cfg.server_lr > 0, f"server-lr must be > 0, got {cfg.server_lr}")
    _check(cfg.optimizer in OPTIMIZERS, f"unknown optimizer {excerpt(cfg.optimizer)}; allowed: {', '.join(OPTIMIZERS)}")
    _check(0 < cfg.lr_decay <= 1, f"lr-decay must be in (0, 1] (1 = constant), got {cfg.lr_decay}")
    if cfg.lr_schedule is not None:  # a function's multiplier of every round, before anything starts
        from raysfl.schedules import check as check_schedule

        check_schedule(cfg.lr_schedule, cfg.rounds)
    _check(0 <= cfg.momentum < 1, f"momentum must be in [0, 1), got {cfg.momentum}")
    _check(cfg.weight_decay >= 0, f"weight-decay must be >= 0, got {cfg.weight_decay}")
    _check(0 <= cfg.seed < 2**32, f"seed must be an integer in [0, 2^32), got {cfg.seed}")
    _check(cfg.local_epochs > 0, f"local-epochs must be > 0, got {cfg.local_epochs}")
    if cfg.local_steps is not None:
        _check(cfg.local_steps >= 1, f"local-steps must be >= 1, got {cfg.local_steps}")
    _check(cfg.classes_per_client >= 1, f"classes-per-client must be >= 1, got {cfg.classes_per_client}")
    _check(cfg.shards_per_client >= 1, f"shards-per-client must be >= 1, got {cfg.shards_per_client}")
    _check(cfg.quantity_skew >= 0, f"quantity-skew must be >= 0 (0 = off), got {cfg.quantity_skew}")
    _check(0 <= cfg.local_test_fraction < 1,
           f"local-test-fraction must be in [0, 1) (0 = no local test splits), got {cfg.local_test_fraction}")
    _check(0 <= cfg.validation <= 0.5, f"validation must be a share of the training split in [0, 0.5] (0 = none: "
                                       f"the run evaluates on the test split), got {cfg.validation}")
    _check(cfg.epoch in EPOCH_RULES, f"unknown epoch rule {excerpt(cfg.epoch)}; allowed: {', '.join(EPOCH_RULES)}")
    _check(cfg.aggregation_weights in AGGREGATION_WEIGHTS,
           f"unknown aggregation-weights {excerpt(cfg.aggregation_weights)}; allowed: {', '.join(AGGREGATION_WEIGHTS)}")
    _check(cfg.transfer_dtype in TRANSFER_DTYPES,
           f"unknown transfer-dtype {excerpt(cfg.transfer_dtype)}; allowed: {', '.join(TRANSFER_DTYPES)}")
    _check(cfg.eval_every >= 1, f"eval-every must be >= 1, got {cfg.eval_every}")
    _check_eval_rounds(cfg)
    _check(cfg.eval_passes >= 0, f"eval-passes must be >= 0 (0 = every per-client model on the whole test set), "
                                 f"got {cfg.eval_passes}")
    from raysfl import user_metrics

    user_metrics.parse(cfg.metrics)  # each entry's form (its function is found when the run starts)
    user_metrics.parse_aggregation(cfg.metrics_aggregation)
    _check(cfg.checkpoint_every >= 0, f"checkpoint-every must be >= 0 (0 = never), got {cfg.checkpoint_every}")
    _check(cfg.keep_checkpoints >= 0,
           f"keep-checkpoints must be >= 0 (the newest N are kept; 0 = every one), got {cfg.keep_checkpoints}")
    _check(cfg.mlflow_artifacts is None or cfg.mlflow is not None,
           f"mlflow-artifacts {excerpt(cfg.mlflow_artifacts)} needs --mlflow URI: the tracking store the run logs to")
    if cfg.mlflow is not None:
        from raysfl.trackers import check_mlflow

        check_mlflow(cfg.mlflow, cfg.mlflow_artifacts)
    _check(cfg.max_restarts >= 0, f"max-restarts must be >= 0, got {cfg.max_restarts}")
    _check(cfg.max_round_retries >= 0, f"max-round-retries must be >= 0, got {cfg.max_round_retries}")
    for name in ("round_deadline_s", "step_deadline_s", "sim_deadline_s"):
        v = getattr(cfg, name)
        _check(v is None or v > 0, f"{name.replace('_', '-')} must be > 0 seconds, got {v}")
    _check(0 <= cfg.min_included <= 1,
           f"min-included must be a share of the round's clients in [0, 1] (0 = never warn), got {cfg.min_included}")
    _check(cfg.devices.flops_per_cycle > 0, f"devices.flops_per_cycle must be > 0, got {cfg.devices.flops_per_cycle}")
    _check(cfg.devices.server_tflops > 0, f"devices.server_tflops must be > 0, got {cfg.devices.server_tflops}")
    for name, (lo, hi) in (("memory_gb", cfg.devices.memory_gb), ("latency_ms", cfg.devices.latency_ms),
                           ("cpu_ghz", cfg.devices.cpu_ghz), ("uplink_mbps", cfg.devices.uplink_mbps),
                           ("downlink_mbps", cfg.devices.downlink_mbps)):
        if name == "latency_ms":  # 0: no latency (the clock of papers that model none)
            _check(0 <= lo <= hi, f"devices.latency_ms must be a range 0 <= low <= high, got ({lo}, {hi})")
        else:
            _check(0 < lo <= hi, f"devices.{name} must be a range 0 < low <= high, got ({lo}, {hi})")
        low, high = DEVICE_BOUNDS[name]
        _check(low <= lo and hi <= high, f"devices.{name} must lie within [{low:g}, {high:g}] (simulated times stay "
                                         f"finite and countable), got ({lo:g}, {hi:g})")
    for name in ("flops_per_cycle", "server_tflops"):
        low, high = DEVICE_BOUNDS[name]
        v = getattr(cfg.devices, name)
        _check(low <= v <= high, f"devices.{name} must be within [{low:g}, {high:g}], got {v:g}")
    r = cfg.resources
    _check(r.client_actors >= 1, f"resources.client_actors must be >= 1, got {r.client_actors}")
    _check(r.clients_per_actor is None or r.clients_per_actor >= 1,
           f"resources.clients_per_actor must be >= 1 (or unset), got {r.clients_per_actor}")
    _check(r.num_cpus is None or r.num_cpus >= 1,
           f"resources.num_cpus must be >= 1 (or unset: what the actors need), got {r.num_cpus}")
    _check(r.num_gpus is None or r.num_gpus >= 0,
           f"resources.num_gpus must be >= 0 (or unset: what the actors need), got {r.num_gpus}")
    for name in ("client_cpus", "client_gpus", "server_cpus", "server_gpus", "fed_cpus", "fed_gpus"):
        v = getattr(r, name)
        _check(v is None or v >= 0, f"resources.{name} must be >= 0 (or unset: sized to the cluster), got {v}")
    _check(r.eval_cpus is None or r.eval_cpus >= 1,
           f"resources.eval_cpus must be >= 1 (or unset: the CPUs of the actors that wait), got {r.eval_cpus}")
    for name in ("client_memory_gb", "server_memory_gb", "fed_memory_gb"):
        v = getattr(r, name)
        _check(v is None or v > 0, f"resources.{name} must be > 0 (or unset), got {v}")
    for name in ("client_placement", "server_placement"):
        _check(getattr(r, name) in STRATEGIES,
               f"unknown resources.{name} '{getattr(r, name)}'; allowed: {', '.join(STRATEGIES)}")
    _check(0 <= r.inline_object_kb <= 64 * 1024,
           f"resources.inline_object_kb must be between 0 and 65536 (64 MiB), got {r.inline_object_kb}")
    _check(r.own_state_memory_mb >= 0,
           f"resources.own_state_memory_mb must be >= 0 (0: every kept state waits on disk), got {r.own_state_memory_mb}")
    _check(r.direct_payloads in DIRECT_PAYLOADS,
           f"unknown resources.direct_payloads {excerpt(r.direct_payloads)}; allowed: {', '.join(DIRECT_PAYLOADS)}")
    _check(r.device_payloads in DEVICE_PAYLOADS,
           f"unknown resources.device_payloads {excerpt(r.device_payloads)}; allowed: {', '.join(DEVICE_PAYLOADS)}")
    _check(r.co_host in CO_HOST, f"unknown resources.co_host {excerpt(r.co_host)}; allowed: {', '.join(CO_HOST)}")
    _check(r.eval_overlap in EVAL_OVERLAP,
           f"unknown resources.eval_overlap {excerpt(r.eval_overlap)}; allowed: {', '.join(EVAL_OVERLAP)}")
    _check(r.client_bank in CLIENT_BANK,
           f"unknown resources.client_bank {excerpt(r.client_bank)}; allowed: {', '.join(CLIENT_BANK)}")
    _check(r.server_stream in SERVER_STREAM,
           f"unknown resources.server_stream {excerpt(r.server_stream)}; allowed: {', '.join(SERVER_STREAM)}")
    _check(r.update_sums in UPDATE_SUMS,
           f"unknown resources.update_sums {excerpt(r.update_sums)}; allowed: {', '.join(UPDATE_SUMS)}")
    _check(r.snapshot_refs in SNAPSHOT_REFS,
           f"unknown resources.snapshot_refs {excerpt(r.snapshot_refs)}; allowed: {', '.join(SNAPSHOT_REFS)}")
    _check(r.run_ahead in RUN_AHEAD,
           f"unknown resources.run_ahead {excerpt(r.run_ahead)}; allowed: {', '.join(RUN_AHEAD)}")
    if r.co_host == "on":
        _check(not r.server_gpus and not r.fed_gpus,
               f"resources.co_host 'on' puts the servers and the fed server in one process, which takes no GPU "
               f"share (server_gpus {r.server_gpus:g}, fed_gpus {r.fed_gpus:g}); use 'off' or 'auto'")
    _check(r.placement_timeout_s > 0, f"resources.placement_timeout_s must be > 0, got {r.placement_timeout_s}")
    check_name(cfg.name)
    _check(bool(cfg.out.strip()), f"out must name a directory (the runs go inside it), got {excerpt(cfg.out)}")
    _check_text(cfg.out, "out")
    if cfg.resume:
        _check(Path(cfg.resume).is_dir(), f"cannot resume {excerpt(cfg.resume)}: not a directory")
        _writable_dir(cfg.resume, "run directory")
    else:
        _writable_dir(cfg.out, "out")
        if cfg.init_from is not None:
            _check_init_from(cfg.init_from)
    check_dataset_args(cfg.dataset, cfg.data_root, cfg.download)
    info = dataset_info(cfg.dataset)
    _check_loss(cfg, algo_cls, info)
    _check(info.num_train >= cfg.clients,
           f"dataset {excerpt(cfg.dataset)} has {info.num_train} training samples but clients={cfg.clients}; "
           f"each client needs at least one sample")
    _check(cfg.target_bins >= 2, f"target-bins must be >= 2, got {cfg.target_bins}")
    if own_partition.is_own(cfg.partition):
        own_partition.check(cfg, info.num_train)
    if cfg.partition == "pathological":  # real-valued targets: their quantile bins are the classes (ours)
        classes, what = ((info.num_classes, "classes") if info.targets == "classes" else
                         (cfg.target_bins, "target bins (--target-bins)"))
        _check(cfg.classes_per_client <= classes,
               f"classes-per-client must be <= {classes} for {excerpt(cfg.dataset)}, got {cfg.classes_per_client}")
        _check(cfg.clients * cfg.classes_per_client >= classes,
               f"pathological partition needs clients x classes-per-client >= {classes} {what}, "
               f"got {cfg.clients} x {cfg.classes_per_client}")
    if cfg.partition == "shards":
        _check(cfg.clients * cfg.shards_per_client <= info.num_train,
               f"shards partition needs clients x shards-per-client <= {info.num_train} samples, "
               f"got {cfg.clients} x {cfg.shards_per_client}")
    if algo_cls.planner.uses_cut:
        cuts = model_info(cfg.model).cuts  # the zoo's catalogue, or your model's own: nothing is built
        _check(cfg.cut in cuts,
               f"cut {cfg.cut} is not valid for model {excerpt(cfg.model)}; valid cuts: {cuts[0]}..{cuts[-1]}")
    algo_cls.validate(cfg)
    from raysfl.faults import check_roles, check_rounds, parse_faults, server_kills

    faults = parse_faults(cfg.faults)
    algo = resolve_algorithm(algo_cls, cfg)  # the planner as the params shape it (FLEX-SFL's edge servers)
    check_roles(faults, algo.servers, cfg.algo, cfg.resources.num_client_actors(cfg.clients), cfg.clients)
    kills = server_kills(faults) if cfg.resources.co_host == "on" else []
    if kills:
        raise ConfigError(f"fault '{kills[0].text()}' kills one of the servers and the fed server, which "
                          f"resources.co_host 'on' puts in one process; use co_host 'off' or 'auto'")
    check_rounds(faults, cfg.rounds)
    if cfg.local_steps is not None and not algo.plans_own_steps:
        from raysfl.faults import check_steps

        check_steps(faults, cfg.local_steps, "--local-steps")
    exchange = algo.exchange
    if exchange is not None:
        exchange.check(cfg)  # what the round's shape cannot honour (SL's turns: no deadlines)
    if cfg.max_restarts == 0 and any(f.action == "kill" for f in faults):
        raise ConfigError("kill faults need --max-restarts >= 1 (with 0, the first kill ends the run)")
    if faults and exchange is None:
        raise ConfigError(f"faults need actors; algorithm {excerpt(cfg.algo)} runs in one process")
    return cfg, algo


def saved_config(run_dir: str | Path) -> dict:
    """A run directory's ``config.json`` as settings for :func:`raysfl.resolve.from_dict`
    (which reads its ``algo_params`` as the algorithm's own section)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"'{run_dir}' is not a run directory (no config.json in it)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"'{run_dir}': its config.json is unreadable ({e}); it is written when "
                          f"the run starts, so this run directory was damaged") from None
    if not isinstance(data, dict) or not isinstance(data.get("algo"), str):
        raise ConfigError(f"'{run_dir}': its config.json is not a raysfl run configuration "
                          f"(a mapping with 'algo')")
    if not isinstance(data.get("algo_params") or {}, dict):
        raise ConfigError(f"cannot resume '{run_dir}': 'algo_params' in its config.json is not a mapping")
    data["algo_params"] = data.get("algo_params") or {}
    # a run recorded before --epoch and --aggregation-weights existed ran under the earlier rules
    data.setdefault("epoch", "stream")
    data.setdefault("aggregation_weights", "processed")
    return data
