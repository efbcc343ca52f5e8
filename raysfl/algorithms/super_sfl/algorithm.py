"""SuperSFL (Al Asif et al.): resource-aware subnetworks of one weight-sharing super-network,
Three-Phase Gradient Fusion, a fault-tolerant client classifier and collaborative aggregation.

* Allocation (Sec. II-A, eq. 1, Alg. 1, :mod:`raysfl.algorithms.super_sfl.allocation`): client i runs
  the first d_i blocks of the global model, from its memory and latency -- the sampled
  device profile (``allocation=profile``) or measured once at start-up by its client actor
  (``allocation=measured``: a dummy forward pass plus a round trip of a representative
  activation to the main server actor).
* Super-network (Sec. II, Fig. 1): ONE main server actor holds the whole network and runs
  blocks d_i+1..L for every client with the same shared weights
  (:func:`raysfl.server_steps.shared_server_step`, one forward/backward per depth group).
* TPGF (Sec. II-B, eqs. 2-4, Alg. 2, :mod:`raysfl.algorithms.super_sfl.tpgf`): phase 1 on the client
  (``TPGFClient.forward``: local loss, classifier step, encoder gradient clipped to ``clip_norm``),
  phase 2 on the server (its loss travels back with the gradient), phase 3 on the client
  (``TPGFClient.backward``: eq. 3 weights, eq. 4 fusion, encoder step). ``fusion`` selects the
  ablation of Sec. IV.
* Fallback (Sec. II-C, Alg. 3): with no answer within ``server_timeout_s`` (or a dead or
  unavailable server) the client steps on its local gradient alone (``TPGFClient.fallback``);
  it starts the next round from the latest global parameters.
* Server-gradient availability (Sec. IV, Table III: "the server provides gradients only in a
  fixed fraction of training rounds, simulating intermittent server failures or delayed
  responses"): ``server_availability`` / ``availability_rounds`` pick the rounds with server
  gradients. ``availability_mode=gradients`` (default): in the other rounds the clients
  still send smashed data and the server still trains on it, but its gradient does not
  reach the client in time, which takes Alg. 3's local step (``TPGFClient.backward``).
  ``availability_mode=server``: the whole server is off in those rounds (no smashed data,
  no server training).
* Aggregation (Sec. II-D, eqs. 6-8, :mod:`raysfl.algorithms.super_sfl.collaborative_aggregation`):
  encoder layers averaged over the clients holding them with depth x inverse-(fused-)loss
  weights, pulled towards the server's copy by lambda; classifiers stay with their clients;
  the result is the new global model, loaded back into the main server.

The spec (knobs, their choices, paper setting, checks) is in :mod:`raysfl.algorithms.super_sfl.spec`,
the planner (depths, server availability) in :mod:`raysfl.algorithms.super_sfl.planner`; this
module holds the roles that run in the actors.

Readings the paper leaves open are listed in docs/super-sfl.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from raysfl.algorithms.roles import HEAD, Aggregator, ClientRound, ClientUpdate, OwnModuleClient, ServerSide
from raysfl.algorithms.super_sfl.collaborative_aggregation import client_weights, consensus_average
from raysfl.algorithms.super_sfl.planner import server_up
from raysfl.algorithms.super_sfl.tpgf import clip_l2, client_weight, fuse, fused_loss, l2_norm
from raysfl.models.heads import client_classifier
from raysfl.transport import wire_to_state


@dataclass
class TPGFRound:
    """A client's TPGF figures over its round (the role's per-client scratch)."""

    g_client: list = field(default_factory=list)  # phase 1's clipped local encoder gradient, this step
    loss_client: float = 0.0  # this step's local loss
    batch: int = 0            # this step's batch size
    gn_raw_sum: float = 0.0   # sums over the round: local gradient norms before / after the clip,
    gn_local_sum: float = 0.0
    local_steps: int = 0
    lc_sum: float = 0.0       # local losses (sample-weighted) and their samples,
    n: int = 0
    ls_sum: float = 0.0       # server losses and their samples,
    ns: int = 0
    w_sum: float = 0.0        # eq. (3)'s client weights, the server gradient norms, over the fused steps
    gn_server_sum: float = 0.0
    fused_steps: int = 0


class TPGFClient(OwnModuleClient):
    """A client with its own classifier: Three-Phase Gradient Fusion with the server's
    gradient, and Alg. 3's local step when the server does not answer."""

    survives_server_loss = True

    @property
    def server_timeout_s(self) -> float:
        return self.params.server_timeout_s

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return ["tpgf_w_client", "grad_norm_local", "grad_norm_local_raw", "grad_norm_server"]

    def own_module(self, cut, model, num_classes):
        return client_classifier(model.activation_shape(cut), num_classes,
                                 spatial=self.params.classifier_head == "spatial")

    def new_state(self, c: ClientRound) -> TPGFRound:
        return TPGFRound()

    def forward(self, c: ClientRound, acts, y) -> None:
        """Phase 1 (Alg. 2, lines 4-8): local loss, classifier step, clipped encoder gradient."""
        enc, head = list(c.part.parameters()), list(c.head.parameters())
        loss = self.objective(c.head(acts), y)
        grads = torch.autograd.grad(loss, enc + head, retain_graph=not c.local, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(enc + head, grads)]
        for p, g in zip(head, grads[len(enc):]):
            p.grad = g
        c.head_opt.step()
        c.head_opt.zero_grad(set_to_none=True)
        x = c.state
        x.g_client = clip_l2(grads[:len(enc)], self.params.clip_norm)
        x.gn_raw_sum += l2_norm(grads[:len(enc)])
        x.gn_local_sum += l2_norm(x.g_client)
        x.local_steps += 1
        x.loss_client = float(loss.detach())
        x.lc_sum += x.loss_client * len(y)
        x.n += len(y)
        x.batch = len(y)

    def backward(self, c: ClientRound, acts, reply) -> None:
        """Phases 2-3 (Alg. 2, lines 15-19): back-propagate the server's gradient through the
        encoder, fuse it with the local one by eq. (3)-(4), step.

        In a round without server gradients (``availability_mode=gradients``, Table III) the
        server has trained on the batch, but its gradient counts as missing or late: the
        client takes Alg. 3's local step instead (a fallback step), and the server's loss
        does not enter its eq. (6) weight."""
        if self.params.availability_mode == "gradients" and not server_up(self.params, self.cfg.seed, c.round):
            self._local_step(c)
            c.stats.fallback_steps += 1  # the server's loss on this batch is already the training loss
            return
        enc = list(c.part.parameters())
        # d<acts, g>/dw: the server's gradient through the encoder, as a scalar's gradient (bit for
        # bit grad_outputs=g's, without its import of torch's symbolic shapes: roles.client.backprop)
        g_server = torch.autograd.grad((acts * reply.grad).sum(), enc, allow_unused=True)
        g_server = [torch.zeros_like(p) if g is None else g for p, g in zip(enc, g_server)]
        x = c.state
        depth, server_depth = c.cut, self.ctx.num_blocks - c.cut
        w = client_weight(depth, server_depth, x.loss_client, reply.extra["loss"], self.params.fusion)
        for p, g in zip(enc, fuse(x.g_client, g_server, w)):
            p.grad = g
        c.opt.step()
        c.opt.zero_grad(set_to_none=True)
        c.stats.client_flops += 2.0 * x.batch * c.fwd_flops  # TPGF's second backward through the encoder
        x.ls_sum += reply.extra["loss"] * x.batch
        x.ns += x.batch
        x.w_sum += w
        x.gn_server_sum += l2_norm(g_server)
        x.fused_steps += 1

    def fallback(self, c: ClientRound, acts) -> bool:
        """Alg. 3, lines 7-8: the encoder steps on the local (phase 1) gradient alone. The
        local loss of such a step is the client's training loss in the metrics."""
        self._local_step(c)
        c.stats.loss_sum += c.state.loss_client * c.state.batch
        c.stats.loss_count += c.state.batch
        return True

    @staticmethod
    def _local_step(c: ClientRound) -> None:
        """The encoder steps on phase 1's clipped local gradient (Alg. 3, line 8; the
        classifier has stepped in phase 1)."""
        for p, g in zip(c.part.parameters(), c.state.g_client):
            p.grad = g
        c.opt.step()
        c.opt.zero_grad(set_to_none=True)

    def report(self, c: ClientRound) -> dict:
        """What the fed server aggregates with (Sec. II-D, "Aggregation inputs"). Also records
        the client's round means of TPGF's figures (``columns``): w_client of eq. (3) and the L2
        norm of the server's encoder gradient over its fused steps, and the L2 norm of the local
        encoder gradient after and before the clip over all its steps; the metric columns are
        their means over the round's clients."""
        x = c.state
        depth, server_depth = c.cut, self.ctx.num_blocks - c.cut
        lc = x.lc_sum / max(1, x.n)
        ls = x.ls_sum / x.ns if x.ns else None
        fused = lc if ls is None else fused_loss(depth, server_depth, lc, ls, self.params.fusion)
        w = x.w_sum / x.fused_steps if x.fused_steps else None
        if x.local_steps:
            c.stats.record("grad_norm_local", x.gn_local_sum / x.local_steps)
            c.stats.record("grad_norm_local_raw", x.gn_raw_sum / x.local_steps)
        if w is not None:
            c.stats.record("tpgf_w_client", w)
            c.stats.record("grad_norm_server", x.gn_server_sum / x.fused_steps)
        return {"depth": c.cut, "loss_client": lc, "loss_server": ls, "loss": fused, "w_client": w}


class SuperNetworkServer(ServerSide):
    """The main server holding the whole super-network; its loss travels back with the gradient
    (TPGF's phase 2: the client's eq. (3) weight reads it)."""

    def step(self, batches):
        res = super().step(batches)
        res.replies = {c: {"loss": float(loss)} for c, loss in res.losses.items()}
        return res


@dataclass
class DepthState:
    depth: dict = field(default_factory=dict)  # client -> the depth d_i its last update was trained at


class CollaborativeAggregator(Aggregator):
    """Eqs. (6)-(8): encoder layers averaged over the clients holding them with depth x
    inverse-(fused-)loss weights, pulled towards the server's copy by lambda; classifiers stay
    with their clients; the result is the new global model, which the main server adopts."""

    state_cls = DepthState

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return ["acc_local", "acc_local_std", "acc_local_own", "eval_test_share"]

    def client_start(self, client: int, cut: int):
        """The global encoder prefix (a download) plus the client's own classifier (kept on
        the device in a deployment; parked on the fed actor here, not counted as traffic)."""
        return self.prefix_with_own(client, cut), True

    def aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate], failures: dict[int, str]):
        """Eq. (6) weights, eq. (8) per layer; classifiers stay local. Returns the new global
        model, which the main server adopts (its copy of every layer)."""
        server_copy = dict(self.global_state)
        for s in server_states:
            server_copy.update(s)
        encoders = []
        for u in updates:
            self.own[u.client] = {k: v for k, v in u.state.items() if k.startswith(HEAD)}
            self.state.depth[u.client] = int(u.report["depth"])
            encoders.append({k: v for k, v in u.state.items() if not k.startswith(HEAD)})
        if updates:
            w = client_weights([u.report["depth"] for u in updates], [u.report["loss"] for u in updates])
            self.global_state = consensus_average(encoders, w, server_copy, self.params.consensus_lambda)
        else:
            self.global_state = server_copy
        return self.global_state

    def own_path(self, ev, client: int) -> torch.nn.Module | None:
        """Client ``client``'s own path as a module: the global encoder prefix of its depth
        d_i followed by its classifier (what it runs when the server is away), or None if it
        has no classifier yet. Call after ``ev.load(self.global_state)``."""
        head_state = self.own.get(client)
        if not head_state:
            return None
        d = self.state.depth[client]
        head = client_classifier(ev.model.activation_shape(d), ev.num_classes,
                                 spatial=self.params.classifier_head == "spatial")
        head.load_state_dict(wire_to_state({k[len(HEAD):]: v for k, v in head_state.items()}))
        return torch.nn.Sequential(ev.model.part(0, d), head.to(ev.device))

    def evaluate(self, ev):
        """The super-network (global model, all L blocks) on the test set -- the model of
        every paper table; plus each of this round's clients' own path (:meth:`own_path`):
        ``acc_local`` (and ``acc_local_std``) on the balanced global test set, and
        ``acc_local_own`` on the client's own label mix (the test set with each class
        weighted by the client's share of it in training), means over the clients. With more
        clients than ``--eval-passes``, each path is scored on a share of the test set
        (``eval_test_share``; ours), and ``acc_local_std`` then includes the shares' sampling
        spread."""
        acc, loss = ev(self.global_state)
        balanced, own = [], []
        paths = {c: m for c in self.last_clients if (m := self.own_path(ev, c)) is not None}
        rows = ev.shares(paths)
        for c, m in paths.items():
            with ev.aside():  # the client's own path, not the super-network reported
                seen = ev.for_client(m, c, rows[c])  # one pass: balanced accuracy and label mix
            balanced.append(seen["accuracy"])
            own.append(seen["label_mix"])
        nan = float("nan")
        extras = {"acc_local": float(np.mean(balanced)) if balanced else nan,
                  "acc_local_std": float(np.std(balanced)) if balanced else nan,
                  "acc_local_own": float(np.mean(own)) if own else nan,
                  "eval_test_share": ev.test_share if paths else nan}
        return acc, loss, extras
