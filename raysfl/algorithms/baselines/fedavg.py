"""FedAvg and FedProx: every client trains the whole model locally; no split.

FedAvg (McMahan et al., 2017): clients start from the global model, run their local steps,
and the fed server averages the models weighted by sample count.
FedProx (Li et al., 2020): the same with a proximal term (mu/2) * ||w - w_global||^2 in each
client's objective, which limits client drift on non-IID data (FLEX-SFL uses mu = 0.3).

Both plan with :class:`~raysfl.algorithms.baselines.planner.WholeModelPlanner` (specs:
:mod:`raysfl.algorithms.baselines.spec`); FedProx's client role is here.
"""

from __future__ import annotations

import torch

from raysfl.algorithms.roles import ClientSide


class ProximalClient(ClientSide):
    """FedProx's client: the proximal term (mu/2)||w - w_global||^2 in its objective."""

    def regularizer(self, part, anchor):
        if self.params.mu == 0:
            return None
        terms = [((p - anchor[k]) ** 2).sum() for k, p in part.named_parameters() if k in anchor]
        return 0.5 * self.params.mu * torch.stack(terms).sum()
