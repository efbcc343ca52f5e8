"""The four roles of an algorithm, with SplitFed's behaviour as each one's default, and the
variants several papers share (a per-client server side, clients that keep their own models or
a module of their own, the exchange shapes)."""

from raysfl.algorithms.roles.aggregator import OWN_MODEL_METRICS, Aggregator, OwnModels, evaluate_own_models
from raysfl.algorithms.roles.client import ClientRound, ClientSide, Reply
from raysfl.algorithms.roles.context import ClientUpdate, FederationContext
from raysfl.algorithms.roles.exchange import Exchange, LocalExchange, SequentialExchange, SplitExchange, Wiring
from raysfl.algorithms.roles.own_module import HEAD, HEAD_OPTIMIZER, OwnModuleClient
from raysfl.algorithms.roles.planner import Planner
from raysfl.algorithms.roles.server import PerClientServer, ServerSide, StepResult, record_gradient_angle

__all__ = ["Aggregator", "ClientRound", "ClientSide", "ClientUpdate", "Exchange", "FederationContext", "HEAD",
           "HEAD_OPTIMIZER", "LocalExchange", "OWN_MODEL_METRICS", "OwnModels", "OwnModuleClient", "PerClientServer",
           "Planner", "Reply", "SequentialExchange", "ServerSide", "SplitExchange", "StepResult", "Wiring",
           "evaluate_own_models", "record_gradient_angle"]
