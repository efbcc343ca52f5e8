"""FedAvg and FedProx: every client trains the whole model locally; no split.

FedAvg (McMahan et al., 2017): clients start from the global model, run their local steps,
and the fed server averages the models weighted by sample count.
FedProx (Li et al., 2020): the same with a proximal term (mu/2) * ||w - w_global||^2 in each
client's objective, which limits client drift on non-IID data (FLEX-SFL uses mu = 0.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from raysfl.algorithms.roles import ClientSide, LocalExchange, Planner
from raysfl.algorithms.spec import Algorithm
from raysfl.errors import ConfigError


class WholeModelPlanner(Planner):
    """Every client holds the whole model and trains it locally: no cut, no server actors."""

    exchange = LocalExchange
    uses_cut = False


class FedAvg(Algorithm):
    name = "fedavg"
    summary = "Federated averaging: whole model on each client, weighted model averaging"
    planner = WholeModelPlanner


@dataclass
class FedProxParams:
    mu: float = 0.01  # weight of the proximal term (mu/2)||w - w_global||^2


class ProximalClient(ClientSide):
    """FedProx's client: the proximal term (mu/2)||w - w_global||^2 in its objective."""

    def regularizer(self, part, anchor):
        if self.params.mu == 0:
            return None
        terms = [((p - anchor[k]) ** 2).sum() for k, p in part.named_parameters() if k in anchor]
        return 0.5 * self.params.mu * torch.stack(terms).sum()


class FedProx(FedAvg):
    name = "fedprox"
    summary = "FedAvg with a proximal term (mu/2)||w - w_global||^2 on each client"
    params_cls = FedProxParams
    client = ProximalClient

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.algo_params.mu < 0:
            raise ConfigError(f"mu must be >= 0, got {cfg.algo_params.mu}")
