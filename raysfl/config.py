"""Run configuration: typed dataclasses, file loading, overrides and validation.

A run is described by one :class:`Config`. It can be built in Python, loaded from a YAML or
JSON file (``--config FILE``), and overridden by CLI flags; :mod:`raysfl.resolve` turns
those into a validated Config (it knows the algorithms, this module does not).

Algorithm-specific knobs live in a per-algorithm params dataclass (``Algorithm.params_cls``);
in a file they sit under a section named after the algorithm (``fedprox: {mu: 0.01}``) and on
the command line each field is a flag of its own (``--mu``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raysfl.errors import ConfigError, excerpt


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
    # CPUs per actor. Left None: 0.5 per client actor, 1 per server, 0.5 for the fed server --
    # scaled down, fractionally, when the Ray cluster the run joins has fewer free CPUs
    # (placement.fit_resources), so a default run fits any cluster, a 2-CPU laptop's included.
    client_cpus: float | None = None
    client_gpus: float = 0.0
    server_cpus: float | None = None
    server_gpus: float = 0.0
    fed_cpus: float | None = None
    fed_gpus: float = 0.0
    client_memory_gb: float | None = None  # Ray memory reservation per actor (None: none)
    server_memory_gb: float | None = None
    fed_memory_gb: float | None = None
    client_placement: str = "SPREAD"  # placement-group strategy of the client actors: SPREAD,
                                      # STRICT_SPREAD, PACK, STRICT_PACK, or none (Ray's default scheduling)
    server_placement: str = "PACK"    # ... of the servers and the fed server (PACK: onto the GPU nodes
                                      # they ask for, as few as possible)
    placement_timeout_s: float = 120.0  # how long to wait for the cluster (or its autoscaler) to
                                        # hold every actor before giving up with an error
    inline_object_kb: int = 1024  # results (smashed data, gradients) up to this size travel inline
                                  # through their owner instead of the shared-memory object store:
                                  # 1.8x faster per step on one machine (docs/performance.md);
                                  # 100 is Ray's own default; applies to the local Ray raysfl starts
    direct_payloads: str = "auto"  # on: smashed data and gradients are put into the object store by the
                                   # actor that made them, so the driver passes only references (ours);
                                   # off: Ray returns them through the driver; auto: on where the
                                   # cluster has more than one node (docs/performance.md, transport)
    device_payloads: str = "auto"  # on: CUDA smashed data and gradients stay in the GPU's memory, only their
                                   # IPC handles travel (ours); off: through host memory; auto: on where
                                   # the clients and the servers share the one GPU of a one-node cluster
                                   # (placement.resolve_device_payloads)
    co_host: str = "auto"  # on: the servers and the fed server share one process, each role in a
                           # thread of its own (ours); auto: on where nothing can tell the
                           # difference (one node, no GPU for them, no kill fault naming them,
                           # a zoo model: runtime/placement.resolve_co_host)
    eval_cpus: float | None = None  # torch threads of the fed server's evaluation (their floor; ours). None: with
                                    # eval_overlap on, the cores the training leaves idle; off, the CPUs of the
                                    # run's actors that wait while it evaluates -- every actor's on one node, the
                                    # servers' and its own on a cluster (placement.resolve_eval_cpus)
    eval_overlap: str = "auto"  # on: a round's evaluation runs on the fed server while the next round trains, its
                                # row written when that training is done (ours); off: before the next round starts;
                                # auto: on on one node (the fed server without a GPU), evaluating on the cores the
                                # training leaves idle, at least one (placement.resolve_eval_overlap; the same rows
                                # but for wall_time_s)
    client_bank: str = "on"  # on: a client actor steps its round's clients that share blocks, learning rate and
                             # SplitFed's plain role (SGD or AdamW) as one vmap-ped program, their parameters stacked
                             # (ours; runtime/client_bank.py; the same rows within float rounding), and keeps the
                             # updates it sent where the fed server keeps them as they came (runtime/resident.py);
                             # off: one by one
    server_stream: str = "off"  # on: a server takes a step's batches one client actor at a time, answering each at
                                # once and updating its parameters after the last (ours; ServerActor.step_part;
                                # where the server-side step allows it, without deadlines: the same rows within
                                # float rounding); off: the whole group in one call. Off by default: it measured
                                # no faster on 2 cores (docs/performance.md, section 14)
    update_sums: str = "on"  # on: where the aggregation is FedAvg as it stands (Aggregator.takes_sums) and there are
                             # no real-time deadlines, a client actor sends its clients' updates of one server as
                             # one weighted sum, not one state each (ours; raysfl.aggregation.UpdateSum; the same
                             # rows within float rounding); off: every client's update
    snapshot_refs: str = "auto"  # on: a round's snapshot names the clients' kept states that came as this round's
                                 # updates by the object they came in (a client actor's results, owned by the driver)
                                 # instead of copying them into the object store again (ours; raysfl.own_states; the
                                 # same rows); off: copied; auto: on on one node where the updates come back through
                                 # the driver (direct_payloads off), since the objects live on the client actors' nodes
    run_ahead: str = "on"  # on: where nothing can go wrong between two rounds (no faults injected, no deadlines,
                           # the round ended clean, a run not stepped by a search), the next round's calls are
                           # submitted right behind this round's aggregation and snapshot, before their answers
                           # (ours; runtime/run_ahead.py; the same rows but for wall_time_s); off: after them
    own_state_memory_mb: int = 256  # the clients' kept states (PSL's own models, ...) the fed server holds in
                                    # memory; older ones wait in files of its node (ours)
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
    # Settings left None take the algorithm's paper setting (``Algorithm.config_defaults``),
    # else raysfl's own (RUN_DEFAULTS), when the config is validated -- so Config(...),
    # config_from_kwargs, files and the CLI all run the same experiment.
    model: str | None = None          # cnn
    data_root: str | None = None
    download: bool = False
    clients: int | None = None        # 10
    clients_per_round: int | None = None  # None: every client, every round
    rounds: int = 20
    local_epochs: float | None = None  # 1.0
    local_steps: int | None = None  # when set, overrides local_epochs
    epoch: str = "pass"  # pass: an epoch is one pass over the client's data, its last batch short (PyTorch's
                         # DataLoader, Flower); stream: ceil(n_k/B) full batches of a stream that wraps into the
                         # next shuffle (raysfl's earlier rule)
    aggregation_weights: str = "data_size"  # a client's weight in sample-weighted averages: data_size, its
                                            # training set's size n_k (McMahan et al., Flower); processed, the
                                            # samples it trained on this round (raysfl's earlier rule)
    loss: str = "cross_entropy"  # the training objective (raysfl.objective): cross_entropy (class labels), mse,
                                 # bce (real-valued targets of your own data), custom-<name> (a loss of yours)
    batch_size: int | None = None      # 32
    lr: float | None = None            # 0.05
    lr_decay: float | None = None      # 1.0; learning rate of round t = lr * lr_decay ** (t - 1)
    lr_schedule: str | None = None     # a named schedule of the round's lr multiplier, or module:function (ours;
                                       # raysfl.schedules); replaces lr_decay (which is exp:gamma=lr_decay)
    momentum: float | None = None      # 0.9
    weight_decay: float | None = None  # 0.0
    optimizer: str | None = None       # sgd | adamw (every optimizer of the run; raysfl/optim.py)
    server_lr: float | None = None   # the server side's learning rate (None: lr); GAPSL's 0.01 vs 0.005
    grad_angles: bool = False        # record the mean pairwise angle of the clients' server-side gradients
    partition: str | None = None       # iid
    alpha: float | None = None         # 0.5
    classes_per_client: int | None = None  # 2
    shards_per_client: int | None = None   # 2
    quantity_skew: float | None = None     # 0.0
    target_bins: int = 10  # real-valued targets: the dirichlet/pathological/shards partitions split by this many
                           # quantile bins of the target, as by classes (ours)
    cut: int | None = None             # 2
    local_test_fraction: float | None = None  # 0.0; each client's seeded local test split, held out of
                                              # training (BESplit Sec. 3.1); reported as the *_local metrics
    validation: float = 0.0  # share of the training split held out as a validation split (ours): the run trains on
                             # the rest and evaluates on it instead of the test split, which it never loads (tuning)
    seed: int = 0
    transfer_dtype: str = "float32"
    deterministic: bool = False  # deterministic kernels (torch.use_deterministic_algorithms): GPU runs reproducible
    eval_every: int = 1
    eval_rounds: str = ""  # evaluate only in these rounds (and the last), e.g. "1-5,11-15", instead of every
                           # --eval-every (ours): a tuning trial evaluates only the rounds its search reads
    eval_passes: int = 10  # test-set passes per round of the per-client models' evaluation, dealt among them (ours)
    metrics: str = ""  # metrics of your own (raysfl.user_metrics): "name=module:function,..." or names of
                       # functions given to raysfl.run(cfg, metrics=...); columns test_<name>, test_<name>_local
    metrics_aggregation: str = "samples"  # how their passes combine: samples (by sample count), module:function
                                          # or a function given to raysfl.run(cfg, metrics_aggregation=fn)
    checkpoint_every: int = 1
    keep_checkpoints: int = 2  # the newest N checkpoints are kept (0: every one)
    keep_best: bool = False    # ... and the one of the best test accuracy
    mlflow: str | None = None  # MLflow tracking URI to log the run to (raysfl[mlflow]; raysfl.trackers)
    mlflow_artifacts: str | None = None  # where a new MLflow experiment keeps its artifacts (default: beside
                                         # a sqlite store's file; raysfl.trackers.artifact_root)
    out: str = "runs"
    name: str | None = None
    resume: str | None = None
    init_from: str | None = None  # a finished run directory: a new run starts from its final global model (ours)
    progress: bool = True
    # faults and their handling (docs/reliability.md)
    faults: str = ""                     # schedule: "kill:client:round=3,delay:client:p=0.3:seconds=2"
    max_restarts: int = 3                # Ray restarts of each actor before the run fails
    max_round_retries: int = 2           # retries of a round whose server or fed server died
    round_deadline_s: float | None = None  # real seconds: the round ends then; results later than this are dropped
    step_deadline_s: float | None = None   # real seconds a server step waits, after the step's first smashed
                                           # batch arrived, for the others (default: round_deadline_s / 4)
    sim_deadline_s: float | None = None    # simulated seconds: clients slower than this are dropped
    min_included: float = 0.5  # a round that includes fewer than this share of its selected clients is
                               # flagged (console warning, metrics column below_min_included)
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    resources: ResourceConfig = field(default_factory=ResourceConfig)
    algo_params: Any = None  # the algorithm's params dataclass, filled by resolve()

    def lr_at(self, rnd: int) -> float:
        """Learning rate of round ``rnd`` (1-based) for the client side (and the server side
        unless ``server_lr`` is set): ``lr`` times the schedule's multiplier (raysfl.schedules)."""
        from raysfl.schedules import factor

        return self.lr * factor(self.lr_schedule, self.lr_decay, rnd)

    def server_lr_at(self, rnd: int) -> float:
        """Learning rate of round ``rnd`` for the server side: the same schedule over ``server_lr``."""
        from raysfl.schedules import factor

        return (self.server_lr if self.server_lr is not None else self.lr) * factor(self.lr_schedule, self.lr_decay, rnd)

    @property
    def selected_per_round(self) -> int:
        return self.clients_per_round or self.clients

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["algo_params"] = dataclasses.asdict(self.algo_params) if self.algo_params else {}
        return d


# raysfl's own values of the settings an algorithm's paper may set (Config fields left None).
RUN_DEFAULTS: dict[str, Any] = {
    "model": "cnn", "clients": 10, "local_epochs": 1.0, "batch_size": 32, "lr": 0.05, "lr_decay": 1.0,
    "momentum": 0.9, "weight_decay": 0.0, "optimizer": "sgd", "partition": "iid", "alpha": 0.5,
    "classes_per_client": 2, "shards_per_client": 2, "quantity_skew": 0.0, "cut": 2, "local_test_fraction": 0.0,
}
# Config fields whose None means something of its own (all clients, epochs not steps, the
# client lr): an algorithm's paper setting fills them when left None, raysfl's does not.
NONE_MEANS = ("clients_per_round", "local_steps", "server_lr")

# The settings that define the data and the federation: every run of a comparison shares them
# (raysfl.compare), and a figure's caption states them (raysfl.plots).
DATA_DEFINING = ("dataset", "model", "cut", "clients", "clients_per_round", "rounds", "partition", "alpha",
                 "classes_per_client", "shards_per_client", "quantity_skew", "target_bins", "local_test_fraction", "validation", "local_epochs",
                 "local_steps", "batch_size", "epoch", "aggregation_weights")
TRANSFER_DTYPES = ("float32", "float16", "bfloat16")
EPOCH_RULES = ("pass", "stream")  # --epoch (runtime/planning.py)
AGGREGATION_WEIGHTS = ("data_size", "processed")  # --aggregation-weights (runtime/planning.py)
OPTIMIZERS = ("sgd", "adamw")  # --optimizer (built by raysfl/optim.py)
# --client-placement / --server-placement: Ray placement-group strategies (raysfl/runtime/placement.py)
STRATEGIES = ("SPREAD", "STRICT_SPREAD", "PACK", "STRICT_PACK", "none")
DIRECT_PAYLOADS = ("auto", "on", "off")
DEVICE_PAYLOADS = ("auto", "on", "off")
CO_HOST = ("auto", "on", "off")
EVAL_OVERLAP = ("auto", "on", "off")
CLIENT_BANK = ("on", "off")
SERVER_STREAM = ("off", "on")
UPDATE_SUMS = ("on", "off")
SNAPSHOT_REFS = ("auto", "on", "off")
RUN_AHEAD = ("on", "off")
SECTIONS = {"devices": DeviceConfig, "resources": ResourceConfig}
# What a config file may hold (ours): a real one is a few KB of about a hundred values, four levels deep
# (a list of faults, a fault, its keys, their values). The bounds hold while the file is read -- its bytes before
# it is parsed, a YAML file's values with every alias (*name) expanded before they are built -- so a
# few hundred bytes of nested aliases (a "billion laughs") are refused at once instead of being expanded.
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_VALUES = 10_000  # scalars, lists and mappings, aliases expanded
MAX_CONFIG_DEPTH = 10  # nested lists/mappings; the top-level mapping is 1


def type_name(t) -> str:
    """A dataclass field's type as written (``"float"``, ``"int | None"``), whether the module
    that declares it postpones annotations (a string) or not (a type)."""
    if isinstance(t, str):
        return t
    return t.__name__ if isinstance(t, type) else str(t).replace("typing.", "")


def optional(cls, name: str) -> bool:
    """Whether the dataclass field ``name`` may be None (its type names None)."""
    return "None" in type_name({x.name: x for x in dataclasses.fields(cls)}[name].type)


def coerce(cls, name: str, value: Any, where: str) -> Any:
    """Convert a file/CLI value to the dataclass field's type, or raise ConfigError.

    ``null`` (None) is taken only by fields that may be None (for the settings a paper may
    set it means "the default"); a boolean is not taken for a number (YAML's ``yes``), nor a
    list or mapping for a number, a name or a switch (``name: [a, b]`` is refused naming the
    key, not written as ``runs/['a', 'b']``). The value is echoed as a short excerpt."""
    f = {x.name: x for x in dataclasses.fields(cls)}[name]
    t = type_name(f.type)
    if value is None:
        if optional(cls, name):
            return None
        raise ConfigError(f"{where}{name}: cannot be null; expected {t} (leave it out for the default "
                          f"{f.default!r})" if f.default is not dataclasses.MISSING else
                          f"{where}{name}: cannot be null; expected {t}")
    try:
        if t.startswith("tuple"):
            if isinstance(value, str):
                value = [v for v in value.replace(",", " ").split()]
            if isinstance(value, (bool, dict)) or any(isinstance(v, bool) or not (_is_number(v) or isinstance(v, str))
                                                      for v in value):
                raise ValueError
            lo, hi = (float(v) for v in value)
            return (lo, hi)
        if not t.startswith("str") and not (_is_number(value) or isinstance(value, str)):  # a list, a mapping
            raise ValueError
        if isinstance(value, bool) and (t.startswith("int") or t.startswith("float")):
            raise ValueError
        if t.startswith("bool"):
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            if value in (0, 1):  # True, False, 0, 1 (YAML's and JSON's booleans, numpy's)
                return bool(value)
            raise ValueError
        if t.startswith("int"):
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if t.startswith("float"):
            return float(value)
        if t.startswith("str"):
            if isinstance(value, os.PathLike):
                return os.fspath(value)
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):  # a list where a name goes
                raise ValueError
            return str(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}{name}: cannot use {excerpt(value)}; expected {t}") from None
    return value


@functools.lru_cache(maxsize=64)  # asked every round (runtime.rounds: Experiment.evaluates): parsed once
def round_set(spec: str) -> frozenset[int]:
    """The rounds ``spec`` names: comma-separated rounds and ranges, e.g. ``"1-5,11-15,50"``
    (``--eval-rounds``, ours; SuperSFL's ``availability_rounds``). Raises ValueError naming the
    bad item."""
    out: set[int] = set()
    for item in (spec or "").replace(" ", "").split(","):
        if not item:
            continue
        lo, _, hi = item.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"{excerpt(item)} is not a round or a range of rounds (e.g. 1-5,11-15,50)") from None
        if a < 1 or b < a:
            raise ValueError(f"{excerpt(item)}: rounds count from 1, and a range goes up (e.g. 11-15)")
        out.update(range(a, b + 1))
    return frozenset(out)


def _is_number(value) -> bool:
    """A single number: Python's, NumPy's (``np.float32(0.1)``, ``np.bool_``); not a list or an array."""
    return isinstance(value, numbers.Number) or (hasattr(type(value), "__float__") and not hasattr(type(value), "__len__"))


def load_file(path: str | Path) -> dict:
    """Read a YAML or JSON config file into a dict; a file that is missing, a directory, not
    UTF-8 text, malformed, empty, that gives one setting twice, or that is larger than the
    bounds (:data:`MAX_CONFIG_BYTES`, :data:`MAX_CONFIG_VALUES` with aliases expanded,
    :data:`MAX_CONFIG_DEPTH`) raises ConfigError."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file '{path}' is a directory; expected a YAML or JSON file")
    if not p.exists():
        raise ConfigError(f"config file '{path}' does not exist")
    try:
        with p.open("rb") as f:  # at most one byte past the bound: a huge file (or /dev/zero) is not read whole
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file '{path}' is larger than {MAX_CONFIG_BYTES // 1024} KiB; a config "
                              f"holds a few KB of settings")
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x}); "
                          f"expected a YAML or JSON file") from None
    except OSError as e:
        raise ConfigError(f"config file '{path}' cannot be read: {e.strerror or e}") from None
    if "\0" in text:
        raise ConfigError(f"config file '{path}' holds NUL bytes (a binary file?); expected a YAML or JSON file")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_no_duplicates)
            _check_size(data, _json_children)
        else:
            data = _load_yaml(text)
    except ConfigError as e:
        raise ConfigError(f"config file '{path}': {e}") from None
    except Exception as e:  # yaml.YAMLError, json.JSONDecodeError, RecursionError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"config file '{path}' is malformed: {first}") from None
    if data is None:
        raise ConfigError(f"config file '{path}' holds no settings (it is empty or only comments); "
                          f"give at least one setting, or leave --config out for the defaults")
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of settings, got {type(data).__name__}")
    if any(not isinstance(k, str) for k in _keys(data)):
        bad = next(k for k in _keys(data) if not isinstance(k, str))
        raise ConfigError(f"config file '{path}': setting names must be text, got {bad!r}")
    return data


def _json_children(value) -> list:
    return list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []


def _yaml_children(node) -> list:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _check_size(root, children) -> None:
    """Refuse a config of more than :data:`MAX_CONFIG_VALUES` values or nested deeper than
    :data:`MAX_CONFIG_DEPTH`, counted as if every YAML alias were written out in full. Each
    distinct value (a YAML node: an alias is its anchor's node again) is visited once and its
    expanded size and depth remembered, so the count costs what the file's text does however
    far the aliases would expand; a value that holds itself is refused as malformed."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()

    too_deep = ConfigError(f"its settings nest deeper than {MAX_CONFIG_DEPTH} levels (lists, mappings and "
                           f"their values, aliases expanded); a config needs four")

    def visit(value, level: int) -> None:
        key = id(value)
        if key not in size:
            if level > MAX_CONFIG_DEPTH:
                raise too_deep
            open_.add(key)
            kids = children(value)
            for kid in kids:
                if id(kid) in open_:  # found as ValueError: "is malformed"
                    raise ValueError("an alias (*name) refers to a list or mapping that holds it; a config "
                                     "cannot hold itself")
                visit(kid, level + 1)
            open_.discard(key)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
        if level - 1 + depth[key] > MAX_CONFIG_DEPTH:  # also where an alias puts a known value deeper
            raise too_deep
        if size[key] > MAX_CONFIG_VALUES:
            raise ConfigError(f"it holds more than {MAX_CONFIG_VALUES:,} values (lists, mappings and their "
                              f"values, aliases (*name) expanded); a config holds about a hundred")

    visit(root, 1)


def _keys(data: dict, seen: set | None = None):
    """The keys of a mapping and of the mappings in it (the sections; a YAML alias that refers
    to its own mapping is walked once)."""
    seen = set() if seen is None else seen
    if id(data) in seen:
        return
    seen.add(id(data))
    for k, v in data.items():
        yield k
        if isinstance(v, dict):
            yield from _keys(v, seen)


def _no_duplicates(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ConfigError(f"setting '{k}' is given twice; give each setting once")
        out[k] = v
    return out


def _load_yaml(text: str):
    """``yaml.safe_load``, refusing a key given twice in one mapping (PyYAML keeps the last) and,
    before anything is built, a document over the bounds (:func:`_check_size`)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: PyYAML refuses it itself
                continue
            if dup:
                line = key_node.start_mark.line + 1
                raise ConfigError(f"setting '{key}' is given twice (again on line {line}); give each setting once")
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    loader = Loader(text)
    try:
        node = loader.get_single_node()  # the node graph: an alias is its anchor's node, nothing is expanded
        if node is None:
            return None
        _check_size(node, _yaml_children)  # before a value is built from it
        return loader.construct_document(node)
    finally:
        loader.dispose()
