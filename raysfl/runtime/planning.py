"""Planning a round: who takes part, where each client cuts the model, which server serves it,
how many local steps it takes (pure and deterministic: the same seed plans the same rounds,
on a resume too). The algorithm's planner decides; this module turns its answers into one
:class:`ClientPlan` per client, which travels to the client actor."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace


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
    samples: int = 0  # the samples it trains on this round (steps x batch, less where batches end at epochs)
    bounded: bool = False  # --epoch pass: a batch ends where the client's epoch does (its last batch short)
    weight: float | None = None  # its weight in sample-weighted averages (None: the samples it trained on)

    def __post_init__(self):
        if self.blocks is None:
            self.blocks = self.cut
        if not self.samples:
            self.samples = self.steps * self.batch


def local_steps(cfg, n_samples: int) -> tuple[int, int]:
    """(steps, batch size) of a client with ``n_samples`` samples for one round under ``--epoch
    stream``: ``--local-steps``, else ``ceil(local_epochs x n / batch)`` full batches."""
    batch = min(cfg.batch_size, n_samples)
    if cfg.local_steps is not None:
        return cfg.local_steps, batch
    return max(1, math.ceil(cfg.local_epochs * n_samples / batch)), batch


def epoch_batches(n: int, batch: int, start: int, *, samples: int | None = None, steps: int | None = None) -> list[int]:
    """``--epoch pass``: the sizes of a client's batches from stream position ``start``, each
    ending where its epoch does (a pass over ``n`` samples, the last batch short, as PyTorch's
    DataLoader gives), until ``samples`` samples or ``steps`` batches are taken."""
    sizes, pos = [], start
    while (samples is not None and pos - start < samples) or (steps is not None and len(sizes) < steps):
        b = min(batch, n - pos % n)
        if samples is not None:
            b = min(b, start + samples - pos)
        sizes.append(b)
        pos += b
    return sizes


def client_schedule(cfg, n: int, start: int) -> tuple[int, int, int]:
    """(steps, batch, samples) of a client with ``n`` samples whose stream is at ``start``,
    under ``--epoch``: ``pass`` takes ``local_epochs`` passes (``round(local_epochs x n)``
    samples, at least one) in batches that end at epoch boundaries, or ``--local-steps`` such
    batches; ``stream`` takes full batches (:func:`local_steps`)."""
    if cfg.epoch == "stream":
        steps, batch = local_steps(cfg, n)
        return steps, batch, steps * batch
    batch = min(cfg.batch_size, n)
    if cfg.local_steps is not None:
        sizes = epoch_batches(n, batch, start, steps=cfg.local_steps)
    else:
        sizes = epoch_batches(n, batch, start, samples=max(1, round(cfg.local_epochs * n)))
    return len(sizes), batch, sum(sizes)


def aggregation_weight(cfg, n: int) -> float | None:
    """A client's weight in sample-weighted averages (FedAvg's n_k / n, McMahan et al. 2017,
    Algorithm 1): its data size ``n`` under ``--aggregation-weights data_size``; under
    ``processed`` None, i.e. the samples it trained on this round."""
    return float(n) if cfg.aggregation_weights == "data_size" else None


def plan_round(cfg, planner, rnd: int, ctx, stream_pos: Mapping[int, int],
               unavailable: set[int] = frozenset()) -> tuple[dict[int, ClientPlan], dict[int, int]]:
    """Selection, cuts, servers and step counts for round ``rnd``: ({client: plan}, {client:
    server actor index}). ``unavailable``: clients that cannot join it (churn,
    :func:`raysfl.faults.unavailable_clients`): the planner selects among the others
    (``ctx.unavailable``), and one it selects anyway is dropped."""
    if unavailable:
        ctx = replace(ctx, unavailable=frozenset(unavailable))
    clients = [c for c in planner.select(rnd, ctx) if c not in unavailable]
    cuts = planner.assign_cuts(rnd, clients, ctx)
    server_of = planner.assign_servers(rnd, clients, cuts, ctx)
    plans = {}
    planned = planner.plan_steps(rnd, clients, ctx)
    for c in clients:
        n, start = int(ctx.sizes[c]), stream_pos.get(c, 0)
        if planned is not None:  # the algorithm's own schedule: full batches of the stream
            steps, batch = planned[c]
            samples = steps * batch
        else:
            steps, batch, samples = client_schedule(cfg, n, start)
        plans[c] = ClientPlan(cuts[c], steps, batch, start, cfg.lr_at(rnd),
                              blocks=planner.model_blocks(cuts[c], ctx), round=rnd, samples=samples,
                              bounded=planned is None and cfg.epoch == "pass", weight=aggregation_weight(cfg, n))
    for c, data in planner.client_plans(rnd, clients, cuts).items():
        plans[c].role = data
    return plans, server_of
