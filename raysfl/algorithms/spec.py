"""What an algorithm is: a spec of four roles, each running where it lives.

=================  ==============  =======================================================
role               runs on         decides
=================  ==============  =======================================================
``planner``        the driver      who takes part, cuts, servers, steps, per-client plan
                                   data (pairs), the exchange shape, simulated time
``client``         client actors   what a client does with its smashed data, its server's
                                   answer, and without one; what it uploads
``server``         server actors   the server-side model(s) and their step on a group
``aggregator``     the fed actor   what each client starts from, aggregation, evaluation
=================  ==============  =======================================================

SplitFed's behaviour is the default of every role (:mod:`raysfl.algorithms.roles`); a paper
subclasses only the roles it changes and names them on its :class:`Algorithm`::

    class MyAlgo(Algorithm):
        name = "my_algo"
        summary = "SplitFed V1 with a proximal term"
        params_cls = MyParams          # its knobs: each field is a flag and a config entry
        server = PerClientServer       # SplitFed V1's server side
        client = ProxClient            # the one thing it changes

Each role is built in its own process from the config, the :class:`FederationContext` and
the planner's ``shared()`` facts (plain data, taken once before the actors start), so no
process holds another's copy that could drift. A role keeps its own typed state.

A role may also be named by where it lives, ``role("package.module:Class")``: it is imported
when first used. raysfl's own algorithms name theirs so: their specs (name, knobs, paper
setting, ``validate``) sit in torch-free ``spec.py`` modules, so the registry, the command line
and validation never import torch; the planner is the one role validation uses (its modules
need no torch either).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # pragma: no cover
    from raysfl.algorithms.roles import Planner
    from raysfl.config import Config


class role:  # noqa: N801 - used like a class attribute's value: ``client = role("pkg.mod:Cls")``
    """A role class named ``"package.module:Class"``, imported on first access and kept."""

    def __init__(self, path: str):
        module, sep, name = path.partition(":")
        if not (module and sep and name):
            raise ValueError(f"role() takes 'package.module:Class', got {path!r}")
        self.path = path
        self._cls = None

    def __get__(self, obj, owner=None) -> type:
        if self._cls is None:
            module, _, name = self.path.partition(":")
            self._cls = getattr(importlib.import_module(module), name)
        return self._cls

    def __getstate__(self):  # travels as its path (an algorithm of yours sent by value)
        return {"path": self.path, "_cls": None}

    def __repr__(self) -> str:
        return f"role({self.path!r})"


@dataclass
class NoParams:
    """Algorithms without knobs of their own."""


class Algorithm:
    """An algorithm: its name, knobs and paper setting, and its four roles (SplitFed's by default)."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params_cls: ClassVar[type] = NoParams
    # The run settings of this algorithm's paper (optimizer, lr and decay, data split, model, ...):
    # every Config field the user leaves None takes its value from here when the config is
    # validated, on every entry point (Config(...), config_from_kwargs, files, the CLI).
    config_defaults: ClassVar[dict] = {}
    # ... and where the paper's setting depends on the data set (FLEX-SFL's Table 2: VGG-16 and
    # lr 0.03 on CIFAR-10): {dataset: {setting: value}}, applied before ``config_defaults``.
    dataset_defaults: ClassVar[dict] = {}
    # The targets its roles can train on (raysfl.objective): "classes" (class ids) and "values"
    # (real-valued, any loss). An algorithm that reads class labels itself (per-class counts, an
    # evidential or softmax-specific step) keeps "classes" only; validation refuses the others.
    targets: ClassVar[tuple[str, ...]] = ("classes", "values")
    # The losses it trains with, where its steps are written for one (None: any of those targets)
    losses: ClassVar[tuple[str, ...] | None] = None
    # The module that declares its paper's tables for ``raysfl reproduce`` (its ``TABLES``), if any
    tables: ClassVar[str | None] = None
    # SplitFed's roles (raysfl.algorithms.roles): a class, or role("package.module:Class")
    planner: ClassVar = role("raysfl.algorithms.roles.planner:Planner")
    client: ClassVar = role("raysfl.algorithms.roles.client:ClientSide")
    server: ClassVar = role("raysfl.algorithms.roles.server:ServerSide")
    aggregator: ClassVar = role("raysfl.algorithms.roles.aggregator:Aggregator")

    @classmethod
    def validate(cls, cfg: "Config") -> None:
        """Raise ConfigError for settings this algorithm cannot run with (before Ray starts)."""

    @classmethod
    def facets(cls, cfg: "Config") -> dict[str, str]:
        """What this algorithm does that a comparison must hold equal unless it compares it
        (:mod:`raysfl.reproduce.fairness`): how the server reduces a group's losses, how
        many local steps each client takes, the cost model its simulated time uses, how many
        clients train a round and how many updates the server makes per received batch. The
        defaults are SplitFed's; an algorithm whose knobs change one says so here."""
        return {"server_reduction": "mean", "round_steps": "epoch", "cost_model": "profiles",
                "participation": f"{cfg.clients_per_round or cfg.clients} of {cfg.clients} a round",
                "server_updates": "1 per batch"}

    @classmethod
    def columns(cls, cfg: "Config") -> list[str]:
        """The metric columns its roles fill with ``record`` (the planner's, the server's, the
        clients' through ``stats.record``, the aggregator's, or its evaluation's extras), in
        that order: one list, the one the runtime reads (a column nobody recorded in a round is
        NaN there)."""
        return [k for role in (cls.planner, cls.server, cls.client, cls.aggregator) for k in role.columns(cfg)]

    @classmethod
    def columns_written(cls, cfg: "Config") -> set[str]:
        """The metrics columns a run of ``cfg`` writes that a table or a tuning may read: the test
        accuracy and loss (on the local splits too, when the run holds them) and its
        :meth:`columns`."""
        written = {"test_accuracy", "test_loss"} | ({"test_accuracy_local"} if cfg.local_test_fraction else set())
        return written | set(cls.columns(cfg))

    @classmethod
    def make_planner(cls, cfg: "Config") -> Planner:
        """The driver's planner for a validated ``cfg`` (not yet set up)."""
        return cls.planner(cfg)

    @classmethod
    def roles(cls) -> dict[str, type]:
        return {"planner": cls.planner, "client": cls.client, "server": cls.server, "aggregator": cls.aggregator}


@dataclass(frozen=True)
class ResolvedAlgorithm:
    """An algorithm as one run uses it, resolved once when the config is validated
    (:func:`raysfl.resolve.validate_run`) and passed down: its spec (roles, knobs, facets) and its
    planner, built for the run's config (the runtime sets it up once the data are split). What
    the runtime asks of an algorithm it asks here, never by name again."""

    spec: type[Algorithm]
    planner: "Planner"

    @property
    def exchange(self):
        """How a round's steps are wired (None: one process, no actors: the centralised run)."""
        return self.planner.exchange

    @property
    def runs_actors(self) -> bool:
        return self.planner.exchange is not None

    @property
    def servers(self) -> int:
        """Server actors the run starts."""
        return self.planner.servers

    @property
    def plans_own_steps(self) -> bool:
        return self.planner.plans_own_steps()


def resolve_algorithm(spec: type[Algorithm], cfg: "Config") -> ResolvedAlgorithm:
    """``spec`` resolved for the validated ``cfg``: its planner built (not yet set up)."""
    return ResolvedAlgorithm(spec, spec.make_planner(cfg))
