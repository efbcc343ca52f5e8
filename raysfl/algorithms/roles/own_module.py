"""A module of a client's own, kept across rounds: SuperSFL's client classifier, BESplit's
auxiliary model.

In a deployment it stays on the device; here client actors hold nothing across rounds, so it
is parked on the fed actor between rounds, under ``head.*`` keys of the client's update (and,
where the module's training goes on across rounds, its optimiser state under ``head_opt.*``:
BESplit's auxiliary model, whose SGD momentum never builds up in ~4 steps a round otherwise).
Parking is not traffic. The aggregator hands it back with the client's start state
(``Aggregator.prefix_with_own``).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from raysfl.algorithms.roles.client import ClientRound, ClientSide
from raysfl.optim import build_optimizer
from raysfl.transport import load_optimizer_state, optimizer_state_to_wire, state_to_wire, wire_to_state

HEAD = "head."          # the module's keys in an update and in the aggregator's parked state
HEAD_OPTIMIZER = "head_opt."  # its optimiser state (``keeps_optimizer``)


class OwnModuleClient(ClientSide):
    """A client role with a module of its own (``c.head``, stepped by ``c.head_opt``)."""

    keeps_optimizer: ClassVar[bool] = False  # park the module's optimiser state with it

    def has_own_module(self) -> bool:
        """Whether this run's clients keep a module (BESplit without DTD does not)."""
        return True

    def own_module(self, cut: int, model, num_classes: int) -> torch.nn.Module:
        """A fresh module for a client holding blocks [0, ``cut``) of ``model`` (built under a
        (seed, client) seed; its parked state replaces the weights after its first round)."""
        raise NotImplementedError

    def parks_optimizer(self) -> bool:
        return self.keeps_optimizer

    def begin(self, c: ClientRound, model) -> None:
        if not self.has_own_module():
            return
        src = c.extra_state
        with torch.random.fork_rng(devices=[]):  # the CPU generator only, restored after
            torch.random.default_generator.manual_seed(self.cfg.seed * 1_000_003 + c.client)
            head = self.own_module(c.cut, model, self.ctx.num_classes)
        saved = {k[len(HEAD):]: v for k, v in src.items() if k.startswith(HEAD)}
        if saved:
            head.load_state_dict(wire_to_state(saved), strict=True)
        c.head = head.to(c.device).train()
        c.head_opt = build_optimizer(c.head.parameters(), self.cfg, c.opt.param_groups[0]["lr"])
        if self.parks_optimizer():
            load_optimizer_state(c.head_opt, src, HEAD_OPTIMIZER)

    def update(self, c: ClientRound):
        u = super().update(c)
        if c.head is not None:  # stays on the device in a deployment: parked, not counted as traffic
            u.state.update({f"{HEAD}{k}": v for k, v in state_to_wire(c.head.state_dict()).items()})
            if self.parks_optimizer():
                u.state.update(optimizer_state_to_wire(c.head_opt, HEAD_OPTIMIZER))
        return u
