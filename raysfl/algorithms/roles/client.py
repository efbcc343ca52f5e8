"""The client role: what one virtual client does in a round, on its client actor (SplitFed's by
default: back-propagate the server's gradient at the cut, step, upload the client-side model).

The client actor (``raysfl.runtime.client_actor``) hosts many virtual clients. For each of
the round's clients it builds a :class:`ClientRound` -- the client-side part of the model
loaded with the client's start state, its optimiser, its batch stream position and its
statistics -- and calls this role at the points of the step where an algorithm may differ:

=====================  ===================================================================
method                 when
=====================  ===================================================================
``begin``              the client starts its round (its start state in hand)
``forward``            right after its forward pass, before the smashed data leaves
``backward``           the server's answer arrived: update the client-side part
``fallback``           no answer (server dead, silent past ``server_timeout_s``, or off line)
``local_step``         whole-model clients (FedAvg): one local step
``update``             the round is over: what goes to the fed server
=====================  ===================================================================

A role keeps per-client scratch in ``c.state`` (its own dataclass, made by ``new_state``) and
writes figures with ``c.stats.record(name, value)`` (listed in ``columns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from raysfl.algorithms.roles.context import ClientUpdate, FederationContext
from raysfl.objective import objective_of
from raysfl.transport import ClientRoundStats, state_nbytes, state_to_wire


def backprop(acts: torch.Tensor, grad: torch.Tensor, extra: torch.Tensor | None = None) -> None:
    """Back-propagate the gradient ``grad`` that came back for the tensor ``acts`` (the smashed
    data at a cut, a partner's logits), plus the gradient of a scalar ``extra`` (a regulariser):
    d/dw [<acts, grad> + extra]. Written as the backward of a scalar, which gives ``acts`` the
    gradient ``1.0 * grad``, bit for bit ``acts.backward(grad)``'s; that form would import
    torch's symbolic-shape checks (sympy: 0.6 s of CPU in every client process's first step)."""
    objective = (acts * grad).sum()
    (objective if extra is None else objective.add(extra)).backward()


@dataclass
class Reply:
    """The server's answer to one smashed batch, as the client role sees it."""

    grad: torch.Tensor                 # d(loss)/d(activations) at the cut
    extra: dict = field(default_factory=dict)  # what the server side sent with it (``StepResult.replies``)


@dataclass
class ClientRound:
    """A virtual client during a round on its client actor."""

    client: int
    cut: int
    steps: int
    batch: int
    stream_pos: int
    part: torch.nn.Module              # the client-side part: blocks [0, blocks) with the client's start state
    opt: torch.optim.Optimizer | None  # None for a client stepped in a bank (runtime/client_bank.py: one for the group)
    anchor: dict[str, torch.Tensor]    # the part's parameters at round start (FedProx's w_global)
    stats: ClientRoundStats
    round: int = 0                     # the round being trained (1-based)
    local: bool = False                # its server is unavailable this round: every step is a fallback step
    plan: object = None                # the planner's per-client data (``Planner.client_plans``)
    fwd_flops: float = 0.0             # forward FLOPs per sample of its client-side part
    device: torch.device | str = "cpu"  # where its tensors live
    head: torch.nn.Module | None = None  # a module of its own, kept across rounds (own_module.py)
    head_opt: torch.optim.Optimizer | None = None
    state: object = None               # the role's per-client scratch (``ClientSide.new_state``)
    x: torch.Tensor | None = None      # the batch being trained
    y: torch.Tensor | None = None
    labels: object = None              # y as it was read from the data set (a NumPy array on the host)
    pending: torch.Tensor | None = None  # activations awaiting their gradient
    failed: bool = False               # lost its server or past the deadline: it stops, no update
    extra_state: dict = field(default_factory=dict)  # the start state's other keys (parked own module)
    bounded: bool = False              # --epoch pass: its batches end where its epoch does
    weight: float | None = None        # its weight in sample-weighted averages (None: the samples it trained on)


class ClientSide:
    """SplitFed's client."""

    uploads_model: ClassVar[bool] = True   # the client-side model goes to the fed server (PSL: kept)
    survives_server_loss: ClassVar[bool] = False  # goes on (``fallback``) when its server dies or is away
    server_timeout_s: ClassVar[float | None] = None  # waits this long for its server's answer (None: as
                                                    # long as it takes; a dead server is no answer)

    def __init__(self, cfg, ctx: FederationContext, shared=None):
        self.cfg, self.ctx, self.shared = cfg, ctx, shared
        self.objective = objective_of(ctx)  # the run's loss (raysfl.objective)
        self.params = cfg.algo_params

    @property
    def needs_anchor(self) -> bool:
        """Whether ``c.anchor`` (the part's parameters at round start) is kept: only for a role
        with a :meth:`regularizer` (a copy of every client's part otherwise)."""
        return type(self).regularizer is not ClientSide.regularizer

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """Metric columns ``stats.record`` fills (the mean over the round's values; NaN without)."""
        return []

    def new_state(self, c: ClientRound) -> object:
        """The role's per-client scratch for a round (``c.state``)."""
        return None

    def begin(self, c: ClientRound, model) -> None:
        """The client starts its round (``c.part`` holds its start state; ``c.extra_state`` the
        other keys it was sent, e.g. a parked module of its own; ``model``: the run's model,
        for shapes)."""

    def forward(self, c: ClientRound, acts: torch.Tensor, y: torch.Tensor) -> None:
        """Right after the forward pass, before the smashed data leaves (SuperSFL's TPGF phase 1)."""

    def regularizer(self, part: torch.nn.Module, anchor: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """An extra term of the client's objective; ``anchor``: the part at round start."""
        return None

    def backward(self, c: ClientRound, acts: torch.Tensor, reply: Reply) -> None:
        """Update the client-side part from the server's gradient at the cut: plain
        back-propagation (plus :meth:`regularizer`), one optimiser step."""
        backprop(acts, reply.grad, self.regularizer(c.part, c.anchor))
        c.opt.step()
        c.opt.zero_grad(set_to_none=True)

    def finish_steps(self, host, grad_refs: list) -> None:
        """The round's steps are over: apply the last answers (``host``: the client actor)."""
        host.apply_grads(grad_refs)

    def fallback(self, c: ClientRound, acts: torch.Tensor) -> bool:
        """A step without the server's answer. True: the client trained (a fallback step);
        False (the default): it cannot go on without its server and drops out of the round."""
        return False

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Loss of a client that runs the whole model (FedAvg): the run's (:mod:`raysfl.objective`)."""
        return self.objective(logits, labels)

    def local_step(self, c: ClientRound, x: torch.Tensor, y: torch.Tensor) -> float:
        """One local step of a whole-model client; returns its loss."""
        loss = self.loss(c.part(x), y)
        reg = self.regularizer(c.part, c.anchor)
        c.opt.zero_grad(set_to_none=True)
        (loss if reg is None else loss + reg).backward()
        c.opt.step()
        return loss.detach().item()

    def report(self, c: ClientRound) -> dict:
        """Facts sent with the update (``ClientUpdate.report``)."""
        return {}

    def update(self, c: ClientRound) -> ClientUpdate:
        """What goes to the fed server at the end of the round: the client-side part (counted as
        an upload where it is one), with the facts of :meth:`report`."""
        state = state_to_wire(c.part.state_dict())
        if self.uploads_model:
            c.stats.traffic.params_up += state_nbytes(state)
            c.stats.traffic.messages += 1
        weight = float(c.stats.samples) if c.weight is None else c.weight  # --aggregation-weights
        return ClientUpdate(c.client, state, weight, report=self.report(c))

