"""The baselines every paper compares with, as algorithms (names, knobs, checks; no torch):
FedAvg, FedProx, vanilla split learning, SplitFed V1 and V2, parallel split learning, EPSL
(GAPSL's EPSSL baseline), and a centralised run of the same model (the upper bound). Their
roles: :mod:`~raysfl.algorithms.baselines.planner` (the driver's),
:mod:`~raysfl.algorithms.baselines.fedavg` (FedProx's client),
:mod:`~raysfl.algorithms.baselines.splitfed` (SL, SplitFed, PSL) and
:mod:`~raysfl.algorithms.baselines.epsl`; what each one is, in those modules' docstrings.
"""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role

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
    mu: float = knob(0.01, "FedProx: weight of the proximal term (mu/2)||w - w_global||^2", at_least=0)


class FedProx(FedAvg):
    name = "fedprox"
    summary = "FedAvg with a proximal term (mu/2)||w - w_global||^2 on each client"
    params_cls = FedProxParams
    client = role(f"{_BASE}.fedavg:ProximalClient")


class SplitLearning(Algorithm):
    name = "sl"
    summary = "Vanilla split learning: clients train one after another with one server model"
    planner = role(f"{_BASE}.planner:TakingTurns")


@dataclass
class SplitFedParams:
    # the clients get the first update's gradients
    server_updates: int = knob(1, "SplitFed: server updates per received batch of smashed data (ours: FLEX-SFL's "
                                  "tau_r, Sec. 3.3, for a comparison that holds the server's updates equal; "
                                  "1 = SplitFed)", integer=True, at_least=1)


class _SplitFed(Algorithm):
    params_cls = SplitFedParams

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        return {**super().facets(cfg), "server_updates": f"{cfg.algo_params.server_updates} per batch"}


class SplitFedV1(_SplitFed):
    name = "splitfed_v1"
    summary = "SplitFed V1: per-client server-side models, both sides averaged every round"
    server = role("raysfl.algorithms.roles.server:PerClientServer")


class SplitFedV2(_SplitFed):
    name = "splitfed_v2"
    summary = "SplitFed V2: one shared server-side model, client-side models averaged"


SERVER_REDUCTIONS = ("mean", "sum")
ROUND_STEPS = ("epoch", "equal")
# Local steps of a round: "epoch", each client its own epoch (the runtime's rule), or "equal",
# GAPSL's schedule (Sec. III-A): every client the same count, so every server step holds one batch
# of every client (planner.EqualSteps). PSL and EPSL take it as an option (ours) so that a
# comparison with GAPSL changes one thing.
ROUND_STEPS_HELP = ("equal (GAPSL Sec. III-A: every client in every server step) | epoch (each client its own "
                    "epoch); for PSL and EPSL an option of ours, for a comparison matched with GAPSL")


@dataclass
class RoundStepsParams:
    round_steps: str = knob("epoch", ROUND_STEPS_HELP, choices=ROUND_STEPS)


@dataclass
class PSLParams(RoundStepsParams):
    server_reduction: str = knob("mean", "PSL's / EPSL's server loss over the group: mean (over every sample: one "
                                         "step on the concatenated batch) | sum (of the clients' mean losses, as "
                                         "GAPSL's eq. 8 with every client kept; ours, for a matched comparison)",
                                 choices=SERVER_REDUCTIONS)




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


@dataclass
class EPSLParams(PSLParams):
    # PSL's server_reduction (ours for EPSL: "sum" matches GAPSL's eq. 8) and round_steps, and
    phi: float = knob(0.5, "EPSL: share of each batch whose last-layer gradients are averaged over the clients "
                           "(0 = PSL, 1 = every row)", at_least=0, at_most=1)


class EPSL(_MatchableFacets, Algorithm):
    name = "epsl"
    losses = ("cross_entropy",)  # its last-layer aggregation is the softmax cross-entropy's gradient
    summary = "EPSL: parallel split learning with last-layer gradient aggregation across clients"
    params_cls = EPSLParams
    client = role(f"{_BASE}.splitfed:KeepsOwnModel")
    planner = role(f"{_BASE}.planner:EqualSteps")  # round_steps: the runtime's rule unless "equal"
    server = role(f"{_BASE}.epsl:EPSLServer")
    aggregator = role("raysfl.algorithms.roles.aggregator:OwnModels")


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
