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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from raysfl.algorithms.roles import Aggregator, ClientSide, Planner, ServerSide

if TYPE_CHECKING:  # pragma: no cover
    from raysfl.config import Config


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
    planner: ClassVar[type[Planner]] = Planner
    client: ClassVar[type[ClientSide]] = ClientSide
    server: ClassVar[type[ServerSide]] = ServerSide
    aggregator: ClassVar[type[Aggregator]] = Aggregator

    @classmethod
    def validate(cls, cfg: "Config") -> None:
        """Raise ConfigError for settings this algorithm cannot run with (before Ray starts)."""

    @classmethod
    def make_planner(cls, cfg: "Config") -> Planner:
        """The driver's planner for a validated ``cfg`` (not yet set up)."""
        return cls.planner(cfg)

    @classmethod
    def roles(cls) -> dict[str, type]:
        return {"planner": cls.planner, "client": cls.client, "server": cls.server, "aggregator": cls.aggregator}
