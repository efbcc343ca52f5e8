"""Centralised training: the same model on the pooled data in one process (upper bound).

One round is the same amount of work as a federated round: every client's local samples
(``local_epochs`` passes over the pooled training set, or ``local_steps`` batches per
selected client), with the same batch size and optimizer. No Ray actors are used
(``raysfl.runtime.centralized``).
"""

from __future__ import annotations

from raysfl.algorithms.baselines.fedavg import WholeModelPlanner
from raysfl.algorithms.spec import Algorithm


class CentralPlanner(WholeModelPlanner):
    """No exchange: one process trains on the pooled data."""

    exchange = None


class Centralized(Algorithm):
    name = "centralized"
    summary = "The same model trained on the pooled data in one process (upper bound)"
    planner = CentralPlanner
