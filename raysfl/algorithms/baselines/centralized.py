"""Centralised training: the same model on the pooled data in one process (upper bound).

One round is the same amount of work as a federated round: every client's local samples
(``local_epochs`` passes over the pooled training set, or ``local_steps`` batches per
selected client), with the same batch size and optimizer. No Ray actors are used.
"""

from __future__ import annotations

from raysfl.algorithms.base import Algorithm, Protocol, Training


class Centralized(Algorithm):
    name = "centralized"
    summary = "The same model trained on the pooled data in one process (upper bound)"
    protocol = Protocol(training=Training.CENTRAL, servers=0)
