"""The baselines' planners (the driver's role; no torch): whole-model clients without a
server (FedAvg, FedProx), one process on the pooled data (centralised), clients taking turns
(vanilla SL), and the equal step schedule of GAPSL (Sec. III-A) that PSL and EPSL take as an option
so that a comparison with GAPSL changes one thing. The other baselines plan as SplitFed does
(:class:`~raysfl.algorithms.roles.Planner`)."""

from __future__ import annotations

import math

import numpy as np

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


class EqualSteps(Planner):
    """Every server step holds one batch of every participant (GAPSL, Sec. III-A), where the
    algorithm's ``round_steps`` knob is ``equal``; its own epoch per client where ``epoch``."""

    def plan_steps(self, rnd: int, clients: list[int], ctx) -> dict[int, tuple[int, int]] | None:
        """``equal``: one step count for every client, so that each server step holds one batch
        of every participant: ``--local-steps``, or one epoch of the mean client,
        ``ceil(local_epochs x mean(n_k) / batch)`` (about one pass over the federation's data
        per round, as the runtime's own rule gives in total). ``epoch``: the runtime's rule."""
        if self.params.round_steps == "epoch":
            return None
        cfg = self.cfg
        steps = cfg.local_steps or max(1, math.ceil(cfg.local_epochs * float(np.mean(ctx.sizes)) / cfg.batch_size))
        return {c: (steps, min(cfg.batch_size, int(ctx.sizes[c]))) for c in clients}
