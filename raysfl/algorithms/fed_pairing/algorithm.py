"""FedPairing: greedy client pairing, client-to-client split training, overlapping layers.

* Wireless and compute model (Sec. II-A, IV-A; :mod:`raysfl.algorithms.fed_pairing.pairing`): client
  positions uniform in a 50 m disk around the server, rates r_ij = B log2(1 + P h_ij /
  sigma^2) with h = h0 d^-delta, CPU frequencies from the device profiles (U[0.1, 2] GHz).
* Pairing (eqs. 5-6, Alg. 1): greedy maximum-weight matching on e_ij = alpha (f_i - f_j)^2 +
  beta r_ij among the round's clients, or a Table I baseline (``--pairing``).
* Split training (eqs. 1-3): L_i = floor(W f_i / (f_i + f_j)), L_j = W - L_i, once per pair
  (the slower client takes the floor); each client holds the whole model, runs its first L_i
  layers and its partner runs the rest on its own copy and returns the logits; the owner
  computes the loss with its labels and sends back d(loss)/d(logits)
  (:mod:`raysfl.algorithms.fed_pairing.peer_exchange`, FedPairing's own exchange; its client
  half, :class:`PeerClient`, is here). Losses are weighted (``--pair-weights``,
  :mod:`raysfl.algorithms.fed_pairing.weighting`): ``fedavg`` K a_i over the round's K
  clients, FedAvg's global step; ``paper`` the literal a_i = |D_i| / sum |D|.
* Overlapping layers (eq. 7): the doubled step where both flows reached a layer in that
  step, switchable (``--double-overlap``); ``doubled_layers`` counts them.
* Aggregation: the server averages the client models (the weights are already in the
  gradients, Sec. II-A.3).
* Simulated time: compute from each client's FLOPs and CPU frequency, transfers over r_ij
  between partners and over the client-server link r_i0 for the model. On the runtime's cost
  model (``link_model "profiles"``) every byte a client sends or receives is charged to its
  links, and a latency per hop of its own flow: the two flows of a pair run at once, so a
  step's critical path is four hops (smashed data, outputs, their gradient, the gradient at
  the cut), not the eight messages a client handles.

The spec (knobs, their choices, paper setting, checks) is in :mod:`raysfl.algorithms.fed_pairing.spec`,
the planner in :mod:`raysfl.algorithms.fed_pairing.planner`; this module holds the roles that
run in the actors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from raysfl.algorithms.roles import Aggregator, ClientRound, ClientSide, ClientUpdate
from raysfl.algorithms.roles.client import backprop
from raysfl.transport import GradReply, Smashed, pack, unpack


@dataclass
class PeerRound:
    """A client's peer-step scratch: the blocks its own flow and its partner's reached since its
    last optimiser step, and the partner halves it is serving (graphs awaiting their gradient)."""

    own_flow: range | None = None
    partner_flow: range | None = None
    serving: dict = field(default_factory=dict)  # owner -> (its activations, the outputs, its cut)


def _run_blocks(part, lo: int, hi: int, x: torch.Tensor) -> torch.Tensor:
    for k in range(lo, hi):
        x = part.blocks[str(k)](x)
    return x


class PeerClient(ClientSide):
    """The client half of :class:`~raysfl.algorithms.fed_pairing.peer_exchange.PeerExchange` (each
    method runs on a client actor, ``host``)."""

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """``doubled_layers``: layers that took eq. 7's doubled step, per client update."""
        return ["doubled_layers"]

    def new_state(self, c: ClientRound) -> PeerRound:
        return PeerRound()

    def _step(self, a: ClientRound) -> None:
        """Eq. (3) / (7): one optimizer step on the cached weighted gradients. The blocks
        (0-based) that the client's own flow and its partner's flow both reached since the last
        step take twice the step when ``double_overlap`` asks for it; their number is recorded
        as ``doubled_layers``."""
        own, theirs = a.state.own_flow, a.state.partner_flow
        a.state.own_flow = a.state.partner_flow = None
        if own is None and theirs is None:
            return
        doubled = sorted(set(own or ()) & set(theirs or ())) if self.params.double_overlap else []
        for k in doubled:
            for p in a.part.blocks[str(k)].parameters():
                if p.grad is not None:
                    p.grad.mul_(2.0)
        a.opt.step()
        a.opt.zero_grad(set_to_none=True)
        a.stats.record("doubled_layers", len(doubled))

    def finish_steps(self, host, grad_refs: list) -> None:
        """Finish the previous step: back-propagate the gradients at the cut through the own
        prefixes, then step every active client on what it has cached."""
        for a, acts, reply in host.arrived(host.fetch(grad_refs)):
            backprop(acts, reply.grad)
            a.state.own_flow = range(0, a.cut)
        for a in host.active.values():
            a.state.serving = {}  # graphs a partner never asked to back-propagate (it is gone)
            if a.pending is not None:  # no gradient came back: the partner is gone
                a.pending, a.failed, a.stats.failed = None, True, True
            self._step(a)

    def pair_forward(self, host, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
        """Apply last step's gradients, then forward step ``step``: each client's first L_i
        layers, to its partner's actor (``routes[c]``); a client without a partner takes a
        whole local step. Returns one payload {partner: Smashed (no labels)} per entry of
        ``dests``."""
        self.finish_steps(host, grad_refs)
        out: dict[int, dict[int, Smashed]] = {d: {} for d in dests}
        for c, a in host.active.items():
            if step >= a.steps or a.failed:
                continue
            x, y = host.next_batch(a)
            a.stats.steps += 1
            partner = a.plan.partner
            if partner is None:  # trains alone (odd number of clients)
                loss = self.objective(a.part(x), y)
                (a.plan.weight * loss).backward()
                a.state.own_flow = range(0, host.model.num_blocks)
                self._step(a)
                a.stats.loss_sum += float(loss.detach()) * len(y)
                a.stats.loss_count += len(y)
                a.stats.client_flops += 3.0 * len(y) * float(sum(host.flops))
                continue
            a.stats.client_flops += 3.0 * len(y) * float(sum(host.flops[:a.cut]))
            # through host memory, also on one GPU (--device-payloads): a partner may live in this
            # process, where a CUDA IPC handle does not open
            out[routes[c]][partner] = host.send(a, _run_blocks(a.part, 0, a.cut, x), None, on_device=False)
        result = [out[d] for d in dests]
        return result if len(result) != 1 else result[0]

    def pair_serve(self, host, step: int, payload_refs: list):
        """The partner's forward half of step ``step``: for each arriving {partner: Smashed from
        c}, run layers L_c+1..W of the partner's own model and return the outputs, one payload
        {c: Smashed at cut W (the logits)} per source actor. The graph waits for
        :meth:`pair_backward`."""
        payloads = host.fetch(payload_refs)
        out: list[dict] = [{} for _ in payloads]
        num_blocks = host.model.num_blocks
        for i, payload in enumerate(payloads):
            for j, sm in (payload or {}).items():
                a = host.active.get(j)
                if a is None:
                    continue
                x = unpack(sm.activations, host.device).requires_grad_(True)
                logits = _run_blocks(a.part, sm.cut, num_blocks, x)
                a.state.serving[sm.client] = (x, logits, sm.cut)
                reply = Smashed(sm.client, num_blocks, pack(logits, self.cfg.transfer_dtype), None)
                out[i][sm.client] = reply
                a.stats.client_flops += 3.0 * len(x) * float(sum(host.flops[sm.cut:]))
                a.stats.traffic.other_down += sm.nbytes   # the partner's activations in,
                a.stats.traffic.other_up += reply.nbytes  # their outputs out (two hops of the partner's flow:
                # their latency is the partner's, which counts them: the two flows run at once)
        return out if len(out) != 1 else out[0]

    def pair_loss(self, host, step: int, dests: list[int], routes: dict[int, int], logit_refs: list):
        """The owner's loss of step ``step``: for each client whose outputs came back, the
        cross-entropy with its own labels, weighted by its plan's ``weight``; returns one
        payload {partner: GradReply(d(weight * loss)/d(outputs))} per entry of ``dests``."""
        out: dict[int, dict[int, GradReply]] = {d: {} for d in dests}
        for payload in host.fetch(logit_refs):
            for c, sm in (payload or {}).items():
                a = host.active.get(c)
                if a is None or a.pending is None:
                    continue
                z = unpack(sm.activations, host.device).requires_grad_(True)
                loss = self.objective(z, a.y)
                (a.plan.weight * loss).backward()
                reply = GradReply(pack(z.grad, self.cfg.transfer_dtype))
                out[routes[c]][a.plan.partner] = reply
                a.stats.loss_sum += float(loss.detach()) * len(a.y)
                a.stats.loss_count += len(a.y)
                a.stats.traffic.other_down += sm.nbytes   # its outputs in,
                a.stats.traffic.other_up += reply.nbytes  # d(loss)/d(outputs) out
                a.stats.traffic.messages += 2
        result = [out[d] for d in dests]
        return result if len(result) != 1 else result[0]

    def pair_backward(self, host, step: int, grad_refs: list):
        """The partner's backward half of step ``step``: for each arriving {partner:
        GradReply(d(loss)/d(outputs)) from c}, back-propagate it through layers L_c+1..W of
        the partner's model (the gradients stay cached in it) and return the gradient at c's
        cut, one payload {c: GradReply} per source actor."""
        payloads = host.fetch(grad_refs)
        out: list[dict] = [{} for _ in payloads]
        num_blocks = host.model.num_blocks
        for i, payload in enumerate(payloads):
            for j, r in (payload or {}).items():
                a = host.active.get(j)
                if a is None or a.plan.partner not in a.state.serving:
                    continue
                owner = a.plan.partner
                x, logits, cut = a.state.serving.pop(owner)
                backprop(logits, unpack(r.grad, host.device))
                a.state.partner_flow = range(cut, num_blocks)
                reply = GradReply(pack(x.grad, self.cfg.transfer_dtype))
                out[i][owner] = reply
                a.stats.traffic.other_down += r.nbytes    # d(loss)/d(outputs) in,
                a.stats.traffic.other_up += reply.nbytes  # the gradient at the owner's cut out (the partner's
                # flow again: latency charged to it, not here)
        return out if len(out) != 1 else out[0]


class PlainAverage(Aggregator):
    """The plain average of the client models: the weights are already in their gradients
    (Sec. II-A.3; :mod:`raysfl.algorithms.fed_pairing.weighting`)."""

    @classmethod
    def update_weight(cls, u: ClientUpdate) -> float:
        return 1.0
