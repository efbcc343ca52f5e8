"""Resolve a run's settings: dicts and files become one validated :class:`Config`.

:func:`from_dict` applies (possibly nested) settings on top of a Config, including the
chosen algorithm's own params section; :func:`validate` checks every value *before* Ray
starts, so bad input fails fast with a one-line :class:`~raysfl.errors.ConfigError` naming
the value and what is allowed. This module sits above the algorithm registry, the data
catalogue and the model zoo; :mod:`raysfl.config` below it holds only the dataclasses.
"""

from __future__ import annotations

import dataclasses

from raysfl.algorithms import get_algorithm
from raysfl.config import RUN_DEFAULTS, SECTIONS, TRANSFER_DTYPES, Config, coerce
from raysfl.data import DATASETS, PARTITIONERS, check_dataset_args, dataset_info
from raysfl.errors import ConfigError
from raysfl.data import custom as custom_data
from raysfl.models import MODELS, build_model
from raysfl.models import custom as custom_model
from raysfl.optim import OPTIMIZERS


def from_dict(data: dict, base: Config | None = None) -> Config:
    """Build a Config from a (possibly nested) dict, on top of ``base``.

    Settings the dict leaves out stay as in ``base`` (default: a fresh :class:`Config`); those
    still None then take the algorithm's paper setting or raysfl's default
    (:func:`resolve_defaults`, which :func:`validate` applies to a ``Config(...)`` too).
    """
    cfg = dataclasses.replace(base) if base else Config()
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping of settings, got {type(data).__name__}")
    top = {f.name for f in dataclasses.fields(Config)} - {"devices", "resources", "algo_params"}
    algo_sections: dict = {}
    for key, value in data.items():
        k = key.replace("-", "_")
        if k in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"section '{key}' must be a mapping, got {value!r}")
            section = dataclasses.replace(getattr(cfg, k))
            names = {f.name for f in dataclasses.fields(SECTIONS[k])}
            for sk, sv in value.items():
                sk = sk.replace("-", "_")
                if sk not in names:
                    raise ConfigError(f"unknown setting '{k}.{sk}'; allowed: {', '.join(sorted(names))}")
                setattr(section, sk, coerce(SECTIONS[k], sk, sv, f"{k}."))
            setattr(cfg, k, section)
        elif k == "faults":  # a string or a list (of strings or mappings): stored as one string
            from raysfl.faults import parse_faults

            cfg.faults = ",".join(f.text() for f in parse_faults(value))
        elif k in top:
            setattr(cfg, k, coerce(Config, k, value, ""))
        elif isinstance(value, dict):
            algo_sections[k] = value
        else:
            raise ConfigError(f"unknown setting '{key}'; allowed: {', '.join(sorted(top | set(SECTIONS)))}")
    algo_cls = get_algorithm(cfg.algo)
    params = cfg.algo_params if isinstance(cfg.algo_params, algo_cls.params_cls) else algo_cls.params_cls()
    for section_name, values in algo_sections.items():
        if section_name != algo_cls.name:
            continue  # settings for another algorithm in a shared file are ignored
        names = {f.name for f in dataclasses.fields(params)}
        for sk, sv in values.items():
            sk = sk.replace("-", "_")
            if sk not in names:
                raise ConfigError(
                    f"unknown setting '{section_name}.{sk}'; allowed: {', '.join(sorted(names)) or 'none'}")
            setattr(params, sk, coerce(type(params), sk, sv, f"{section_name}."))
    cfg.algo_params = params
    return resolve_defaults(cfg)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def resolve_defaults(cfg: Config) -> Config:
    """Fill the settings left None: the algorithm's paper setting for the data set
    (``dataset_defaults``), then its general one (``config_defaults``), then raysfl's own (:data:`raysfl.config.RUN_DEFAULTS`). In place; returns ``cfg``."""
    algo_cls = get_algorithm(cfg.algo)
    for defaults in (algo_cls.dataset_defaults.get(cfg.dataset, {}), algo_cls.config_defaults):
        for name, value in defaults.items():
            if getattr(cfg, name) is None:
                setattr(cfg, name, value)
    for name, value in RUN_DEFAULTS.items():
        if getattr(cfg, name) is None:
            setattr(cfg, name, value)
    return cfg


def validate(cfg: Config) -> Config:
    """Check every value before Ray starts; returns cfg with its defaults and algo_params resolved."""
    algo_cls = get_algorithm(cfg.algo)
    resolve_defaults(cfg)
    if cfg.algo_params is None or not isinstance(cfg.algo_params, algo_cls.params_cls):
        cfg.algo_params = algo_cls.params_cls()
    if custom_data.is_custom(cfg.dataset):  # your own data (raysfl.run(cfg, data=...)): given to this run?
        _check(custom_data.lookup(cfg.dataset) is not None, str(custom_data.missing(cfg.dataset)))
    else:
        _check(cfg.dataset in DATASETS, f"unknown dataset '{cfg.dataset}'; allowed: {', '.join(DATASETS)}")
    if custom_model.is_custom(cfg.model):  # your own model (raysfl.run(cfg, model=...))
        _check(custom_model.lookup(cfg.model) is not None, str(custom_model.missing(cfg.model)))
    else:
        _check(cfg.model in MODELS, f"unknown model '{cfg.model}'; allowed: {', '.join(MODELS)}")
    _check(cfg.partition in PARTITIONERS,
           f"unknown partition '{cfg.partition}'; allowed: {', '.join(PARTITIONERS)}")
    _check(cfg.rounds >= 1, f"rounds must be >= 1, got {cfg.rounds}")
    _check(cfg.clients >= 1, f"clients must be >= 1, got {cfg.clients}")
    if cfg.clients_per_round is not None:
        _check(1 <= cfg.clients_per_round <= cfg.clients,
               f"clients-per-round must be between 1 and clients ({cfg.clients}), got {cfg.clients_per_round}")
    _check(cfg.alpha > 0, f"alpha must be > 0, got {cfg.alpha}")
    _check(cfg.batch_size >= 1, f"batch-size must be >= 1, got {cfg.batch_size}")
    _check(cfg.lr > 0, f"lr must be > 0, got {cfg.lr}")
    _check(cfg.server_lr is None or cfg.server_lr > 0, f"server-lr must be > 0, got {cfg.server_lr}")
    _check(cfg.optimizer in OPTIMIZERS, f"unknown optimizer '{cfg.optimizer}'; allowed: {', '.join(OPTIMIZERS)}")
    _check(0 < cfg.lr_decay <= 1, f"lr-decay must be in (0, 1] (1 = constant), got {cfg.lr_decay}")
    _check(0 <= cfg.momentum < 1, f"momentum must be in [0, 1), got {cfg.momentum}")
    _check(cfg.local_epochs > 0, f"local-epochs must be > 0, got {cfg.local_epochs}")
    if cfg.local_steps is not None:
        _check(cfg.local_steps >= 1, f"local-steps must be >= 1, got {cfg.local_steps}")
    _check(cfg.classes_per_client >= 1, f"classes-per-client must be >= 1, got {cfg.classes_per_client}")
    _check(cfg.shards_per_client >= 1, f"shards-per-client must be >= 1, got {cfg.shards_per_client}")
    _check(cfg.quantity_skew >= 0, f"quantity-skew must be >= 0 (0 = off), got {cfg.quantity_skew}")
    _check(0 <= cfg.local_test_fraction < 1,
           f"local-test-fraction must be in [0, 1) (0 = no local test splits), got {cfg.local_test_fraction}")
    _check(cfg.transfer_dtype in TRANSFER_DTYPES,
           f"unknown transfer-dtype '{cfg.transfer_dtype}'; allowed: {', '.join(TRANSFER_DTYPES)}")
    _check(cfg.eval_every >= 1, f"eval-every must be >= 1, got {cfg.eval_every}")
    _check(cfg.checkpoint_every >= 0, f"checkpoint-every must be >= 0 (0 = never), got {cfg.checkpoint_every}")
    _check(cfg.keep_checkpoints >= 0,
           f"keep-checkpoints must be >= 0 (the newest N are kept; 0 = every one), got {cfg.keep_checkpoints}")
    if cfg.mlflow is not None:
        from raysfl.trackers import check_mlflow

        check_mlflow(cfg.mlflow)
    _check(cfg.max_restarts >= 0, f"max-restarts must be >= 0, got {cfg.max_restarts}")
    _check(cfg.max_round_retries >= 0, f"max-round-retries must be >= 0, got {cfg.max_round_retries}")
    for name in ("round_deadline_s", "step_deadline_s", "sim_deadline_s"):
        v = getattr(cfg, name)
        _check(v is None or v > 0, f"{name.replace('_', '-')} must be > 0 seconds, got {v}")
    for name, (lo, hi) in (("memory_gb", cfg.devices.memory_gb), ("latency_ms", cfg.devices.latency_ms),
                           ("cpu_ghz", cfg.devices.cpu_ghz), ("uplink_mbps", cfg.devices.uplink_mbps),
                           ("downlink_mbps", cfg.devices.downlink_mbps)):
        _check(0 < lo <= hi, f"devices.{name} must be a range 0 < low <= high, got ({lo}, {hi})")
    r = cfg.resources
    _check(r.client_actors >= 1, f"resources.client_actors must be >= 1, got {r.client_actors}")
    for name in ("client_cpus", "client_gpus", "server_cpus", "server_gpus", "fed_cpus", "fed_gpus"):
        _check(getattr(r, name) >= 0, f"resources.{name} must be >= 0, got {getattr(r, name)}")
    for name in ("client_memory_gb", "server_memory_gb", "fed_memory_gb"):
        v = getattr(r, name)
        _check(v is None or v > 0, f"resources.{name} must be > 0 (or unset), got {v}")
    from raysfl.runtime.placement import STRATEGIES

    for name in ("client_placement", "server_placement"):
        _check(getattr(r, name) in STRATEGIES,
               f"unknown resources.{name} '{getattr(r, name)}'; allowed: {', '.join(STRATEGIES)}")
    _check(0 <= r.inline_object_kb <= 64 * 1024,
           f"resources.inline_object_kb must be between 0 and 65536 (64 MiB), got {r.inline_object_kb}")
    _check(r.placement_timeout_s > 0, f"resources.placement_timeout_s must be > 0, got {r.placement_timeout_s}")
    check_dataset_args(cfg.dataset, cfg.data_root, cfg.download)
    info = dataset_info(cfg.dataset)
    _check(info.num_train >= cfg.clients,
           f"dataset '{cfg.dataset}' has {info.num_train} training samples but clients={cfg.clients}; "
           f"each client needs at least one sample")
    if cfg.partition == "pathological":
        _check(cfg.classes_per_client <= info.num_classes,
               f"classes-per-client must be <= {info.num_classes} for '{cfg.dataset}', got {cfg.classes_per_client}")
        _check(cfg.clients * cfg.classes_per_client >= info.num_classes,
               f"pathological partition needs clients x classes-per-client >= {info.num_classes} classes, "
               f"got {cfg.clients} x {cfg.classes_per_client}")
    if cfg.partition == "shards":
        _check(cfg.clients * cfg.shards_per_client <= info.num_train,
               f"shards partition needs clients x shards-per-client <= {info.num_train} samples, "
               f"got {cfg.clients} x {cfg.shards_per_client}")
    if algo_cls.protocol.uses_cut:
        model = build_model(cfg.model, info.input_shape, info.num_classes, seed=0)
        cuts = model.valid_cuts()
        _check(cfg.cut in cuts,
               f"cut {cfg.cut} is not valid for model '{cfg.model}'; valid cuts: {cuts[0]}..{cuts[-1]}")
    algo_cls.validate(cfg)
    from raysfl.faults import check_roles, parse_faults

    faults = parse_faults(cfg.faults)
    protocol = algo_cls(cfg).protocol  # as the params refine it (FLEX-SFL's edge servers)
    check_roles(faults, protocol.servers, cfg.algo, cfg.resources.num_client_actors(cfg.clients))
    if protocol.sequential and (cfg.round_deadline_s or cfg.sim_deadline_s):
        raise ConfigError(f"deadlines (--round-deadline-s, --sim-deadline-s) are not supported for the sequential "
                          f"algorithm '{cfg.algo}' (its clients take turns within one round)")
    if cfg.max_restarts == 0 and any(f.action == "kill" for f in faults):
        raise ConfigError("kill faults need --max-restarts >= 1 (with 0, the first kill ends the run)")
    if faults and not protocol.distributed:
        raise ConfigError(f"faults need actors; algorithm '{cfg.algo}' runs in one process")
    return cfg
