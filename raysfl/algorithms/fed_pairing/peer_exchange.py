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

:class:`PeerExchange` wires the calls on the driver (no torch here);
:class:`~raysfl.algorithms.fed_pairing.algorithm.PeerClient` is the client role whose methods
the client actors run (``ClientActor.call_role``; the actor is the ``host``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raysfl.algorithms.roles.exchange import Exchange, as_list
from raysfl.errors import ConfigError


@dataclass
class PairPlan:
    """A client's pair this round (the planner's per-client data)."""

    partner: int | None            # the client it splits the model with (None: it trains alone)
    overlap: list[int] = field(default_factory=list)  # its overlapping layers (1-based)
    weight: float = 1.0            # the weight of its loss in both halves of its split step


class PeerExchange(Exchange):
    """FedPairing's steps, four calls per client actor (module docstring): every actor forwards
    its clients' prefixes to their partners' actors (activations only), the partners return
    the outputs, the owners return d(loss)/d(outputs) (labels stay home), the partners return
    the gradient at the cut, which the next forward applies."""

    server_side = False

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.round_deadline_s is not None or cfg.step_deadline_s is not None:
            raise ConfigError(f"{cfg.algo} does not take real-time deadlines (round_deadline_s, step_deadline_s): "
                              "partners wait for each other; use sim_deadline_s")

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
                w.before("client", i, s)
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
