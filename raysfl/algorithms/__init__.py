"""Algorithm registry: ``--algo NAME`` resolves here.

One package per paper (``flex_sfl/``, ``super_sfl/``, ``gapsl/``, ``fed_pairing/``,
``besplit/``: the algorithm's roles and its pure mathematics) and one for the baselines
(``baselines/``); :mod:`raysfl.algorithms.spec` says what an algorithm is and
:mod:`raysfl.algorithms.roles` holds SplitFed's roles, every role's default. Each package's
``spec.py`` (name, knobs, paper setting, checks) imports no torch and names its roles by where
they live (:func:`~raysfl.algorithms.spec.role`): the registry, the command line and validation
stay light, the roles are imported where they run.

An algorithm from your own code joins with :func:`register` (a decorator): through
``raysfl.run`` directly, and on the command line with ``raysfl run --plugin MODULE`` (or an
installed package's ``raysfl.algorithms`` entry point). A name already taken, or a knob whose
flag another algorithm or a shared setting already uses, is refused at registration.
"""

from __future__ import annotations

import dataclasses
import importlib

from raysfl.algorithms.baselines.spec import (EPSL, Centralized, FedAvg, FedProx, ParallelSplitLearning, SplitFedV1,
                                              SplitFedV2, SplitLearning)
from raysfl.algorithms.besplit.spec import BESplit
from raysfl.algorithms.fed_pairing.spec import FedPairing
from raysfl.algorithms.flex_sfl.spec import FlexSFL
from raysfl.algorithms.gapsl.spec import GAPSL
from raysfl.algorithms.spec import Algorithm, NoParams
from raysfl.algorithms.super_sfl.spec import SuperSFL
from raysfl.errors import ConfigError, excerpt
from raysfl.user_code import guarded

ALGORITHMS: dict[str, type[Algorithm]] = {}
PLUGINS: list[str] = []  # modules loaded for their algorithms (``--plugin``, entry points), in order
ENTRY_POINT_GROUP = "raysfl.algorithms"


def _shared_settings() -> set[str]:
    from raysfl.config import Config, DeviceConfig, ResourceConfig

    return {f.name for cls in (Config, DeviceConfig, ResourceConfig) for f in dataclasses.fields(cls)}


def _knob_owner(cls: type[Algorithm], name: str) -> type:
    """The params dataclass that first defines knob ``name`` of ``cls`` (a subclass inherits it,
    or declares it again with a default of its own: the same knob, GAPSL's and PSL's
    ``round_steps``)."""
    for base in reversed(cls.params_cls.__mro__):
        if name in getattr(base, "__annotations__", {}):
            return base
    return cls.params_cls


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Add an algorithm to the registry (usable as a decorator). Refused, with one line: a name
    already taken, a knob named like a shared setting (``--rounds``), or a knob another
    algorithm already has unless both inherit it from the same params dataclass (one flag
    cannot mean two things)."""
    if not isinstance(cls, type) or not issubclass(cls, Algorithm) or not cls.name:
        raise ConfigError(f"register() takes an Algorithm subclass with a name, got {cls!r}")
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ConfigError(f"algorithm name '{cls.name}' is taken (by {ALGORITHMS[cls.name].__module__}."
                          f"{ALGORITHMS[cls.name].__qualname__}); choose another name")
    shared = _shared_settings()
    for f in dataclasses.fields(cls.params_cls):
        flag = "--" + f.name.replace("_", "-")
        if f.name in shared:
            raise ConfigError(f"algorithm '{cls.name}': knob '{f.name}' ({flag}) has the name of a shared setting; "
                              f"rename it")
        for other in ALGORITHMS.values():
            if other is cls or f.name not in {g.name for g in dataclasses.fields(other.params_cls)}:
                continue
            if _knob_owner(other, f.name) is not _knob_owner(cls, f.name):
                raise ConfigError(f"algorithm '{cls.name}': knob '{f.name}' ({flag}) is already a knob of "
                                  f"'{other.name}' with another meaning; rename it (e.g. '{cls.name}_{f.name}')")
    ALGORITHMS[cls.name] = cls
    return cls


for _cls in (FedAvg, FedProx, SplitLearning, SplitFedV1, SplitFedV2, ParallelSplitLearning, EPSL, FlexSFL, SuperSFL,
             GAPSL, FedPairing, BESplit, Centralized):
    register(_cls)


def load_plugin(module: str) -> None:
    """Import ``module`` for the algorithms it registers (``raysfl run --plugin MODULE``); its
    classes travel to the actors by value, so the module need not be installed on the nodes."""
    if module in PLUGINS:
        return
    if not module.strip() or module.startswith(".") or any(not part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"--plugin {excerpt(module)} is not a module name; give one importable from here "
                          f"(dotted identifiers), e.g. --plugin my_algo")
    try:
        guarded(module, lambda: importlib.import_module(module), "--plugin")
    except ImportError as e:
        raise ConfigError(f"--plugin {module}: cannot import it ({e}); give a module name importable from "
                          f"here (the current directory is on the path), e.g. --plugin my_algo") from None
    PLUGINS.append(module)


def load_entry_points() -> None:
    """Algorithms of installed packages that declare a ``raysfl.algorithms`` entry point."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.module not in PLUGINS:
            guarded(ep.module, ep.load, f"entry point {ep.name} ({ENTRY_POINT_GROUP}) of module")
            PLUGINS.append(ep.module)


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in ALGORITHMS:
        import difflib

        close = difflib.get_close_matches(str(name), list(ALGORITHMS), n=1, cutoff=0.6)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ConfigError(f"unknown algorithm {excerpt(name)}{hint}; allowed: {', '.join(ALGORITHMS)}; an algorithm of "
                          f"your own joins with --plugin MODULE (raysfl.run: import its module first)")
    return ALGORITHMS[name]


def plugin_of(spec: type[Algorithm]) -> str | None:
    """The module another process imports to have algorithm ``spec`` registered (recorded in a
    run's ``config.json`` as ``plugins``, so a resume or ``load_run`` needs no ``--plugin``):
    None for raysfl's own algorithms and for one defined in a script run as ``__main__``."""
    module = spec.__module__
    if module == "__main__" or module.split(".")[0] == "raysfl":
        return None
    # the module given to --plugin when it holds the algorithm's (sfl_prox for sfl_prox.algorithm)
    return next((p for p in PLUGINS if module == p or module.startswith(p + ".")), module)


def load_recorded_plugins(modules, where: str) -> None:
    """Import the ``plugins`` a run's config recorded (:func:`plugin_of`); one line when one
    cannot be imported here, naming the run's setting."""
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) for m in modules):
        raise ConfigError(f"{where}: 'plugins' must be a list of module names, got {excerpt(modules)}")
    for module in modules:
        try:
            load_plugin(module)
        except ConfigError as e:
            raise ConfigError(f"{where} was made with plugin module {excerpt(module)}, which cannot be imported here "
                              f"({str(e).split(': ', 1)[-1]})") from None


__all__ = ["ALGORITHMS", "Algorithm", "NoParams", "get_algorithm", "load_entry_points", "load_plugin",
           "load_recorded_plugins", "plugin_of", "register"]
