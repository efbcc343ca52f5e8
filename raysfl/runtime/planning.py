"""Planning a round: who takes part, where each client cuts the model, which server serves it,
how many local steps it takes (pure and deterministic: the same seed plans the same rounds,
on a resume too). The algorithm's driver hooks decide; this module turns their answers into
one :class:`ClientPlan` per client, which travels to the client actor."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from raysfl.algorithms.base import Algorithm, FederationContext


@dataclass
class ClientPlan:
    cut: int
    steps: int
    batch: int
    stream_pos: int
    lr: float = 0.0
    delay_s: float = 0.0  # real straggler delay (the client actor sleeps)
    deadline: float | None = None  # epoch seconds: the round's real-time deadline
    local: bool = False  # its server is unavailable this round: it trains alone (Algorithm.client_fallback)
    whole: bool = False  # it holds the whole model (FedPairing: cut = its propagation length)
    partner: int | None = None  # FedPairing: the client it splits the model with
    overlap: list[int] = field(default_factory=list)  # FedPairing: its overlapping layers (1-based)
    weight: float = 1.0  # FedPairing: the weight of its loss in both halves of its split step
    round: int = 0  # the round it trains in (1-based; e.g. BESplit's annealing lambda_t on the client)

    def as_dict(self) -> dict:
        return {"cut": self.cut, "steps": self.steps, "batch": self.batch, "stream_pos": self.stream_pos,
                "round": self.round,
                "lr": self.lr, "delay_s": self.delay_s, "deadline": self.deadline, "local": self.local,
                "whole": self.whole, "partner": self.partner, "overlap": self.overlap, "weight": self.weight}


def local_steps(cfg, n_samples: int) -> tuple[int, int]:
    """(steps, batch size) of a client with ``n_samples`` samples for one round."""
    batch = min(cfg.batch_size, n_samples)
    if cfg.local_steps is not None:
        return cfg.local_steps, batch
    return max(1, math.ceil(cfg.local_epochs * n_samples / batch)), batch


def plan_round(cfg, algo: Algorithm, rnd: int, ctx: FederationContext,
               stream_pos: dict[int, int]) -> tuple[dict[int, ClientPlan], dict[int, int]]:
    """Selection, cuts, servers and step counts for round ``rnd``: ({client: plan}, {client:
    server actor index})."""
    clients = algo.select(rnd, ctx)
    cuts = algo.assign_cuts(rnd, clients, ctx)
    server_of = algo.assign_servers(rnd, clients, cuts, ctx)
    plans = {}
    planned = algo.plan_steps(rnd, clients, ctx)
    for c in clients:
        steps, batch = planned[c] if planned is not None else local_steps(cfg, int(ctx.sizes[c]))
        plans[c] = ClientPlan(cuts[c], steps, batch, stream_pos.get(c, 0), cfg.lr_at(rnd), round=rnd)
    for c, pair in algo.pair_plan(rnd, clients).items():
        plans[c].whole, plans[c].partner, plans[c].overlap = True, pair["partner"], list(pair["overlap"])
        plans[c].weight = float(pair.get("weight", 1.0))
    return plans, server_of
