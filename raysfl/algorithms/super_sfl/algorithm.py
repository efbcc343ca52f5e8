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

Readings the paper leaves open are listed in docs/super-sfl.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from raysfl.algorithms.roles import (HEAD, Aggregator, ClientRound, ClientUpdate, FederationContext, OwnModuleClient,
                                     Planner, ServerSide)
from raysfl.algorithms.spec import Algorithm
from raysfl.algorithms.super_sfl.allocation import allocate_depths
from raysfl.algorithms.super_sfl.collaborative_aggregation import client_weights, consensus_average
from raysfl.algorithms.super_sfl.tpgf import FUSION_MODES, clip_l2, client_weight, fuse, fused_loss, l2_norm
from raysfl.errors import ConfigError
from raysfl.models.heads import client_classifier
from raysfl.transport import wire_to_state

ALLOCATIONS = ("profile", "measured")
AVAILABILITY_MODES = ("gradients", "server")
CLASSIFIER_HEADS = ("spatial", "pooled")


@dataclass
class SuperSFLParams:
    """SuperSFL's knobs; defaults are the paper's (Sec. II, III-A)."""

    depth_alpha: float = 0.5         # alpha in eq. (1): layers per GB of memory
    depth_beta: float = 4.0          # beta in eq. (1): extra layers for the lowest latency
    allocation: str = "profile"      # profile: device profiles | measured: timed once at start-up (Sec. II-A)
    fusion: str = "full"             # TPGF client weight (eq. 3): full | no_loss | no_depth | equal (Sec. IV)
    clip_norm: float = 0.5           # tau: L2 clip of the local encoder gradient (Alg. 2, line 8)
    consensus_lambda: float = 0.01   # lambda in eqs. (7)-(8): pull towards the server's copy of a layer
    server_timeout_s: float = 5.0    # wait for the server's answer before a fallback step (Sec. II-C)
    server_availability: float = 1.0  # fraction of rounds with server gradients (Table III)
    availability_rounds: str | None = None  # explicit schedule instead: rounds with server gradients, e.g. "1-5,9"
    availability_mode: str = "gradients"  # rounds without: gradients (the server trains, its gradient
                                          # is missing or late) | server (the server is off)
    classifier_head: str = "spatial"  # client classifier on feature maps: spatial (pooled to <= 4x4 and
                                      # flattened) | pooled (one value per channel); ViT tokens: the same head


def parse_round_set(text: str) -> set[int]:
    """``"1-5,9"`` -> {1, 2, 3, 4, 5, 9}; raises ValueError on anything else."""
    out: set[int] = set()
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        a, _, b = item.partition("-")
        lo, hi = int(a), int(b or a)
        if lo < 1 or hi < lo:
            raise ValueError(item)
        out.update(range(lo, hi + 1))
    return out


AVAILABILITY_BLOCK = 10  # rounds per block of the availability schedule


def server_answers(availability: float, rnd: int, seed: int, block: int = AVAILABILITY_BLOCK) -> bool:
    """Whether the server answers in round ``rnd``: in every block of ``block`` consecutive
    rounds it answers in exactly round(availability x block) of them, drawn from the seed.
    The fraction holds over any run of whole blocks and does not depend on the total number
    of rounds, so a resumed run keeps the schedule."""
    k = int(round(availability * block))
    b, pos = divmod(rnd - 1, block)
    perm = np.random.default_rng([seed, b, 0xA7A1]).permutation(block)
    return bool(perm[pos] < k)


def available_rounds(availability: float, rounds: int, seed: int) -> set[int]:
    """The rounds among 1..``rounds`` in which the server answers (:func:`server_answers`)."""
    return {r for r in range(1, rounds + 1) if server_answers(availability, r, seed)}


def server_up(params: "SuperSFLParams", seed: int, rnd: int) -> bool:
    """Whether the server's gradients reach the clients in round ``rnd`` (Table III): the explicit
    ``availability_rounds``, else the seeded ``server_availability`` schedule."""
    if params.availability_rounds is not None:
        return rnd in parse_round_set(str(params.availability_rounds))
    return server_answers(params.server_availability, rnd, seed)


class DepthPlanner(Planner):
    """Eq. (1)'s depths (from the device profiles, or measured once after the actors start),
    the server-availability schedule of Table III, fallback for clients whose server is away."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.depths: np.ndarray | None = None
        self.num_blocks = 0
        self.profile: dict[int, tuple[float, float]] = {}  # client -> (memory GB, latency s) used by eq. (1)
        self.valid_cuts: list[int] = []

    @property
    def measures_clients(self) -> bool:
        return self.params.allocation == "measured"

    def setup(self, ctx: FederationContext) -> None:
        """Eq. (1) once per run (Sec. II-A: profiles are sent once, at initialisation)."""
        self.num_blocks, self.valid_cuts = ctx.num_blocks, list(ctx.valid_cuts)
        if self.params.allocation == "profile":
            self.calibrate({k: (p.memory_gb, p.latency_s) for k, p in enumerate(ctx.profiles)})

    def calibrate(self, profile: dict[int, tuple[float, float]]) -> None:
        """Depths from (memory GB, latency s) per client: eq. (1), then the largest valid cut
        of the model not above d_i (every cut is valid for the zoo's models)."""
        clients = sorted(profile)
        self.profile = {c: (float(profile[c][0]), float(profile[c][1])) for c in clients}
        d = allocate_depths([profile[c][0] for c in clients], [profile[c][1] for c in clients], self.num_blocks,
                            self.params.depth_alpha, self.params.depth_beta)
        lowest = min(self.valid_cuts)
        self.depths = np.asarray([max([v for v in self.valid_cuts if v <= di] or [lowest]) for di in d])

    def client_info(self, client: int) -> dict:
        mem, lat = self.profile.get(client, (float("nan"), float("nan")))
        return {"depth": int(self.depths[client]), "alloc_memory_gb": mem, "alloc_latency_s": lat}

    def assign_cuts(self, rnd, clients, ctx):
        return {c: int(self.depths[c]) for c in clients}

    def servers_down(self, rnd: int) -> set[int]:
        """``availability_mode=server`` only: the server is off in rounds without gradients
        (in ``gradients`` mode it keeps training; the client role drops its gradient)."""
        if self.params.availability_mode == "gradients" or server_up(self.params, self.cfg.seed, rnd):
            return set()
        return {0}

    def on_server_down(self, rnd: int, clients: list[int]) -> list[int]:
        return list(clients)  # every client trains on its local classifier (Alg. 3)

    def round_info(self, rnd: int) -> dict[str, float]:
        return {"server_available": float(server_up(self.params, self.cfg.seed, rnd))}


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
        loss = F.cross_entropy(c.head(acts), y)
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
        g_server = torch.autograd.grad(acts, enc, grad_outputs=reply.grad, allow_unused=True)
        g_server = [torch.zeros_like(p) if g is None else g for p, g in zip(enc, g_server)]
        x = c.state
        depth, server_depth = c.cut, self.ctx.num_blocks - c.cut
        w = client_weight(depth, server_depth, x.loss_client, reply.loss, self.params.fusion)
        for p, g in zip(enc, fuse(x.g_client, g_server, w)):
            p.grad = g
        c.opt.step()
        c.opt.zero_grad(set_to_none=True)
        c.stats.client_flops += 2.0 * x.batch * c.fwd_flops  # TPGF's second backward through the encoder
        x.ls_sum += reply.loss * x.batch
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
    (TPGF's phase 2)."""

    reply_loss = True


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
        return ["acc_local", "acc_local_std", "acc_local_own"]

    def client_start(self, client: int, cut: int):
        """The global encoder prefix (a download) plus the client's own classifier (kept on
        the device in a deployment; parked on the fed actor here, not counted as traffic)."""
        return self.prefix_with_own(client, cut), True

    def aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate]):
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
        weighted by the client's share of it in training), means over the clients."""
        acc, loss = ev(self.global_state)
        balanced, own = [], []
        for c in self.last_clients:
            m = self.own_path(ev, c)
            if m is None:
                continue
            balanced.append(ev.module(m)[0])
            own.append(ev.on_label_mix(m, c))
        nan = float("nan")
        extras = {"acc_local": float(np.mean(balanced)) if balanced else nan,
                  "acc_local_std": float(np.std(balanced)) if balanced else nan,
                  "acc_local_own": float(np.mean(own)) if own else nan}
        return acc, loss, extras


class SuperSFL(Algorithm):
    name = "super_sfl"
    summary = "SuperSFL: weight-sharing super-network, TPGF, client-classifier fallback, collaborative aggregation"
    params_cls = SuperSFLParams
    planner = DepthPlanner
    client = TPGFClient
    server = SuperNetworkServer
    aggregator = CollaborativeAggregator
    # The paper's setting (Sec. III-A): a ViT, Dirichlet alpha = 0.5.
    config_defaults = {"model": "vit", "partition": "dirichlet", "alpha": 0.5}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if p.allocation not in ALLOCATIONS:
            raise ConfigError(f"unknown allocation '{p.allocation}'; allowed: {', '.join(ALLOCATIONS)}")
        if p.fusion not in FUSION_MODES:
            raise ConfigError(f"unknown fusion '{p.fusion}'; allowed: {', '.join(FUSION_MODES)}")
        if p.availability_mode not in AVAILABILITY_MODES:
            raise ConfigError(f"unknown availability_mode '{p.availability_mode}'; allowed: "
                              f"{', '.join(AVAILABILITY_MODES)}")
        if p.classifier_head not in CLASSIFIER_HEADS:
            raise ConfigError(f"unknown classifier_head '{p.classifier_head}'; allowed: {', '.join(CLASSIFIER_HEADS)}")
        for name in ("depth_alpha", "depth_beta", "consensus_lambda"):
            if not math.isfinite(getattr(p, name)) or getattr(p, name) < 0:
                raise ConfigError(f"{name} must be a finite number >= 0, got {getattr(p, name)}")
        if not p.clip_norm > 0:
            raise ConfigError(f"clip_norm must be > 0, got {p.clip_norm}")
        if not p.server_timeout_s > 0:
            raise ConfigError(f"server_timeout_s must be > 0 seconds, got {p.server_timeout_s}")
        if not 0 <= p.server_availability <= 1:
            raise ConfigError(f"server_availability must be in [0, 1], got {p.server_availability}")
        if p.availability_rounds is not None:
            try:
                parse_round_set(str(p.availability_rounds))
            except ValueError:
                raise ConfigError(f"availability_rounds must list rounds like '1-5,9', got "
                                  f"'{p.availability_rounds}'") from None
            if p.server_availability != 1.0:
                raise ConfigError("give either server_availability or availability_rounds, not both")
        if cfg.round_deadline_s is not None and cfg.round_deadline_s < p.server_timeout_s:
            raise ConfigError(f"round_deadline_s ({cfg.round_deadline_s}) must be at least server_timeout_s "
                              f"({p.server_timeout_s}), or no fallback step could finish in time")
