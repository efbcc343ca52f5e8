"""The baselines' planners (the driver's role; no torch): whole-model clients without a
server (FedAvg, FedProx), one process on the pooled data (centralised), clients taking turns
(vanilla SL). The other baselines plan as SplitFed does (:class:`~raysfl.algorithms.roles.Planner`)."""

from __future__ import annotations

from raysfl.algorithms.roles.exchange import LocalExchange, SequentialExchange
from raysfl.algorithms.roles.planner import Planner


class WholeModelPlanner(Planner):
    """Every client holds the whole model and trains it locally: no cut, no server actors."""

    exchange = LocalExchange
    uses_cut = False


class CentralPlanner(WholeModelPlanner):
    """No exchange: one process trains on the pooled data."""

    exchange = None


class TakingTurns(Planner):
    """Vanilla SL's planning: the clients take turns on one server, one after another."""

    exchange = SequentialExchange
