"""Client-to-client split training (FedPairing, Sec. II-A): the client actor's side.

Each paired client holds the whole model. Step s of a pair (c_i, c_j) runs both directions
at once, in four calls per client actor (c_i's direction shown; c_j's is the mirror image):

1. ``pair_forward`` (owner c_i): finish step s-1 (below), then run its first L_i layers on
   its own batch and send the activations -- and nothing else -- to c_j's actor.
2. ``pair_serve`` (partner c_j): run layers L_i+1..W on ITS OWN copy of the model and
   return the outputs (logits) to c_i; the graph stays open on c_j.
3. ``pair_loss`` (owner c_i): the loss with c_i's own labels, weighted (``weight`` in the
   plan: K a_i or a_i, :mod:`raysfl.algorithms.fed_pairing.weighting`); send
   d(weight * loss)/d(logits) to c_j.
4. ``pair_backward`` (partner c_j): back-propagate it through layers L_i+1..W (the
   gradients stay cached in c_j's model) and return the gradient at the cut to c_i.

The next ``pair_forward`` back-propagates each client's prefix with that gradient, then
steps every model on everything cached: its own weighted prefix gradient and its
partner's weighted suffix gradient (eqs. 2-3). A layer that both flows reached in that step
(an overlapping layer, Sec. III-B) takes the doubled step of eq. (7) when the algorithm
asks for it; ``doubled_layers`` records how many did, per update.

Labels never leave their owner (the paper's own exchange sends the loss value to the
partner, which cannot be back-propagated; the logits back and d(loss)/d(logits) forward do
the same computation without sending labels). What crosses actor boundaries: activations,
logits, gradients and model parameters; every transfer is counted in both clients'
:class:`~raysfl.transport.Traffic`. Partners may live on different client actors: tensors go
actor to actor through the object store (the driver only wires the ObjectRefs).

These functions act on a :class:`raysfl.runtime.client_actor.ClientActor`; its methods
``pair_forward``, ``pair_serve``, ``pair_loss``, ``pair_backward`` and ``finish`` call them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from raysfl.runtime.refs import fetch
from raysfl.transport import GradReply, Smashed, pack, unpack


def _run_blocks(part, lo: int, hi: int, x: torch.Tensor) -> torch.Tensor:
    for k in range(lo, hi):
        x = part.blocks[str(k)](x)
    return x


def _step(actor, a) -> None:
    """Eq. (3) / (7): one optimizer step on the cached weighted gradients. The blocks
    (0-based) that the client's own flow (``a.extra["own_flow"]``) and its partner's flow
    (``a.extra["partner_flow"]``) both reached since the last step take twice the step when
    the algorithm asks for it; their number is recorded as ``doubled_layers``."""
    own, theirs = a.extra.pop("own_flow", None), a.extra.pop("partner_flow", None)
    if own is None and theirs is None:
        return
    doubled = sorted(set(own or ()) & set(theirs or ())) if actor.algo.double_overlap() else []
    for k in doubled:
        for p in a.part.blocks[str(k)].parameters():
            if p.grad is not None:
                p.grad.mul_(2.0)
    a.opt.step()
    a.opt.zero_grad(set_to_none=True)
    a.stats.record("doubled_layers", len(doubled))


def apply_returned(actor, grad_refs: list) -> None:
    """Finish the previous step: back-propagate the gradients at the cut through the own
    prefixes, then step every active client on what it has cached."""
    for a, acts, grad, _ in actor._arrived(fetch(grad_refs)):
        acts.backward(grad)
        a.extra["own_flow"] = range(0, a.cut)
    for a in actor.active.values():
        a.extra.pop("serving", None)  # graphs a partner never asked to back-propagate (it is gone)
        if a.pending is not None:  # no gradient came back: the partner is gone
            a.pending, a.failed, a.stats.failed = None, True, True
        _step(actor, a)


def pair_forward(actor, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
    """Apply last step's gradients, then forward step ``step``: each client's first L_i
    layers, to its partner's actor (``routes[c]``); a client without a partner takes a
    whole local step. Returns one payload {partner: Smashed (no labels)} per entry of
    ``dests``."""
    apply_returned(actor, grad_refs)
    out: dict[int, dict[int, Smashed]] = {d: {} for d in dests}
    for c, a in actor.active.items():
        if step >= a.steps or a.failed:
            continue
        x, y = actor._next_batch(a)
        a.stats.steps += 1
        partner = a.extra.get("partner")
        if partner is None:  # trains alone (odd number of clients)
            loss = F.cross_entropy(a.part(x), y)
            (a.extra["weight"] * loss).backward()
            a.extra["own_flow"] = range(0, actor.model.num_blocks)
            _step(actor, a)
            a.stats.loss_sum += float(loss.detach()) * len(y)
            a.stats.loss_count += len(y)
            a.stats.client_flops += 3.0 * len(y) * float(sum(actor.flops))
            continue
        a.stats.client_flops += 3.0 * len(y) * float(sum(actor.flops[:a.cut]))
        out[routes[c]][partner] = actor._send(a, _run_blocks(a.part, 0, a.cut, x), None)
    result = [out[d] for d in dests]
    return result if len(result) != 1 else result[0]


def pair_serve(actor, step: int, payload_refs: list):
    """The partner's forward half of step ``step``: for each arriving {partner: Smashed from
    c}, run layers L_c+1..W of the partner's own model and return the outputs, one payload
    {c: Smashed at cut W (the logits)} per source actor. The graph waits for
    :func:`pair_backward`."""
    payloads = fetch(payload_refs)
    out: list[dict] = [{} for _ in payloads]
    num_blocks = actor.model.num_blocks
    for i, payload in enumerate(payloads):
        for j, sm in (payload or {}).items():
            a = actor.active.get(j)
            if a is None:
                continue
            x = unpack(sm.activations, actor.device).requires_grad_(True)
            logits = _run_blocks(a.part, sm.cut, num_blocks, x)
            a.extra.setdefault("serving", {})[sm.client] = (x, logits, sm.cut)
            reply = Smashed(sm.client, num_blocks, pack(logits, actor.cfg.transfer_dtype), None)
            out[i][sm.client] = reply
            a.stats.client_flops += 3.0 * len(x) * float(sum(actor.flops[sm.cut:]))
            a.stats.traffic.other_down += sm.nbytes   # the partner's activations in,
            a.stats.traffic.other_up += reply.nbytes  # their outputs out
            a.stats.traffic.messages += 2
    return out if len(out) != 1 else out[0]


def pair_loss(actor, step: int, dests: list[int], routes: dict[int, int], logit_refs: list):
    """The owner's loss of step ``step``: for each client whose outputs came back, the
    cross-entropy with its own labels, weighted by its plan's ``weight``; returns one
    payload {partner: GradReply(d(weight * loss)/d(outputs))} per entry of ``dests``."""
    out: dict[int, dict[int, GradReply]] = {d: {} for d in dests}
    for payload in fetch(logit_refs):
        for c, sm in (payload or {}).items():
            a = actor.active.get(c)
            if a is None or a.pending is None:
                continue
            z = unpack(sm.activations, actor.device).requires_grad_(True)
            loss = F.cross_entropy(z, a.y)
            (a.extra["weight"] * loss).backward()
            reply = GradReply(pack(z.grad, actor.cfg.transfer_dtype))
            out[routes[c]][a.extra["partner"]] = reply
            a.stats.loss_sum += float(loss.detach()) * len(a.y)
            a.stats.loss_count += len(a.y)
            a.stats.traffic.other_down += sm.nbytes   # its outputs in,
            a.stats.traffic.other_up += reply.nbytes  # d(loss)/d(outputs) out
            a.stats.traffic.messages += 2
    result = [out[d] for d in dests]
    return result if len(result) != 1 else result[0]


def pair_backward(actor, step: int, grad_refs: list):
    """The partner's backward half of step ``step``: for each arriving {partner:
    GradReply(d(loss)/d(outputs)) from c}, back-propagate it through layers L_c+1..W of
    the partner's model (the gradients stay cached there) and return the gradient at c's
    cut, one payload {c: GradReply} per source actor."""
    payloads = fetch(grad_refs)
    out: list[dict] = [{} for _ in payloads]
    num_blocks = actor.model.num_blocks
    for i, payload in enumerate(payloads):
        for j, r in (payload or {}).items():
            a = actor.active.get(j)
            if a is None or a.extra.get("partner") not in a.extra.get("serving", {}):
                continue
            owner = a.extra["partner"]
            x, logits, cut = a.extra["serving"].pop(owner)
            logits.backward(unpack(r.grad, actor.device))
            a.extra["partner_flow"] = range(cut, num_blocks)
            reply = GradReply(pack(x.grad, actor.cfg.transfer_dtype))
            out[i][owner] = reply
            a.stats.traffic.other_down += r.nbytes    # d(loss)/d(outputs) in,
            a.stats.traffic.other_up += reply.nbytes  # the gradient at the owner's cut out
            a.stats.traffic.messages += 2
    return out if len(out) != 1 else out[0]
