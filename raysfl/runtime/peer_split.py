"""Client-to-client split training (FedPairing, Sec. II-A): the client actor's side.

Each paired client holds the whole model. In a step, client i runs its first L_i layers on
its own batch and sends the activations to its partner j; j runs layers L_i+1..W on ITS OWN
copy, computes i's loss (weighted by a_i), back-propagates through those layers (their
gradients stay cached in j's model) and returns the gradient at the cut; i back-propagates
its first L_i layers. Both directions run in the same step, so each model collects
a_i-weighted gradients from its own data (prefix) and a_j-weighted ones from the partner's
data (suffix); it steps on them when both are in (eq. 3), overlapping layers with the
doubled step of eq. (7).

Partners may live on different client actors: activations and gradients go actor to actor
through the object store (the driver only wires the ObjectRefs). Raw samples and labels'
owners never change: only activations, labels of the batch, gradients and model
parameters leave an actor.

These functions act on a :class:`raysfl.runtime.client_actor.ClientActor`; its methods
``pair_forward``, ``pair_serve`` and ``finish`` call them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from raysfl.runtime.refs import fetch
from raysfl.transport import ClientRoundStats, GradReply, Smashed, pack, unpack


def _run_blocks(part, lo: int, hi: int, x: torch.Tensor) -> torch.Tensor:
    for k in range(lo, hi):
        x = part.blocks[str(k)](x)
    return x


def _step(actor, a) -> None:
    """Eq. (3) / (7): one optimizer step on the cached weighted gradients; overlapping layers
    (1-based ``a.extra["overlap"]``) take twice the step when the algorithm asks for it."""
    if not any(p.grad is not None for p in a.part.parameters()):
        return
    if actor.algo.double_overlap():
        for layer in a.extra.get("overlap", []):
            for p in a.part.blocks[str(layer - 1)].parameters():
                if p.grad is not None:
                    p.grad.mul_(2.0)
    a.opt.step()
    a.opt.zero_grad(set_to_none=True)


def apply_returned(actor, grad_refs: list) -> None:
    """Finish the previous step: back-propagate the partners' gradients through the own
    prefixes, then step every active client on what it has cached."""
    for _, acts, grad, _ in actor._arrived(fetch(grad_refs)):
        acts.backward(grad)
    for a in actor.active.values():
        if a.pending is not None:  # no gradient came back: the partner is gone
            a.pending, a.failed, a.stats.failed = None, True, True
        _step(actor, a)


def pair_forward(actor, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
    """Apply last step's gradients, then forward step ``step``: each client's first L_i
    layers, to its partner's actor (``routes[c]``); a client without a partner takes a
    whole local step. Returns one payload {partner: Smashed} per entry of ``dests``."""
    apply_returned(actor, grad_refs)
    out: dict[int, dict[int, Smashed]] = {d: {} for d in dests}
    for c, a in actor.active.items():
        if step >= a.steps or a.failed:
            continue
        x, y = actor._next_batch(a)
        a.stats.steps += 1
        weight = actor.algo.pair_weight(c)
        partner = a.extra.get("partner")
        if partner is None:  # trains alone (odd number of clients)
            loss = F.cross_entropy(a.part(x), y)
            (weight * loss).backward()
            _step(actor, a)
            a.stats.loss_sum += float(loss.detach()) * len(y)
            a.stats.loss_count += len(y)
            a.stats.client_flops += 3.0 * len(y) * float(sum(actor.flops))
            continue
        a.stats.client_flops += 3.0 * len(y) * float(sum(actor.flops[:a.cut]))
        out[routes[c]][partner] = actor._send(a, _run_blocks(a.part, 0, a.cut, x), y)
    result = [out[d] for d in dests]
    return result if len(result) != 1 else result[0]


def pair_serve(actor, step: int, payload_refs: list):
    """The partner's half of step ``step``: for each arriving {partner: Smashed from c}, run
    layers L_c+1..W of the partner's own model, back-propagate a_c * loss (gradients cached
    in the partner's model) and return the gradient at the cut, one payload {c: GradReply}
    per source actor."""
    payloads = fetch(payload_refs)
    out: list[dict] = [{} for _ in payloads]
    for i, payload in enumerate(payloads):
        for j, sm in (payload or {}).items():
            a = actor.active.get(j)
            if a is None:
                continue
            x = unpack(sm.activations, actor.device).requires_grad_(True)
            y = torch.from_numpy(sm.labels.copy()).to(actor.device)
            loss = F.cross_entropy(_run_blocks(a.part, sm.cut, actor.model.num_blocks, x), y)
            (actor.algo.pair_weight(sm.client) * loss).backward()
            reply = GradReply(pack(x.grad, actor.cfg.transfer_dtype))
            out[i][sm.client] = reply
            a.stats.client_flops += 3.0 * len(y) * float(sum(actor.flops[sm.cut:]))
            a.stats.traffic.other_down += sm.nbytes   # the partner's activations and labels in,
            a.stats.traffic.other_up += reply.nbytes  # the gradient at its cut out
            a.stats.traffic.messages += 2
            served = actor.served.setdefault(sm.client, ClientRoundStats(client=sm.client, cut=sm.cut))
            served.loss_sum += float(loss.detach()) * len(y)
            served.loss_count += len(y)
    return out if len(out) != 1 else out[0]
