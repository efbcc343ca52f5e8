"""Run configuration: typed dataclasses, file loading, overrides and validation.

A run is described by one :class:`Config`. It can be built in Python, loaded from a YAML or
JSON file (``--config FILE``), and overridden by CLI flags. :func:`validate` checks every
value *before* Ray starts, so bad input fails fast with a one-line
:class:`~raysfl.errors.ConfigError` naming the value and what is allowed.

Algorithm-specific knobs live in a per-algorithm params dataclass (``Algorithm.params_cls``);
in a file they sit under a section named after the algorithm (``fedprox: {mu: 0.01}``) and on
the command line each field is a flag of its own (``--mu``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raysfl.errors import ConfigError


@dataclass
class DeviceConfig:
    """Ranges the per-client device profiles are sampled from (uniform, seeded).

    Defaults cover the papers: SuperSFL's memory U[2,16] GB and latency U[20,200] ms,
    FedPairing's CPU frequency U[0.1,2] GHz. Compute speed is ``cpu_ghz * 1e9 *
    flops_per_cycle`` FLOP/s.
    """

    memory_gb: tuple[float, float] = (2.0, 16.0)
    latency_ms: tuple[float, float] = (20.0, 200.0)
    cpu_ghz: tuple[float, float] = (0.1, 2.0)
    flops_per_cycle: float = 8.0
    uplink_mbps: tuple[float, float] = (10.0, 100.0)
    downlink_mbps: tuple[float, float] = (20.0, 200.0)
    server_tflops: float = 10.0


@dataclass
class ResourceConfig:
    """Ray resources per role and how virtual clients map onto client actors.

    ``client_actors`` actors host the virtual clients round-robin (client k lives on actor
    ``k % client_actors``); ``clients_per_actor`` instead fixes how many clients share one
    actor. GPU shares may be fractional; an actor uses CUDA only when its share is real.
    """

    client_actors: int = 2
    clients_per_actor: int | None = None
    client_cpus: float = 0.5
    client_gpus: float = 0.0
    server_cpus: float = 1.0
    server_gpus: float = 0.0
    fed_cpus: float = 0.5
    fed_gpus: float = 0.0
    num_cpus: int | None = None  # local Ray cluster size; default: what the actors need
    num_gpus: int | None = None

    def num_client_actors(self, clients: int) -> int:
        if self.clients_per_actor:
            return max(1, math.ceil(clients / self.clients_per_actor))
        return max(1, min(self.client_actors, clients))


@dataclass
class Config:
    """Everything one run needs. Field names match the CLI flags (``--clients-per-round``)."""

    algo: str = "splitfed_v1"
    dataset: str = "digits"
    model: str = "cnn"
    data_root: str | None = None
    download: bool = False
    clients: int = 10
    clients_per_round: int | None = None  # None: every client, every round
    rounds: int = 20
    local_epochs: float = 1.0
    local_steps: int | None = None  # when set, overrides local_epochs
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    partition: str = "iid"
    alpha: float = 0.5
    classes_per_client: int = 2
    shards_per_client: int = 2
    quantity_skew: float = 0.0
    cut: int = 2
    seed: int = 0
    transfer_dtype: str = "float32"
    eval_every: int = 1
    checkpoint_every: int = 1
    out: str = "runs"
    name: str | None = None
    resume: str | None = None
    progress: bool = True
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    algo_params: Any = None  # the algorithm's params dataclass, filled by resolve()

    @property
    def selected_per_round(self) -> int:
        return self.clients_per_round or self.clients

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["algo_params"] = dataclasses.asdict(self.algo_params) if self.algo_params else {}
        return d


TRANSFER_DTYPES = ("float32", "float16", "bfloat16")
_SECTIONS = {"devices": DeviceConfig, "resources": ResourceConfig}


def _coerce(cls, name: str, value: Any, where: str) -> Any:
    """Convert a file/CLI value to the dataclass field's type, or raise ConfigError."""
    f = {x.name: x for x in dataclasses.fields(cls)}[name]
    t = str(f.type)
    try:
        if value is None:
            return None
        if t.startswith("tuple"):
            if isinstance(value, str):
                value = [v for v in value.replace(",", " ").split()]
            lo, hi = (float(v) for v in value)
            return (lo, hi)
        if t.startswith("bool"):
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            return bool(value)
        if t.startswith("int"):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if t.startswith("float"):
            return float(value)
        if t.startswith("str"):
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}{name}: cannot use {value!r}; expected {t}") from None
    return value


def from_dict(data: dict, base: Config | None = None) -> Config:
    """Build a Config from a (possibly nested) dict, on top of ``base``."""
    from raysfl.algorithms import get_algorithm

    cfg = dataclasses.replace(base) if base else Config()
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a mapping of settings, got {type(data).__name__}")
    top = {f.name for f in dataclasses.fields(Config)} - {"devices", "resources", "algo_params"}
    algo_sections: dict = {}
    for key, value in data.items():
        k = key.replace("-", "_")
        if k in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"section '{key}' must be a mapping, got {value!r}")
            section = dataclasses.replace(getattr(cfg, k))
            names = {f.name for f in dataclasses.fields(_SECTIONS[k])}
            for sk, sv in value.items():
                sk = sk.replace("-", "_")
                if sk not in names:
                    raise ConfigError(f"unknown setting '{k}.{sk}'; allowed: {', '.join(sorted(names))}")
                setattr(section, sk, _coerce(_SECTIONS[k], sk, sv, f"{k}."))
            setattr(cfg, k, section)
        elif k in top:
            setattr(cfg, k, _coerce(Config, k, value, ""))
        elif isinstance(value, dict):
            algo_sections[k] = value
        else:
            raise ConfigError(f"unknown setting '{key}'; allowed: {', '.join(sorted(top | set(_SECTIONS)))}")
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
            setattr(params, sk, _coerce(type(params), sk, sv, f"{section_name}."))
    cfg.algo_params = params
    return cfg


def load_file(path: str | Path) -> dict:
    """Read a YAML or JSON config file into a dict; malformed files raise ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file '{path}' does not exist")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # yaml.YAMLError, json.JSONDecodeError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"config file '{path}' is malformed: {first}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of settings, got {type(data).__name__}")
    return data


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def validate(cfg: Config) -> Config:
    """Check every value before Ray starts; returns cfg with algo_params resolved."""
    from raysfl.algorithms import get_algorithm
    from raysfl.data import DATASETS, PARTITIONERS, check_dataset_args, dataset_info
    from raysfl.models import MODELS, build_model

    algo_cls = get_algorithm(cfg.algo)
    if cfg.algo_params is None or not isinstance(cfg.algo_params, algo_cls.params_cls):
        cfg.algo_params = algo_cls.params_cls()
    _check(cfg.dataset in DATASETS, f"unknown dataset '{cfg.dataset}'; allowed: {', '.join(DATASETS)}")
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
    _check(0 <= cfg.momentum < 1, f"momentum must be in [0, 1), got {cfg.momentum}")
    _check(cfg.local_epochs > 0, f"local-epochs must be > 0, got {cfg.local_epochs}")
    if cfg.local_steps is not None:
        _check(cfg.local_steps >= 1, f"local-steps must be >= 1, got {cfg.local_steps}")
    _check(cfg.classes_per_client >= 1, f"classes-per-client must be >= 1, got {cfg.classes_per_client}")
    _check(cfg.shards_per_client >= 1, f"shards-per-client must be >= 1, got {cfg.shards_per_client}")
    _check(cfg.quantity_skew >= 0, f"quantity-skew must be >= 0 (0 = off), got {cfg.quantity_skew}")
    _check(cfg.transfer_dtype in TRANSFER_DTYPES,
           f"unknown transfer-dtype '{cfg.transfer_dtype}'; allowed: {', '.join(TRANSFER_DTYPES)}")
    _check(cfg.eval_every >= 1, f"eval-every must be >= 1, got {cfg.eval_every}")
    _check(cfg.checkpoint_every >= 0, f"checkpoint-every must be >= 0 (0 = never), got {cfg.checkpoint_every}")
    for name, (lo, hi) in (("memory_gb", cfg.devices.memory_gb), ("latency_ms", cfg.devices.latency_ms),
                           ("cpu_ghz", cfg.devices.cpu_ghz), ("uplink_mbps", cfg.devices.uplink_mbps),
                           ("downlink_mbps", cfg.devices.downlink_mbps)):
        _check(0 < lo <= hi, f"devices.{name} must be a range 0 < low <= high, got ({lo}, {hi})")
    r = cfg.resources
    _check(r.client_actors >= 1, f"resources.client_actors must be >= 1, got {r.client_actors}")
    for name in ("client_cpus", "client_gpus", "server_cpus", "server_gpus", "fed_cpus", "fed_gpus"):
        _check(getattr(r, name) >= 0, f"resources.{name} must be >= 0, got {getattr(r, name)}")
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
    if algo_cls.uses_cut:
        model = build_model(cfg.model, info.input_shape, info.num_classes, seed=0)
        cuts = model.valid_cuts()
        _check(cfg.cut in cuts,
               f"cut {cfg.cut} is not valid for model '{cfg.model}'; valid cuts: {cuts[0]}..{cuts[-1]}")
    algo_cls.validate(cfg)
    return cfg
