"""GAPSL's planner (the driver's role; no torch): every server step holds one batch of every
participant (Sec. III-A), so every participant takes the same number of steps in a round."""

from __future__ import annotations

import math

import numpy as np

from raysfl.algorithms.roles.planner import Planner


class EqualSteps(Planner):
    """GAPSL's planning: every server step holds one batch of every participant."""

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
