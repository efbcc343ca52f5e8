"""The server role: the server-side model(s) and their step on a group, on a server actor
(SplitFed V2's by default: one model shared by the group, stepped on its concatenated batch).

The server actor (``raysfl.runtime.server_actor``) receives each step's smashed batches in one
call, unpacks them and hands them here as a list of (client, cut, activations, labels); it
packs the answers, counts each client's server FLOPs and bounds how long a step waits. Where
:meth:`ServerSide.streams` allows it and ``--server-stream`` is on, a step comes one client
actor's batches at a time (:meth:`ServerSide.step_part`, then :meth:`ServerSide.finish_step`).
This role owns the model, its optimiser and the algorithm's server-side state
(``self.state``: a dataclass of its own, kept across rounds and checkpointed).

:class:`PerClientServer` is SplitFed V1's: one copy of the server side per client during a
round, averaged at its end.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from raysfl.aggregation import weighted_average
from raysfl.angles import mean_pairwise_angle
from raysfl.algorithms.roles.context import FederationContext
from raysfl.algorithms.roles.records import Recorder
from raysfl.objective import objective_of
from raysfl.optim import build_optimizer
from raysfl.state_shapes import check_server_state
from raysfl.server_steps import (StackedCopies, finish_shared_step, per_client_gradients, per_client_server_step,
                                 shared_server_part, shared_server_step, stackable)
from raysfl.transport import load_optimizer_state, optimizer_state_to_wire, state_to_wire, wire_to_state


@dataclass
class StepResult:
    """A server step's answers: per client the gradient at its cut and its mean loss; what
    else goes back to a client with its gradient (``replies``: {name: float or tensor}, the
    client role reads them as ``reply.extra``; SuperSFL's server loss, BESplit's DTD teacher);
    rows a client's model ran beyond its own batch (BESplit's lent rows, eq. 33: they count
    towards its server FLOPs)."""

    grads: dict[int, torch.Tensor]
    losses: dict[int, float]
    replies: dict[int, dict[str, "torch.Tensor | float"]] = field(default_factory=dict)
    extra_rows: dict[int, int] = field(default_factory=dict)


def record_gradient_angle(server: "ServerSide", grads: torch.Tensor, angles: torch.Tensor | None = None) -> None:
    """The mean pairwise angle between the clients' server-side gradients (GAPSL's footnote 2,
    Fig. 3b), in degrees, as the ``grad_angle_deg`` metric (``angles``: their
    :func:`raysfl.angles.pairwise_angles`, where the caller has it)."""
    if len(grads) > 1:
        server.record("grad_angle_deg", math.degrees(mean_pairwise_angle(grads, angles)))


class ServerSide(Recorder):
    """SplitFed V2's server side."""

    state_cls: ClassVar[type | None] = None  # the role's state across rounds (a dataclass; None: none)

    def __init__(self, cfg, ctx: FederationContext, shared, model, device):
        self.cfg, self.ctx, self.shared, self.params = cfg, ctx, shared, cfg.algo_params
        self.objective = objective_of(ctx)  # the run's loss (raysfl.objective)
        self.model, self.device = model, device
        self.lr = cfg.server_lr if cfg.server_lr is not None else cfg.lr
        self.opt = self.optimizer(model.parameters())
        self.round = 0  # the round being trained (1-based)
        self.metrics: dict[str, list[float]] = {}  # this round's figures (``record``)
        self.state = self.state_cls() if self.state_cls is not None else None
        self._part_rows: int | None = None  # rows of the streamed step under way (None: none open)

    def optimizer(self, params) -> torch.optim.Optimizer:
        return build_optimizer(params, self.cfg, self.lr)

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """Metric columns the step fills with :meth:`record` (round means over steps and servers;
        NaN in a round without them). Default: the mean pairwise angle of the clients' server-side
        gradients with ``--grad-angles``."""
        return ["grad_angle_deg"] if cfg.grad_angles else []

    # ----------------------------------------------------------------- a round
    def begin_round(self, rnd: int, cuts: dict[int, int], lr: float | None) -> None:
        """The round's clients and cuts, and its learning rate (``--lr-decay``)."""
        self.round, self.metrics, self._part_rows = rnd, {}, None
        if lr is not None:
            self.lr = lr
            for group in self.opt.param_groups:
                group["lr"] = lr

    def step(self, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]]) -> StepResult:
        """One step on the group's batches (client, cut, smashed activations, labels), sorted by
        client: the concatenated forward/backward of :func:`raysfl.server_steps.shared_server_step`."""
        if self.cfg.grad_angles and len({b[1] for b in batches}) == 1:
            record_gradient_angle(self, per_client_gradients(self.model, batches, self.objective)[0])
        out = StepResult(*shared_server_step(self.model, self.opt, batches, self.objective))
        for _ in range(self.updates_per_step() - 1):  # more updates on the same batch: the clients have theirs
            shared_server_step(self.model, self.opt, batches, self.objective)
        return out

    def streams(self) -> bool:
        """Whether a step may take its group one client actor at a time (``--server-stream``,
        ours): :meth:`step_part` per sender, each answered at once, then :meth:`finish_step`. True
        where that is the concatenated step of :meth:`step` up to float rounding: this class's
        step (a subclass that overrides it says so itself), one update per batch, no gradient
        angles (they need the whole group), and no BatchNorm on the server side (it would
        normalise each part by its own statistics)."""
        return type(self).step is ServerSide.step and self.shared_step_streams()

    def shared_step_streams(self) -> bool:
        """Whether this run's shared step (:meth:`step` of this class) may stream: the rest of
        :meth:`streams`, for a subclass whose own step falls back on it."""
        return (self.updates_per_step() == 1 and not self.cfg.grad_angles
                and not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules()))

    def step_part(self, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]]) -> StepResult:
        """One sender's batches of a streamed step (:func:`raysfl.server_steps.shared_server_part`):
        their gradients and losses now; the parameters step in :meth:`finish_step`."""
        if self._part_rows is None:
            self.opt.zero_grad(set_to_none=True)
            self._part_rows = 0
        grads, losses, rows = shared_server_part(self.model, batches, self.objective)
        self._part_rows += rows
        return StepResult(grads, losses)

    def finish_step(self) -> None:
        """The end of a streamed step: one optimiser update on the mean over its parts' rows."""
        finish_shared_step(self.model, self.opt, self._part_rows or 0)
        self._part_rows = None

    def updates_per_step(self) -> int:
        """Optimiser updates per received batch (FLEX-SFL's tau_r; SplitFed's ``server_updates``,
        ours, 1 by default): the step repeats on the same batch, and the FLOPs are counted so."""
        return int(getattr(self.params, "server_updates", 1) or 1)

    def weights(self, weights: dict[int, float]) -> dict[int, float] | None:
        """At the end of a round: each client's aggregation weight (``weights``: their sample
        counts, clients dropped at a deadline left out). None keeps the sample counts; weights
        returned (BESplit's EA, eq. 10) are used for per-client server-side models, reported as
        ``agg_weight`` and handed to the aggregator (``round_weights``)."""
        return None

    def end_round(self, weights: dict[int, float], dropped: set[int]) -> None:
        """Fold the round into the server-side model (per-client copies: their average)."""

    def export(self, lo: int) -> dict[str, np.ndarray]:
        """The server-side blocks [lo, L), for the fed server."""
        return state_to_wire(self.model.part(lo, self.model.num_blocks).state_dict())

    def load_shared(self, state: dict[str, np.ndarray]) -> None:
        """Adopt a merged server-side state from the fed server (keys it holds; others stay)."""
        self.model.load_state_dict(wire_to_state(state, self.device), strict=False)

    # ----------------------------------------------------------------- snapshots and checkpoints
    def get_state(self) -> dict:
        """Model and optimiser as NumPy arrays (never the GPU's tensors: this goes to the driver
        and into checkpoints) and the role's state as plain data."""
        return {"model": state_to_wire(self.model.state_dict()), "opt": optimizer_state_to_wire(self.opt),
                "extra": dataclasses.asdict(self.state) if self.state is not None else {}}

    def load_state(self, state: dict) -> None:
        check_server_state(state, self.model, self.opt)  # one plain line for a checkpoint that does not fit
        self.model.load_state_dict(wire_to_state(state["model"], self.device))
        self.opt.zero_grad(set_to_none=True)  # nor half a streamed step
        self._part_rows = None
        load_optimizer_state(self.opt, state["opt"])
        if self.state_cls is not None:
            self.state = self.state_cls(**(state.get("extra") or {}))


class PerClientServer(ServerSide):
    """SplitFed V1's server side: every client trains its own copy during a round; the copies
    are averaged (by the weights of :meth:`weights`, sample counts by default) at its end.

    The copies are one stacked tensor per parameter, stepped together
    (:class:`raysfl.server_steps.StackedCopies`, BatchNorm's buffers stacked alike) where the
    round allows it (one cut, SGD); otherwise, and for subclasses that work on each copy's module
    (BESplit), modules of their own (``client_models``, ``client_opts``), reused from round to
    round rather than copied anew."""

    stacked_copies: ClassVar[bool] = True  # False: always modules of their own (a subclass that needs them)

    def begin_round(self, rnd, cuts, lr):
        super().begin_round(rnd, cuts, lr)
        self.client_models: dict[int, torch.nn.Module] = {}
        self.client_opts: dict[int, torch.optim.Optimizer] = {}
        self.stack = None
        if self.stacked_copies and cuts and stackable(self.model, cuts, self.cfg.optimizer):
            self.stack = StackedCopies(self.model, next(iter(cuts.values())), list(cuts), self.optimizer,
                                       self.objective)
            return
        spare = getattr(self, "_spare", [])
        state = self.model.state_dict() if spare else None
        for c in sorted(cuts):
            if spare:  # a copy an earlier round used, given this round's weights (copying a module per
                m = spare.pop()  # client and round was most of a 100-client round's server time)
                m.load_state_dict(state)
                for q in m.parameters():
                    q.grad = None
            else:
                m = copy.deepcopy(self.model)
            self.client_models[c] = m
            self.client_opts[c] = self.optimizer(m.parameters())

    def step(self, batches):
        updates = [self._update(batches) for _ in range(self.updates_per_step())]
        out = updates[0]  # the clients get the first update's gradients
        if self.cfg.grad_angles:  # each client's own copy holds its gradient right after its step
            record_gradient_angle(self, torch.stack([self.client_gradient(c, cut) for c, cut, _, _ in batches]))
        return out

    def _update(self, batches) -> StepResult:
        if self.stack is not None:
            return StepResult(*self.stack.step(batches))
        return StepResult(*per_client_server_step(self.client_models, self.client_opts, batches, self.objective))

    def client_gradient(self, client: int, cut: int) -> torch.Tensor:
        """The flat server-side gradient client ``client``'s copy holds after its step."""
        if self.stack is not None:
            return self.stack.gradient(client)
        part = self.client_models[client].part(cut, self.model.num_blocks)
        return torch.cat([p.grad.reshape(-1) for p in part.parameters() if p.grad is not None])

    def end_round(self, weights, dropped):
        if getattr(self, "stack", None) is not None:
            copies = {c: state_to_wire(s) for c, s in self.stack.states().items()}
        else:
            copies = {c: state_to_wire(m.state_dict()) for c, m in getattr(self, "client_models", {}).items()}
        states = [(copies[c], weights.get(c, 1.0)) for c in sorted(copies)
                  if weights.get(c, 1.0) > 0 and c not in dropped]
        if copies:
            merged = weighted_average(states, base=state_to_wire(self.model.state_dict()))
            self.model.load_state_dict(wire_to_state(merged, self.device))
        self._spare = getattr(self, "_spare", []) + list(getattr(self, "client_models", {}).values())
        self.client_models, self.client_opts, self.stack = {}, {}, None
