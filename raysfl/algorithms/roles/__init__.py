"""The four roles of an algorithm, with SplitFed's behaviour as each one's default, and the
variants several papers share (a per-client server side, clients that keep their own models or
a module of their own, the exchange shapes).

The names are imported on first use: the planner's modules (``planner``, ``exchange``,
``context``) need no torch, so the registry and validation stay light; the client, server and
aggregator roles are imported where they run."""

from __future__ import annotations

import importlib

_LAZY = {
    "Aggregator": "aggregator", "OWN_MODEL_METRICS": "aggregator", "OwnModels": "aggregator",
    "evaluate_own_models": "aggregator",
    "ClientRound": "client", "ClientSide": "client", "Reply": "client",
    "ClientUpdate": "context", "FederationContext": "context",
    "Exchange": "exchange", "LocalExchange": "exchange", "SequentialExchange": "exchange", "SplitExchange": "exchange",
    "Wiring": "exchange",
    "HEAD": "own_module", "HEAD_OPTIMIZER": "own_module", "OwnModuleClient": "own_module",
    "Planner": "planner",
    "PerClientServer": "server", "ServerSide": "server", "StepResult": "server", "record_gradient_angle": "server",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
