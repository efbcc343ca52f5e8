"""The baselines every paper compares with, as algorithms (names, knobs, checks; no torch):
FedAvg, FedProx, vanilla split learning, SplitFed V1 and V2, parallel split learning, EPSL
(GAPSL's EPSSL baseline), and a centralised run of the same model (the upper bound). Their
roles: :mod:`~raysfl.algorithms.baselines.planner` (the driver's),
:mod:`~raysfl.algorithms.baselines.fedavg` (FedProx's client),
:mod:`~raysfl.algorithms.baselines.splitfed` (SL, SplitFed, PSL) and
:mod:`~raysfl.algorithms.baselines.epsl`; what each one is, in those modules' docstrings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError

_BASE = "raysfl.algorithms.baselines"


class FedAvg(Algorithm):
    name = "fedavg"
    summary = "Federated averaging: whole model on each client, weighted model averaging"
    planner = role(f"{_BASE}.planner:WholeModelPlanner")

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        return {**super().facets(cfg), "server_reduction": "none (no server)"}


@dataclass
class FedProxParams:
    mu: float = 0.01  # weight of the proximal term (mu/2)||w - w_global||^2


class FedProx(FedAvg):
    name = "fedprox"
    summary = "FedAvg with a proximal term (mu/2)||w - w_global||^2 on each client"
    params_cls = FedProxParams
    client = role(f"{_BASE}.fedavg:ProximalClient")

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.algo_params.mu < 0:
            raise ConfigError(f"mu must be >= 0, got {cfg.algo_params.mu}")


class SplitLearning(Algorithm):
    name = "sl"
    summary = "Vanilla split learning: clients train one after another with one server model"
    planner = role(f"{_BASE}.planner:TakingTurns")


@dataclass
class SplitFedParams:
    # Server updates per received batch of smashed data (ours, not SplitFed's: FLEX-SFL's tau_r,
    # Sec. 3.3, so that a comparison with FLEX-SFL can hold the server's updates equal); the
    # clients get the first update's gradients. 1: SplitFed.
    server_updates: int = 1


class _SplitFed(Algorithm):
    params_cls = SplitFedParams

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        return {**super().facets(cfg), "server_updates": f"{cfg.algo_params.server_updates} per batch"}

    @classmethod
    def validate(cls, cfg) -> None:
        n = cfg.algo_params.server_updates
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"server_updates must be an integer >= 1 (1: SplitFed), got {n}")


class SplitFedV1(_SplitFed):
    name = "splitfed_v1"
    summary = "SplitFed V1: per-client server-side models, both sides averaged every round"
    server = role("raysfl.algorithms.roles.server:PerClientServer")


class SplitFedV2(_SplitFed):
    name = "splitfed_v2"
    summary = "SplitFed V2: one shared server-side model, client-side models averaged"


SERVER_REDUCTIONS = ("mean", "sum")


@dataclass
class RoundStepsParams:
    # Local steps of a round: "epoch", each client its own epoch (the runtime's rule), or
    # "equal", GAPSL's schedule (Sec. III-A): every client the same count, so every server step
    # holds one batch of every client (planner.EqualSteps). PSL and EPSL take it as an option
    # (ours) so that a comparison with GAPSL changes one thing.
    round_steps: str = "epoch"


@dataclass
class PSLParams(RoundStepsParams):
    # The server-side loss over the group: "mean" over every sample (one step on the
    # concatenated batch, the default) or "sum" of the clients' mean losses, sum_i L_i (the
    # reduction of GAPSL's eq. 8 with every client kept: the fair baseline for GAPSL's steps).
    server_reduction: str = "mean"


ROUND_STEPS = ("epoch", "equal")


def _check_matching_knobs(p) -> None:
    if p.server_reduction not in SERVER_REDUCTIONS:
        raise ConfigError(f"unknown server_reduction '{p.server_reduction}'; allowed: {', '.join(SERVER_REDUCTIONS)}")
    if p.round_steps not in ROUND_STEPS:
        raise ConfigError(f"unknown round_steps '{p.round_steps}'; allowed: {', '.join(ROUND_STEPS)}")


class _MatchableFacets:
    """PSL's and EPSL's facets follow their knobs."""

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        p = cfg.algo_params
        return {**super().facets(cfg), "server_reduction": p.server_reduction,
                "round_steps": p.round_steps}


class ParallelSplitLearning(_MatchableFacets, Algorithm):
    name = "psl"
    summary = "Parallel split learning: shared server-side model, no client-side aggregation"
    params_cls = PSLParams
    planner = role(f"{_BASE}.planner:EqualSteps")  # round_steps: the runtime's rule unless "equal"
    client = role(f"{_BASE}.splitfed:KeepsOwnModel")
    server = role(f"{_BASE}.splitfed:PSLServer")
    aggregator = role("raysfl.algorithms.roles.aggregator:OwnModels")

    @classmethod
    def validate(cls, cfg) -> None:
        _check_matching_knobs(cfg.algo_params)


@dataclass
class EPSLParams(PSLParams):
    # PSL's server_reduction (ours for EPSL: "sum" matches GAPSL's eq. 8) and round_steps, and
    phi: float = 0.5  # share of each batch whose last-layer gradients are aggregated (0 = PSL, 1 = all)


class EPSL(_MatchableFacets, Algorithm):
    name = "epsl"
    losses = ("cross_entropy",)  # its last-layer aggregation is the softmax cross-entropy's gradient
    summary = "EPSL: parallel split learning with last-layer gradient aggregation across clients"
    params_cls = EPSLParams
    client = role(f"{_BASE}.splitfed:KeepsOwnModel")
    planner = role(f"{_BASE}.planner:EqualSteps")  # round_steps: the runtime's rule unless "equal"
    server = role(f"{_BASE}.epsl:EPSLServer")
    aggregator = role("raysfl.algorithms.roles.aggregator:OwnModels")

    @classmethod
    def validate(cls, cfg) -> None:
        _check_matching_knobs(cfg.algo_params)
        phi = cfg.algo_params.phi
        if not (math.isfinite(phi) and 0 <= phi <= 1):
            raise ConfigError(f"phi must be in [0, 1] (0 = PSL, 1 = every row aggregated), got {phi}")


class Centralized(Algorithm):
    """Centralised training: the same model on the pooled data in one process (upper bound).

    One round is the same amount of work as a federated round: every client's local samples
    (``local_epochs`` passes over the pooled training set, or ``local_steps`` batches per
    selected client), with the same batch size and optimizer. No Ray actors are used
    (``raysfl.runtime.centralized``).
    """

    name = "centralized"
    summary = "The same model trained on the pooled data in one process (upper bound)"
    planner = role(f"{_BASE}.planner:CentralPlanner")
