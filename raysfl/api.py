"""The Python API: ``raysfl.run(Config(...))`` runs one experiment end to end; config in,
result out. How a run proceeds is :mod:`raysfl.runtime.experiment` and
:mod:`raysfl.runtime.rounds`.

    result = raysfl.run(cfg, model=my_blocks, data=(x, y), callbacks=[stop_at_90])
    net = result.model()               # the trained global model: your own module (e.g. your nn.Sequential)
    own = result.client_models()       # {client: model} where clients keep their own (PSL, GAPSL, FLEX-SFL)

Your own model and data (``model=``, ``data=``; docs/custom-model-data.md) reach the actors
as objects; callbacks (:mod:`raysfl.callbacks`) see every round's metrics row and may stop
the run. :func:`load_run` gives the same :class:`RunResult` for a run directory.
"""

from __future__ import annotations

import copy
import dataclasses
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from raysfl.algorithms import get_algorithm
from raysfl.config import Config
from raysfl.errors import ConfigError, first_line
from raysfl.resolve import from_dict, saved_config, validate_run
from raysfl.schedules import recorded_module

# Settings a resumed run may change (plus the ``resources`` section); everything else must
# match the original run. Fault handling is among them, so a run that gave up can go on: more
# retries or restarts, other deadlines, another fault schedule (``faults=""``: none). ``out``
# and ``name`` say where the run lives: a resume may repeat them, not change them.
RESUMABLE_OVERRIDES = {"rounds", "progress", "checkpoint_every", "eval_every", "eval_rounds", "resume",
                       "max_round_retries", "max_restarts", "round_deadline_s", "step_deadline_s", "sim_deadline_s",
                       "faults", "min_included", "keep_checkpoints", "keep_best", "mlflow", "mlflow_artifacts"}


@dataclass
class RunResult:
    """A run: its directory, its metrics rows (one dict per round, as in ``metrics.parquet``),
    its config, whether a callback stopped it early, and its trained models (from its
    checkpoints: the newest one, or that of a ``round`` still kept)."""

    run_dir: Path
    metrics: list[dict]
    config: Config | None = None
    stopped: bool = False
    _model: object = field(default=None, repr=False)   # the initial SplitModel: the architecture
    _prepared: object = field(default=None, repr=False)  # runtime.experiment.Prepared: the set-up roles
    _inputs: tuple = field(default=(None, None, None), repr=False)  # (model, data, loss) given to load_run
    checkpoint_round: int | None = field(default=None, repr=False)  # the round the last model came from

    @property
    def final(self) -> dict:
        return self.metrics[-1]

    # ----------------------------------------------------------------- the models back
    def _checkpoint(self, round: int | None) -> dict:
        from raysfl import checkpoint

        if round is not None:
            state = checkpoint.load_round(self.run_dir, round)
        elif not checkpoint.rounds_saved(self.run_dir):
            raise ConfigError(f"run '{self.run_dir}' has no checkpoint to take the model from "
                              f"(it ran with --checkpoint-every 0)")
        else:
            state = checkpoint.load_latest(self.run_dir)  # an unreadable newest one: the one before
        self.checkpoint_round = state.get("round")
        return state

    def _aggregator(self, fed_state: dict, set_up: bool):
        """The run's aggregator holding ``fed_state`` (a checkpoint's). ``set_up``: built as in the
        run, from the data's federation context and the planner's facts (FLEX-SFL's clusters decide
        its clients' models); otherwise from the config alone (the global model needs no more, so a
        run of your own model and data exports without them)."""
        spec = get_algorithm(self.config.algo)
        ctx = shared = None
        if set_up:
            if self._prepared is None:
                from raysfl.data import own_partition
                from raysfl.runtime.experiment import prepare

                cfg = copy.deepcopy(self.config)
                with custom_objects(cfg, *self._inputs), own_partition.stored(self.run_dir, cfg.partition):
                    self._prepared = prepare(*validate_run(cfg), run_dir=self.run_dir)
            ctx, shared = self._prepared.ctx, self._prepared.planner.shared()
        agg = spec.aggregator(self.config, ctx, shared, {})
        agg.load_state(fed_state)
        return agg

    def _keys(self) -> dict | None:
        from raysfl.models import own_keys

        return own_keys.read(self.run_dir)

    def _own_module(self, state: dict):
        """The model you brought (an nn.Sequential or a list of blocks), trained: ``state`` in its keys."""
        from raysfl.models import own_keys

        mine = self._inputs[0]
        if mine is None:
            raise ConfigError(f"run '{self.run_dir.name}' trained your own model ({self.config.model}); to get it "
                              f"back as your module pass it to load_run: raysfl.load_run(run_dir, model=my_model)"
                              f".model() (state_dict() gives its weights in your model's keys without it)")
        return _load(own_keys.as_module(mine), state)

    def _architecture(self):
        if self._model is None:
            from raysfl.data import dataset_info
            from raysfl.models import build_model, custom

            if custom.is_custom(self.config.model) and self._inputs[0] is None:
                raise ConfigError(f"run '{self.run_dir.name}' trained your own model ({self.config.model}); pass "
                                  f"it to load_run to get it back: raysfl.load_run(run_dir, model=my_model).model()")

            cfg = copy.deepcopy(self.config)
            with custom_objects(cfg, *self._inputs):
                info = dataset_info(cfg.dataset)
                self._model = build_model(cfg.model, info.input_shape, info.num_classes, seed=cfg.seed)
        return copy.deepcopy(self._model)

    def state_dict(self, round: int | None = None) -> dict:
        """The trained global model as a plain ``state_dict`` (torch tensors): in your module's
        keys for a model you brought as an nn.Sequential or a list of blocks (``0.weight``), else
        the :class:`~raysfl.models.SplitModel`'s ``blocks.<i>.<name>``. ConfigError where the
        algorithm keeps no single global model (PSL, GAPSL, FLEX-SFL: see :meth:`client_state_dicts`)."""
        from raysfl.models import own_keys

        return own_keys.to_own(self._split_state_dict(round), self._keys())

    def _split_state_dict(self, round: int | None) -> dict:
        from raysfl.trained import global_weights

        weights = global_weights(self.config, self._checkpoint(round), get_algorithm(self.config.algo))
        if weights is None:
            raise ConfigError(f"'{self.config.algo}' keeps no single global model (each client runs its own); "
                              f"use client_models() / raysfl export --clients")
        return _tensors(weights)

    def model(self, round: int | None = None):
        """The trained global model (in eval mode): your own module for a model you brought as an
        nn.Sequential or a list of blocks (a list as ``nn.Sequential(*blocks)``), else the
        :class:`~raysfl.models.SplitModel`."""
        if self._keys():
            return self._own_module(self.state_dict(round))
        return _load(self._architecture(), self.state_dict(round))

    def client_state_dicts(self, round: int | None = None) -> dict[int, dict]:
        """{client: state_dict} of the model each client would run, where it is not the global
        one (the aggregator's ``client_model``: PSL's and GAPSL's own client sides with the shared
        server side, FLEX-SFL's cluster models), in your module's keys as :meth:`state_dict`; {}
        where every client runs the global model."""
        from raysfl.models import own_keys

        keys = self._keys()
        return {c: own_keys.to_own(s, keys) for c, s in self._split_client_state_dicts(round).items()}

    def _split_client_state_dicts(self, round: int | None) -> dict[int, dict]:
        state = self._checkpoint(round)
        if "model" in state:
            return {}
        agg = self._aggregator(state["federation"]["fed"], set_up=True)
        out = {}
        for c in range(self.config.clients):
            s = agg.client_model(c)
            if s is not agg.global_state:
                out[c] = _tensors(s)
        return out

    def client_models(self, round: int | None = None) -> dict:
        """{client: model} for :meth:`client_state_dicts`, your own module as :meth:`model` (one
        model per client: memory grows with clients)."""
        if self._keys():
            return {c: self._own_module(s) for c, s in self.client_state_dicts(round).items()}
        arch = self._architecture()
        return {c: _load(copy.deepcopy(arch), s) for c, s in self.client_state_dicts(round).items()}


def _tensors(weights: dict) -> dict:
    import numpy as np
    import torch

    return {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}


def _load(model, state: dict):
    model.load_state_dict(state, strict=True)
    return model.eval()


def resume_config(run_dir: str | Path, overrides: dict | None = None, trust_run_config: bool = False) -> Config:
    """The config of an existing run, with the few settings a resume may change
    (:data:`RESUMABLE_OVERRIDES`, ``resources``). Any other setting may be given too -- the
    original command repeated -- as long as it means the value the run was made with, however it
    is written (the flag's string ``'2'``, a file's ``2.0``, the API's ``2``): the two are
    compared as typed, resolved values. ``out`` and ``name`` must name this run directory.

    What the run directory says is not trusted beyond that (ours): a destination its config.json
    names (:data:`DESTINATIONS`: an MLflow URI, which would receive the model and checkpoints) is
    shown in one line and not used unless ``overrides`` give it again, and the plugin modules it
    records are imported only from this environment, never from inside the run directory
    (:func:`_recorded_plugins`); ``trust_run_config`` (``--trust-run-config``) takes both as
    recorded. The modules and the destinations taken are named in the resume's first line."""
    if not (Path(run_dir) / "config.json").is_file():
        raise ConfigError(f"cannot resume '{run_dir}': no config.json in it")
    data = saved_config(run_dir)
    plugins = _recorded_plugins(Path(run_dir), data.get("plugins"), trust_run_config)
    plugins += _recorded_metrics(Path(run_dir), data, trust_run_config)
    module = recorded_module(data.get("lr_schedule"))  # a function schedule's module, likewise
    if module is not None:
        _check_recorded_module(Path(run_dir), module, trust_run_config,
                               f"cannot resume '{run_dir}': its config.json names an lr-schedule of module")
    overrides = dict(overrides or {})
    unused, kept = _destinations(data, overrides, trust_run_config)
    resources = overrides.pop("resources", {}) or {}
    if not isinstance(resources, dict):
        raise ConfigError(f"section 'resources' must be a mapping, got {resources!r}")
    saved = from_dict(copy.deepcopy(data))
    asked = from_dict({k: v for k, v in overrides.items() if k not in ("out", "name")}, base=copy.deepcopy(saved))
    changed = _first_change(saved, asked)
    if changed:
        name, was, got = changed
        raise ConfigError(f"cannot change '{name}' when resuming (it was {was!r}, asked {got!r}); allowed: "
                          f"{', '.join(sorted(RESUMABLE_OVERRIDES - {'resume'}))} and resources")
    _check_place(Path(run_dir), data, overrides)
    # Where actors run does not change what they compute: resources may change on resume.
    data["resources"] = {**data.get("resources", {}), **resources}
    data.update({k: v for k, v in overrides.items() if k in RESUMABLE_OVERRIDES})
    cfg = from_dict(data)
    cfg.resume = str(run_dir)
    _say_resuming(Path(run_dir), plugins, unused, kept)
    return cfg


@dataclass
class ResumePoint:
    """Where a run cut off in its directory goes on from: the round of its newest checkpoint,
    its metrics rows up to that round, and the config that resumes it (None: it had run every
    round)."""

    round: int
    rows: list[dict]
    config: Config | None


def resume_point(run_dir: str | Path, rounds: int) -> ResumePoint | None:
    """The :class:`ResumePoint` of a run of ``rounds`` rounds left in ``run_dir`` by a process
    that was stopped (``raysfl reproduce``'s runs and tuning trials, which run with checkpoints
    so that a session's end costs at most a tenth of a run); None where it holds no checkpoint.
    Raises ConfigError or OSError where the directory cannot be resumed (its files damaged):
    the caller then starts the run again from round 1."""
    from raysfl import checkpoint
    from raysfl.metrics import read_rows

    run_dir = Path(run_dir)
    saved = checkpoint.rounds_saved(run_dir) if (run_dir / "config.json").is_file() else []
    if not saved:
        return None
    try:
        rows = [r for r in read_rows(run_dir / "metrics.parquet") if r["round"] <= saved[-1]]
    except (OSError, ValueError, KeyError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ConfigError(f"'{run_dir}': its metrics.parquet is unreadable ({first_line(e)}); this run "
                          f"directory was damaged") from None
    if saved[-1] >= rounds:
        return ResumePoint(saved[-1], rows, None)
    return ResumePoint(saved[-1], rows, resume_config(run_dir, {"progress": False}))


# Settings of a run's config.json that send the run somewhere: MLflow receives its parameters,
# metrics, files, trained model and newest checkpoint. A resume takes them from its own command.
DESTINATIONS = {"mlflow": "mlflow URI", "mlflow_artifacts": "mlflow artifact location"}


def _destinations(data: dict, overrides: dict, trust: bool) -> tuple[dict, dict]:
    """({setting: value} of the destinations ``data`` (a config.json) names that this resume does
    not use -- removed from ``data`` -- and {setting: value} of those it keeps because of
    ``trust``). One the resume gives again (``overrides``, even as None) is the resume's own."""
    unused, kept = {}, {}
    for name in DESTINATIONS:
        value = data.get(name)
        if value is None or name in overrides:
            continue
        if trust:
            kept[name] = value
        else:
            unused[name] = value
            data[name] = None
    return unused, kept


def _shown(value) -> str:
    """``value`` as one shell word for a line that suggests a command (repr where it holds control characters)."""
    import shlex

    text = str(value)
    return shlex.quote(text) if text.isprintable() else repr(text)


def _say_resuming(run_dir: Path, plugins: list[str], unused: dict, kept: dict) -> None:
    """The resume's first line: the plugin modules imported and the destinations taken from the
    run's config.json; then one line per destination it names and the resume does not use."""
    import sys

    taken = [p if p.startswith("metric module ") else f"plugin module {p}" for p in plugins] + [f"{DESTINATIONS[k]} {_shown(v)} (--trust-run-config)"
                                                      for k, v in kept.items()]
    if taken:
        print(f"raysfl: resuming {_shown(run_dir)} with {', '.join(taken)} as its config.json records",
              file=sys.stderr, flush=True)
    for name, value in unused.items():
        flag = "--" + name.replace("_", "-")
        print(f"raysfl: config.json names {DESTINATIONS[name]} {_shown(value)}; not used -- pass {flag} "
              f"{_shown(value)} again or --trust-run-config", file=sys.stderr, flush=True)


def _recorded_plugins(run_dir: Path, modules, trust: bool) -> list[str]:
    """Import the plugin modules a run's config.json records (``plugins``: its algorithm's,
    :func:`raysfl.algorithms.plugin_of`) for a resume: only where this environment has them --
    installed, or on the Python path (``--plugin`` adds the current directory) -- and not from
    inside the run directory (code that came with it runs only when named: ``--plugin MODULE``, or
    ``trust``). One line naming the module otherwise. Returns each as 'module (its file)'."""
    import sys

    from raysfl.algorithms import PLUGINS, load_recorded_plugins

    if modules is None:
        return []
    where = f"cannot resume '{run_dir}': its config.json names plugin module"
    for module in modules if isinstance(modules, (list, tuple)) else ():
        if not isinstance(module, str) or module in PLUGINS or not all(p.isidentifier() for p in module.split(".")):
            continue  # given with --plugin, or refused by load_recorded_plugins with its own line
        _check_recorded_module(run_dir, module, trust, where)
    load_recorded_plugins(modules, f"run '{run_dir}'")
    shown = []
    for module in modules:
        path = getattr(sys.modules.get(module), "__file__", None)
        shown.append(f"{module} ({path})" if path else module)
    return shown


def _recorded_metrics(run_dir: Path, data: dict, trust: bool) -> list[str]:
    """The modules of the metrics of your own a run's config.json records (``name=module:function``),
    held to the rule of :func:`_recorded_plugins` (importable here, not from inside the run
    directory unless ``trust``); the run imports them when it starts. Returns each as 'module'."""
    from raysfl import user_metrics

    probe = Config(metrics=str(data.get("metrics") or ""),
                   metrics_aggregation=str(data.get("metrics_aggregation") or user_metrics.SAMPLES))
    mods = user_metrics.modules(probe)
    for module in mods:
        _check_recorded_module(run_dir, module, trust,
                               f"cannot resume '{run_dir}': its config.json names a metric of module")
    return [f"metric module {m}" for m in mods]


def _check_recorded_module(run_dir: Path, module: str, trust: bool, where: str) -> None:
    """One line unless ``module`` is importable here from outside the run directory (or ``trust``)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module.split(".")[0])  # the top package: nothing of it runs
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ConfigError(f"{where} '{module}', which is not importable here (not installed, not on the Python "
                          f"path); install it, or pass --plugin {module} from the directory that holds it")
    origin = spec.origin if spec.has_location else next(iter(spec.submodule_search_locations or ()), None)
    if origin and not trust and Path(origin).resolve().is_relative_to(run_dir.resolve()):
        raise ConfigError(f"{where} '{module}', which would be imported from inside the run directory "
                          f"({origin}); a resume runs no code that came with the run: pass --plugin {module} "
                          f"to import it, or --trust-run-config")


def _first_change(saved: Config, asked: Config) -> tuple[str, object, object] | None:
    """(setting, saved value, asked value) of the first setting a resume may not change that
    differs between the two typed configs, or None."""
    free = RESUMABLE_OVERRIDES | {"resources", "out", "name", "algo_params", "devices"}
    for f in dataclasses.fields(Config):
        if f.name not in free and getattr(saved, f.name) != getattr(asked, f.name):
            return f.name, getattr(saved, f.name), getattr(asked, f.name)
    for f in dataclasses.fields(saved.devices):
        if getattr(saved.devices, f.name) != getattr(asked.devices, f.name):
            return f"devices.{f.name}", getattr(saved.devices, f.name), getattr(asked.devices, f.name)
    mine, theirs = dataclasses.asdict(saved.algo_params), dataclasses.asdict(asked.algo_params)
    for k, v in mine.items():
        if theirs.get(k) != v:
            return f"{saved.algo}.{k}", v, theirs.get(k)
    return None


def _check_place(run_dir: Path, data: dict, overrides: dict) -> None:
    """``out`` and ``name`` given on resume must name the run directory itself (as the original
    command did): the resumed run stays where it is, and its config.json must not say otherwise."""
    if "out" in overrides and overrides["out"] != data.get("out"):
        out = str(overrides["out"])
        if not out or Path(out).expanduser().resolve() != run_dir.resolve().parent:
            raise ConfigError(f"cannot change 'out' when resuming: the run lives in '{run_dir}' (its out was "
                              f"{data.get('out')!r}, asked {overrides['out']!r}); drop --out")
    if "name" in overrides and overrides["name"] not in (data.get("name"), run_dir.resolve().name):
        raise ConfigError(f"cannot change 'name' when resuming: the run is '{run_dir.resolve().name}' (its name was "
                          f"{data.get('name')!r}, asked {overrides['name']!r}); drop --name")


def load_run(run_dir: str | Path, *, model=None, data=None, loss=None) -> RunResult:
    """The :class:`RunResult` of an existing run directory (finished or not): its config, its
    metrics and, from its checkpoints, its models. A run of your own model needs it again
    (``model=``: the object you gave ``raysfl.run``, its weights need not be the trained ones) for
    :meth:`RunResult.model` to give your module back, trained; :meth:`RunResult.state_dict` gives
    its weights in your model's keys without it. The clients' models of a run of your own data
    need the data again (``data=``), and a loss of your own with it (``loss=``)."""
    from raysfl.metrics import read_rows

    run_dir = Path(run_dir)
    cfg = from_dict(saved_config(run_dir))
    return RunResult(run_dir, read_rows(run_dir / "metrics.parquet"), config=cfg, _inputs=(model, data, loss))


@contextmanager
def custom_objects(cfg: Config, model=None, data=None, loss=None, partition=None):
    """Your own data, model, loss and partition, if given, registered in this process for the
    block under ``custom-<name>`` (cfg.dataset / cfg.model / cfg.loss / cfg.partition are set to
    them; a ``custom-...`` name already in the config, e.g. of a run being resumed, is kept), so
    validation and the driver find them like built-in ones (:mod:`raysfl.data.custom`,
    :mod:`raysfl.models.custom`, :mod:`raysfl.objective`, :mod:`raysfl.data.own_partition`). A
    built-in loss or partitioner given by name (``loss="mse"``) is just set."""
    from raysfl import objective
    from raysfl.data import custom as custom_data
    from raysfl.data import dataset_info, own_partition
    from raysfl.models import custom as custom_model

    with ExitStack() as stack:
        stack.enter_context(own_partition.given(cfg, partition))
        if loss is not None:
            own = objective.as_loss(loss)
            if objective.is_custom(own.name):
                if objective.is_custom(cfg.loss) and own.name != cfg.loss:
                    own = dataclasses.replace(own, name=cfg.loss)
                stack.enter_context(objective.registered(own))
            cfg.loss = own.name
        if data is not None:
            targets = objective.get_loss(cfg.loss).targets
            ds = custom_data.as_dataset(data, targets=targets)
            if custom_data.is_custom(cfg.dataset) and ds.name != cfg.dataset:
                ds = dataclasses.replace(ds, name=cfg.dataset)
            cfg.dataset = ds.name
            stack.enter_context(custom_data.registered(ds))
        if model is not None:
            info = dataset_info(cfg.dataset)
            split = custom_model.as_split_model(model, info.input_shape, info.num_classes, info.targets)
            if custom_model.is_custom(cfg.model):
                split.name = cfg.model
            cfg.model = split.name
            stack.enter_context(custom_model.registered(split))
        yield cfg


def run(cfg: Config, *, model=None, data=None, loss=None, partition=None, callbacks=None, metrics=None,
        metrics_aggregation=None) -> RunResult:
    """Run (or resume, if ``cfg.resume`` is set) one experiment and return its result.

    ``model``: your own model (a SplitModel, a list of blocks or an nn.Sequential) instead of
    ``cfg.model``; ``data``: your own data ((x, y), (x_train, y_train, x_test, y_test), a torch
    Dataset or a (train, test) pair of them, a data set of dicts such as a Hugging Face
    ``datasets.Dataset``) instead of ``cfg.dataset`` (docs/custom-model-data.md). ``partition``:
    which client holds each training sample, an array of client ids (one per training sample) or
    a function ``(targets, num_clients, seed) -> client ids``, instead of ``cfg.partition``
    (:mod:`raysfl.data.own_partition`; kept in the run directory as ``partition.npy``).
    ``loss``: the training loss, for tasks other than single-label classification: ``"mse"``
    (regression), ``"bce"`` (multi-label), a function ``(outputs, targets) -> mean loss`` or
    :class:`raysfl.Loss` (:mod:`raysfl.objective`); it decides how ``data``'s targets are read.
    ``callbacks``: functions of each round's metrics row, or :class:`raysfl.callbacks.Callback`
    objects; one returning True stops the run after that round. ``metrics``: metrics of your own,
    ``{name: fn(outputs, targets) -> number or dict}`` (or ``"module:function"``), run on every
    evaluated round's test pass and the clients' local test splits as columns ``test_<name>`` and
    ``test_<name>_local``; ``metrics_aggregation``: ``fn([(samples, value), ...]) -> value``
    combining the passes of several models or clients (default: by sample count;
    :mod:`raysfl.user_metrics`). The config is validated before
    anything starts; the run itself is :func:`raysfl.runtime.experiment.run_experiment`.
    """
    from raysfl import user_metrics
    from raysfl.callbacks import Callbacks
    from raysfl.runtime import interrupts
    from raysfl.runtime.experiment import run_experiment

    hooks = Callbacks(callbacks)  # a bad callback is refused before anything starts
    # SIGINT and SIGTERM raise interrupts.Interrupted (a KeyboardInterrupt) while the run goes on:
    # the finished rounds are checkpointed on the way out (docs/reliability.md, "Signals")
    with custom_objects(cfg, model, data, loss, partition), \
            user_metrics.registered(cfg, metrics, metrics_aggregation), interrupts.handling():
        cfg, algo = validate_run(cfg)
        warm = None
        if cfg.init_from is not None and not cfg.resume:  # the weights fit, before any run directory
            from raysfl import warm_start

            warm = warm_start.load(cfg)
        run_dir, rows, prepared, stopped = run_experiment(cfg, algo, hooks, warm)
    return RunResult(run_dir, rows, config=cfg, stopped=stopped, _model=prepared.model, _prepared=prepared,
                     _inputs=(model, data, loss))


def shutdown() -> None:
    """Shut down the Ray raysfl started in this process, and the actors it keeps warm for the
    next run (it happens by itself when the process exits)."""
    from raysfl.runtime.placement import shutdown_ray

    shutdown_ray()


def config_from_kwargs(**kwargs) -> Config:
    """Build a Config from keyword settings, e.g. ``config_from_kwargs(algo="psl", rounds=3)``."""
    return from_dict(kwargs)


__all__ = ["Config", "RunResult", "run", "resume_config", "config_from_kwargs", "load_run", "shutdown"]
