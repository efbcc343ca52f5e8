"""Client-to-client split training (FedPairing, Sec. II-A): FedPairing's own exchange shape.

Each paired client holds the whole model. Step s of a pair (c_i, c_j) runs both directions
at once, in four calls per client actor (c_i's direction shown; c_j's is the mirror image):

1. ``pair_forward`` (owner c_i): finish step s-1 (below), then run its first L_i layers on
   its own batch and send the activations -- and nothing else -- to c_j's actor.
2. ``pair_serve`` (partner c_j): run layers L_i+1..W on ITS OWN copy of the model and
   return the outputs (logits) to c_i; the graph stays open on c_j.
3. ``pair_loss`` (owner c_i): the loss with c_i's own labels, weighted (``weight`` in its
   :class:`PairPlan`: K a_i or a_i, :mod:`raysfl.algorithms.fed_pairing.weighting`); send
   d(weight * loss)/d(logits) to c_j.
4. ``pair_backward`` (partner c_j): back-propagate it through layers L_i+1..W (the
   gradients stay cached in c_j's model) and return the gradient at the cut to c_i.

The next ``pair_forward`` back-propagates each client's prefix with that gradient, then
steps every model on everything cached: its own weighted prefix gradient and its
partner's weighted suffix gradient (eqs. 2-3). A layer that both flows reached in that step
(an overlapping layer, Sec. III-B) takes the doubled step of eq. (7) when
``double_overlap`` asks for it; ``doubled_layers`` records how many did, per update.

Labels never leave their owner (the paper's own exchange sends the loss value to the
partner, which cannot be back-propagated; the logits back and d(loss)/d(logits) forward do
the same computation without sending labels). What crosses actor boundaries: activations,
logits, gradients and model parameters; every transfer is counted in both clients'
:class:`~raysfl.transport.Traffic`. Partners may live on different client actors: tensors go
actor to actor through the object store (the driver only wires the ObjectRefs).

:class:`PeerExchange` wires the calls on the driver; :class:`PeerClient` is the client role
whose methods the client actors run (``ClientActor.call_role``; the actor is the ``host``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from raysfl.algorithms.roles import ClientRound, ClientSide, Exchange
from raysfl.algorithms.roles.exchange import as_list
from raysfl.transport import GradReply, Smashed, pack, unpack


@dataclass
class PairPlan:
    """A client's pair this round (the planner's per-client data)."""

    partner: int | None            # the client it splits the model with (None: it trains alone)
    overlap: list[int] = field(default_factory=list)  # its overlapping layers (1-based)
    weight: float = 1.0            # the weight of its loss in both halves of its split step


@dataclass
class PeerRound:
    """A client's peer-step scratch: the blocks its own flow and its partner's reached since its
    last optimiser step, and the partner halves it is serving (graphs awaiting their gradient)."""

    own_flow: range | None = None
    partner_flow: range | None = None
    serving: dict = field(default_factory=dict)  # owner -> (its activations, the outputs, its cut)


class PeerExchange(Exchange):
    """FedPairing's steps, four calls per client actor (module docstring): every actor forwards
    its clients' prefixes to their partners' actors (activations only), the partners return
    the outputs, the owners return d(loss)/d(outputs) (labels stay home), the partners return
    the gradient at the cut, which the next forward applies."""

    server_side = False
    real_deadlines = False  # partners wait for each other

    @classmethod
    def steps(cls, w, plans_by_actor, server_of, prev):
        n = len(w.clients)
        actors = sorted(plans_by_actor)
        markers = []
        for s in range(max(p.steps for group in plans_by_actor.values() for p in group.values())):
            routes = {i: {c: p.role.partner % n for c, p in plans_by_actor[i].items()
                          if p.role.partner is not None and p.steps > s} for i in actors}
            acts: dict[tuple[int, int], object] = {}
            solo = []  # forward calls with nothing to route (solo or finished clients)
            for i in actors:
                dests = sorted(set(routes[i].values()))
                refs = w.clients[i].call_role.options(num_returns=max(1, len(dests))).remote(
                    "pair_forward", s, dests, routes[i], prev[i])
                prev[i] = []
                if dests:
                    acts.update({(i, d): ref for d, ref in zip(dests, as_list(refs, len(dests)))})
                else:
                    solo.append(refs)
            outputs = cls._exchange(w, "pair_serve", s, acts)
            dlogits: dict[tuple[int, int], object] = {}
            for i in sorted({i for i, _ in outputs}):
                dests = sorted(d for ii, d in outputs if ii == i)
                refs = w.clients[i].call_role.options(num_returns=len(dests)).remote(
                    "pair_loss", s, dests, routes[i], [outputs[(i, d)] for d in dests])
                dlogits.update({(i, d): ref for d, ref in zip(dests, as_list(refs, len(dests)))})
            for (i, _), ref in sorted(cls._exchange(w, "pair_backward", s, dlogits).items()):
                prev[i].append(ref)
            markers.append([g for i in actors for g in prev[i]] + solo)
            w.aux.extend(solo)
        return markers

    @staticmethod
    def _exchange(w, method: str, step: int, sends: dict[tuple[int, int], object]) -> dict:
        """One partner-side call (``method``) per destination actor d with the payloads
        {(source i, d): ref}; returns {(i, d): ref of d's answer to i}."""
        back = {}
        for d in sorted({d for _, d in sends}):
            srcs = sorted(i for i, dd in sends if dd == d)
            refs = w.clients[d].call_role.options(num_returns=len(srcs)).remote(
                method, step, [sends[(i, d)] for i in srcs])
            back.update({(i, d): ref for i, ref in zip(srcs, as_list(refs, len(srcs)))})
        return back


def _run_blocks(part, lo: int, hi: int, x: torch.Tensor) -> torch.Tensor:
    for k in range(lo, hi):
        x = part.blocks[str(k)](x)
    return x


class PeerClient(ClientSide):
    """The client half of :class:`PeerExchange` (each method runs on a client actor, ``host``)."""

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
            acts.backward(reply.grad)
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
                loss = F.cross_entropy(a.part(x), y)
                (a.plan.weight * loss).backward()
                a.state.own_flow = range(0, host.model.num_blocks)
                self._step(a)
                a.stats.loss_sum += float(loss.detach()) * len(y)
                a.stats.loss_count += len(y)
                a.stats.client_flops += 3.0 * len(y) * float(sum(host.flops))
                continue
            a.stats.client_flops += 3.0 * len(y) * float(sum(host.flops[:a.cut]))
            out[routes[c]][partner] = host.send(a, _run_blocks(a.part, 0, a.cut, x), None)
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
                a.stats.traffic.other_up += reply.nbytes  # their outputs out
                a.stats.traffic.messages += 2
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
                loss = F.cross_entropy(z, a.y)
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
                logits.backward(unpack(r.grad, host.device))
                a.state.partner_flow = range(cut, num_blocks)
                reply = GradReply(pack(x.grad, self.cfg.transfer_dtype))
                out[i][owner] = reply
                a.stats.traffic.other_down += r.nbytes    # d(loss)/d(outputs) in,
                a.stats.traffic.other_up += reply.nbytes  # the gradient at the owner's cut out
                a.stats.traffic.messages += 2
        return out if len(out) != 1 else out[0]
