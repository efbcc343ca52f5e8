"""Planning a round: who takes part, where each client cuts the model, which server serves it,
how many local steps it takes (pure and deterministic: the same seed plans the same rounds,
on a resume too). The algorithm's planner decides; this module turns its answers into one
:class:`ClientPlan` per client, which travels to the client actor."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class ClientPlan:
    cut: int
    steps: int
    batch: int
    stream_pos: int
    lr: float = 0.0
    blocks: int | None = None  # the leading blocks the client holds (None: its cut; FedPairing: every block)
    delay_s: float = 0.0  # real straggler delay (the client actor sleeps)
    deadline: float | None = None  # epoch seconds: the round's real-time deadline (None: it finishes its work)
    local: bool = False  # its server is unavailable this round: it trains alone (the client role's fallback)
    round: int = 0  # the round it trains in (1-based; e.g. BESplit's annealing lambda_t on the client)
    role: object = None  # the planner's per-client data for the client role (FedPairing: its pair)

    def __post_init__(self):
        if self.blocks is None:
            self.blocks = self.cut


def local_steps(cfg, n_samples: int) -> tuple[int, int]:
    """(steps, batch size) of a client with ``n_samples`` samples for one round."""
    batch = min(cfg.batch_size, n_samples)
    if cfg.local_steps is not None:
        return cfg.local_steps, batch
    return max(1, math.ceil(cfg.local_epochs * n_samples / batch)), batch


def plan_round(cfg, planner, rnd: int, ctx, stream_pos: dict[int, int]) -> tuple[dict[int, ClientPlan], dict[int, int]]:
    """Selection, cuts, servers and step counts for round ``rnd``: ({client: plan}, {client:
    server actor index})."""
    clients = planner.select(rnd, ctx)
    cuts = planner.assign_cuts(rnd, clients, ctx)
    server_of = planner.assign_servers(rnd, clients, cuts, ctx)
    plans = {}
    planned = planner.plan_steps(rnd, clients, ctx)
    for c in clients:
        steps, batch = planned[c] if planned is not None else local_steps(cfg, int(ctx.sizes[c]))
        plans[c] = ClientPlan(cuts[c], steps, batch, stream_pos.get(c, 0), cfg.lr_at(rnd),
                              blocks=planner.model_blocks(cuts[c], ctx), round=rnd)
    for c, data in planner.client_plans(rnd, clients, cuts).items():
        plans[c].role = data
    return plans, server_of
