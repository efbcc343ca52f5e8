"""FLEX-SFL (Yu et al., Sensors 2025): device-aware segmentation, edge clusters, entropy-driven
selection and hierarchical asynchronous aggregation.

* DAS (Sec. 3.1, eqs. 5-10, :mod:`raysfl.algorithms.flex_sfl.das`): each client's split point from its
  compute capacity; clients grouped into N edge clusters with one split point each.
* Edge servers: N server actors; edge server n trains the cluster's server-side submodel
  w_e^n on its clients' smashed data, reusing each received batch for tau_r updates
  (Sec. 3.3, step 3; the gradient returned to the clients is the first update's).
* EDCS (Sec. 3.2, eqs. 14-19, :mod:`raysfl.algorithms.flex_sfl.edcs`): rho * |C_n| clients per
  cluster per round, lambda of them at random and the rest by greedy label entropy.
* HiLo-Agg (Sec. 3.3, eqs. 22-28, :mod:`raysfl.algorithms.flex_sfl.hilo`): client submodels stay on
  their clients between intra-cluster aggregations (every tau_c rounds, weights D_k); the
  edge submodels are averaged by the central (fed) server every tau_e rounds (weights D_n)
  and sent back; the global model W = Combine({w_c^n}, w_e) is what is evaluated.

Readings of the paper that the text leaves open are in docs/flex-sfl.md: how the N + 1
interval bounds become N clusters with one split point each, the clamp to valid cuts,
edge aggregation layer by layer over the edge servers holding each layer (clusters have
different cuts), and what "evaluation of W" means with N cluster-specific client parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raysfl.aggregation import weighted_average
from raysfl.algorithms.flex_sfl.das import DAS_MODES, DASResult, das
from raysfl.algorithms.flex_sfl.edcs import cluster_quotas, edcs_select
from raysfl.algorithms.flex_sfl.hilo import data_weights, global_period, schedule
from raysfl.algorithms.roles import Aggregator, ClientUpdate, FederationContext, Planner, ServerSide, StepResult
from raysfl.algorithms.roles.aggregator import block_of
from raysfl.algorithms.spec import Algorithm
from raysfl.data import dataset_info
from raysfl.errors import ConfigError
from raysfl.models import build_model
from raysfl.server_steps import shared_server_step


@dataclass
class FlexSFLParams:
    """FLEX-SFL's knobs; defaults are the paper's setting (Sec. 5.1, 5.2)."""

    edge_servers: int = 3           # N: edge servers = edge clusters (eqs. 6-10)
    rho: float | None = None        # participation rate: K_n = rho * |C_n| per cluster (eq. 16); None: 0.2,
                                    # or --clients-per-round / clients when that is given
    random_ratio: float = 0.4       # lambda: share of K_n drawn at random; 1 = pure random (Alg. 2)
    tau_c: int = 4                  # rounds between intra-cluster client aggregations (eq. 23)
    tau_e: int = 2                  # rounds between edge-server aggregations (eq. 26)
    tau_r: int = 10                 # server updates per received batch of smashed data (Sec. 3.3)
    das_mode: str = "paper"         # paper | spread: how cluster split points become valid cuts (das.py)
    min_cut: int = 1                # split points are clamped to valid cuts in [min_cut, max_cut];
    max_cut: int | None = None      # None: the model's leading conv modules, at most 3 ("the first 1-3
                                    # convolutional modules", Sec. 5.2)
    clients_per_cluster: int | None = None  # fixed K_n instead of rho * |C_n| (the paper's Fig. 5: 7)
    client_agg_scope: str = "cluster"  # cluster: eq. 23 over all of C_n | trained: only clients that
                                       # trained since the last aggregation (the convergence analysis' S_t(n))


PAPER_RHO = 0.2  # Sec. 5.1: "the client participation rate set to rho = 0.2"
MAX_CONV_CUT = 3  # Sec. 5.2: "the first 1-3 convolutional modules"


def max_cut_of(params: FlexSFLParams, conv_blocks: int, valid_cuts: list[int]) -> int:
    """The deepest client-side cut allowed: ``max_cut``, else the model's leading conv modules
    (at most 3), never below the smallest valid cut."""
    if params.max_cut is not None:
        return params.max_cut
    return max(min(valid_cuts), min(MAX_CONV_CUT, conv_blocks))


AGG_SCOPES = ("cluster", "trained")


@dataclass
class Clusters:
    """DAS's clusters as every role sees them (the planner's ``shared`` facts)."""

    das: DASResult
    cluster_data: list[float]  # D_n, eq. (24): the samples of each cluster's clients


class FlexPlanner(Planner):
    """DAS once per run, EDCS in every cluster each round, one edge server per cluster, HiLo's
    schedule of edge synchronisations."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.das: DASResult | None = None
        self.sizes: np.ndarray | None = None
        self.histograms: np.ndarray | None = None

    @property
    def servers(self) -> int:
        return self.params.edge_servers

    def setup(self, ctx: FederationContext) -> None:
        """DAS once per run: capacities R_k are fixed per device (Sec. 3.1.1)."""
        p = self.params
        capacity = [prof.flops_per_s for prof in ctx.profiles]
        self.max_cut = max_cut_of(p, ctx.conv_blocks, ctx.valid_cuts)
        self.das = das(capacity, ctx.num_blocks, p.edge_servers, ctx.valid_cuts, p.min_cut, self.max_cut, p.das_mode)
        self.sizes = np.asarray(ctx.sizes, dtype=np.float64)
        self.histograms = np.asarray(ctx.histograms, dtype=np.float64)
        self.cluster_data = [float(self.sizes[members].sum()) for members in self.das.clusters]  # D_n, eq. (24)

    def shared(self) -> Clusters:
        return Clusters(self.das, self.cluster_data)

    def client_info(self, client: int) -> dict:
        d = self.das
        n = d.cluster_of(client)
        return {"edge_cluster": n, "cut": d.cluster_cut[n], "das_point": float(d.points[client]),
                "das_final_point": float(d.final[client])}

    @property
    def rho(self) -> float:
        """The participation rate: ``rho``, else ``--clients-per-round`` / clients, else 0.2."""
        if self.params.rho is not None:
            return self.params.rho
        if self.cfg.clients_per_round is not None:
            return self.cfg.clients_per_round / self.cfg.clients
        return PAPER_RHO

    def quotas(self) -> list[int | None]:
        """K_n per cluster: ``clients_per_cluster``; ``--clients-per-round`` shared out over the
        clusters by size (so a comparison trains as many clients as its baselines); or None
        (eq. 16 with rho, in ``edcs_select``)."""
        sizes = [len(m) for m in self.das.clusters]
        if self.params.clients_per_cluster is not None:
            return [self.params.clients_per_cluster] * len(sizes)
        if self.params.rho is None and self.cfg.clients_per_round is not None:
            return cluster_quotas(sizes, self.cfg.clients_per_round)
        return [None] * len(sizes)

    def select(self, rnd: int, ctx: FederationContext) -> list[int]:
        """Algorithm 2 in every cluster (seeded per round and cluster)."""
        p, chosen = self.params, []
        for n, (members, quota) in enumerate(zip(self.das.clusters, self.quotas())):
            if not members or quota == 0:
                continue
            rng = np.random.default_rng([self.cfg.seed, rnd, n, 0xEDC5])
            rand, greedy = edcs_select(members, self.histograms, self.rho, p.random_ratio, rng, quota)
            chosen += rand + greedy
        return sorted(chosen)

    def assign_cuts(self, rnd, clients, ctx):
        return {c: self.das.cluster_cut[self.das.cluster_of(c)] for c in clients}

    def assign_servers(self, rnd, clients, cuts, ctx):
        return {c: self.das.cluster_of(c) for c in clients}

    def sync_servers(self, rnd: int) -> bool:
        return schedule(rnd, self.params.tau_c, self.params.tau_e)["edge"]

    def round_info(self, rnd: int) -> dict[str, float]:
        s = schedule(rnd, self.params.tau_c, self.params.tau_e)
        return {"client_aggregation": float(s["client"]), "edge_aggregation": float(s["edge"]),
                "global_sync": float(s["global"])}


class EdgeServer(ServerSide):
    """Edge server n: tau_r updates of w_e^n on each cached batch; the clients get the first one's
    gradients (Sec. 3.3, step 3)."""

    def step(self, batches):
        grads, losses = shared_server_step(self.model, self.opt, batches)
        for _ in range(self.params.tau_r - 1):
            shared_server_step(self.model, self.opt, batches)
        return StepResult(grads, losses)

    def updates_per_step(self) -> int:
        return self.params.tau_r


@dataclass
class HiLoState:
    """The central server's HiLo-Agg state (checkpointed)."""

    cluster_models: dict = field(default_factory=dict)  # w_c^n: cluster n's latest aggregated client submodel
    version: dict = field(default_factory=dict)         # cluster n's broadcasts so far
    have: dict = field(default_factory=dict)            # client -> the cluster version it last downloaded
    edge_model: dict | None = None                      # w_e: the latest edge-server average (eq. 26)
    w_global: dict | None = None                        # W_global (eq. 28), built at t mod tau_G = 0
    w_global_eval: dict | None = None                   # its evaluation, cached once per W_global


class HiLoAggregator(Aggregator):
    """HiLo-Agg on the central (fed) server: client submodels stay with their clients between
    intra-cluster aggregations (every tau_c rounds, eq. 23), the edge submodels are averaged
    every tau_e rounds (eq. 26) and sent back to the edge servers; W_global (eq. 28) is evaluated."""

    state_cls = HiLoState

    def __init__(self, cfg, ctx, shared, global_state):
        super().__init__(cfg, ctx, shared, global_state)
        self.das = shared.das if shared is not None else None
        self.cluster_data = shared.cluster_data if shared is not None else []
        self.sizes = np.asarray(ctx.sizes, dtype=np.float64) if ctx is not None else None

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return [f"acc_cluster_{n}" for n in range(cfg.algo_params.edge_servers)] + ["acc_mix", "w_global_round"]

    def _cluster_start(self, n: int) -> dict[str, np.ndarray]:
        """The latest aggregated client submodel of cluster n (the initial model before any)."""
        m = self.state.cluster_models.get(n)
        if m is not None:
            return m
        cut = self.das.cluster_cut[n]
        return {k: v for k, v in self.global_state.items() if block_of(k) < cut}

    def client_start(self, client: int, cut: int):
        """A client continues from its own submodel; after an intra-cluster aggregation it
        downloads the cluster's (once per aggregation: eq. 23's broadcast)."""
        if client in self.own:
            return self.own[client], False
        n = self.das.cluster_of(client)
        version = self.state.version.get(n, 0)
        charged = self.state.have.get(client) != version
        self.state.have[client] = version
        return self._cluster_start(n), charged

    def aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate]):
        merged = self._aggregate(rnd, server_states, updates)
        if rnd % global_period(self.params.tau_c, self.params.tau_e) == 0:
            # eq. (28): W_global = Combine({w_c^n}, w_e) at t mod tau_G = 0, "used for evaluation
            # and inference in the current phase" -- kept until the next one (the parts are
            # replaced, never changed in place, by later aggregations)
            self.state.w_global = {"round": rnd, "edge_model": self.state.edge_model or {},
                                   "cluster_models": {n: self._cluster_start(n) for n in range(len(self.das.clusters))}}
        return merged

    def _aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate]):
        st = self.state
        for u in updates:  # w_c^k after this round's local training
            self.own[u.client] = u.state
        when = schedule(rnd, self.params.tau_c, self.params.tau_e)
        if when["client"]:
            for n, members in enumerate(self.das.clusters):
                trained = [k for k in members if k in self.own]
                if not trained:
                    continue  # nobody moved since the last broadcast: w_c^n is unchanged
                # eq. (23) over all of C_n; members without a fresh model still hold the last broadcast
                stale = float(sum(self.sizes[k] for k in members if k not in self.own))
                items = [(self.own.pop(k), self.sizes[k]) for k in trained]
                if stale > 0 and self.params.client_agg_scope == "cluster":
                    items.append((self._cluster_start(n), stale))
                st.cluster_models[n] = weighted_average(items)
                st.version[n] = st.version.get(n, 0) + 1
        if when["edge"] and server_states:
            # eq. (26), layer by layer over the edge servers holding each layer
            items = [(s, self.cluster_data[n]) for n, s in enumerate(server_states) if s]
            if items:
                st.edge_model = weighted_average(items, base=st.edge_model or {})
                return st.edge_model
        return None

    def _combined(self, n: int, cluster_models: dict, edge: dict) -> dict[str, np.ndarray]:
        """Eq. (28) for cluster n: its client submodel on blocks [0, cut_n), the global server
        model on [cut_n, L) (initial weights where a part has not been aggregated yet)."""
        cut = self.das.cluster_cut[n]
        state = dict(self.global_state)
        state.update({k: v for k, v in edge.items() if block_of(k) >= cut})
        part = cluster_models.get(n)
        state.update(part if part is not None else {k: v for k, v in self.global_state.items() if block_of(k) < cut})
        return state

    def _evaluate_parts(self, ev, cluster_models: dict, edge: dict) -> tuple[float, float, dict]:
        """The beta_n-weighted mean accuracy and loss of the N cluster models, and each one's."""
        accs, losses, weights, per = [], [], [], {}
        for n, members in enumerate(self.das.clusters):
            if not members:
                continue
            acc, loss = ev(self._combined(n, cluster_models, edge))
            accs.append(acc)
            losses.append(loss)
            weights.append(self.cluster_data[n])
            per[f"acc_cluster_{n}"] = acc
        beta = data_weights(weights)
        return float(np.dot(beta, accs)), float(np.dot(beta, losses)), per

    def evaluate(self, ev):
        """``test_accuracy``: W_global, built at the last t mod tau_G = 0 (eq. 28) and carried
        forward until the next (the initial model before the first), as the paper evaluates it.
        W_global holds N complete models, cluster n's being w_c^n on blocks [0, cut_n) and w_e
        on [cut_n, L); reported is their beta_n-weighted mean, ``acc_cluster_n`` each one's.
        ``acc_mix``: the same Combine of the *latest* parts every round (fresh only at tau_G);
        ``w_global_round``: the round W_global was built (0: the initial model)."""
        st = self.state
        mix, _, _ = self._evaluate_parts(ev, st.cluster_models, st.edge_model or {})
        w = st.w_global or {"round": 0, "cluster_models": {}, "edge_model": {}}
        cached = st.w_global_eval
        if cached is None or cached["round"] != w["round"]:  # evaluated once per W_global
            acc, loss, per = self._evaluate_parts(ev, w["cluster_models"], w["edge_model"])
            cached = st.w_global_eval = {"round": w["round"], "acc": acc, "loss": loss, "per": per}
        return cached["acc"], cached["loss"], {**cached["per"], "acc_mix": mix, "w_global_round": float(w["round"])}

    def client_model(self, client: int) -> dict[str, np.ndarray]:
        """W_global's model for the client's cluster (``test_accuracy_local``)."""
        w = self.state.w_global or {"cluster_models": {}, "edge_model": {}}
        return self._combined(self.das.cluster_of(client), w["cluster_models"], w["edge_model"])

    def global_model(self):
        return None  # N cluster models (W_global): each client's is client_model


class FlexSFL(Algorithm):
    name = "flex_sfl"
    summary = "FLEX-SFL: device-aware cuts, edge-server clusters, entropy selection, HiLo aggregation"
    params_cls = FlexSFLParams
    planner = FlexPlanner
    server = EdgeServer
    aggregator = HiLoAggregator
    # Sec. 5.1: 100 clients, two classes each, power-law sample counts; Table 2's optimiser for FMNIST
    # (lr 0.1, decay 0.98 per round; no momentum is named: plain SGD) and per data set below.
    config_defaults = {"clients": 100, "partition": "pathological", "classes_per_client": 2,
                       "quantity_skew": 1.0, "model": "cnn", "lr": 0.1, "lr_decay": 0.98, "momentum": 0.0}
    dataset_defaults = {"cifar10": {"model": "vgg16", "lr": 0.03, "lr_decay": 0.997},
                        "cifar100": {"model": "vgg19", "lr": 0.03, "lr_decay": 0.998, "classes_per_client": 20}}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if not 1 <= p.edge_servers <= cfg.clients:
            raise ConfigError(f"edge_servers must be between 1 and clients ({cfg.clients}), got {p.edge_servers}")
        if p.rho is not None and not 0 < p.rho <= 1:
            raise ConfigError(f"rho must be in (0, 1], got {p.rho}")
        if not 0 < p.random_ratio <= 1:
            raise ConfigError(f"random_ratio (lambda) must be in (0, 1], got {p.random_ratio}")
        for name in ("tau_c", "tau_e", "tau_r"):
            if getattr(p, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(p, name)}")
        if p.das_mode not in DAS_MODES:
            raise ConfigError(f"unknown das_mode '{p.das_mode}'; allowed: {', '.join(DAS_MODES)}")
        if p.client_agg_scope not in AGG_SCOPES:
            raise ConfigError(f"unknown client_agg_scope '{p.client_agg_scope}'; allowed: {', '.join(AGG_SCOPES)}")
        if p.clients_per_cluster is not None and p.clients_per_cluster < 1:
            raise ConfigError(f"clients_per_cluster must be >= 1, got {p.clients_per_cluster}")
        given = [name for name, v in (("rho", p.rho), ("clients_per_cluster", p.clients_per_cluster),
                                      ("clients_per_round", cfg.clients_per_round)) if v is not None]
        if len(given) > 1:
            raise ConfigError(f"flex_sfl's participation is set by one of rho, clients_per_cluster or "
                              f"clients_per_round; got {' and '.join(given)}")
        info = dataset_info(cfg.dataset)
        model = build_model(cfg.model, info.input_shape, info.num_classes, seed=0)
        cuts = model.valid_cuts()
        hi = max_cut_of(p, model.leading_conv_blocks(), cuts)
        if p.min_cut > hi or not any(p.min_cut <= c <= hi for c in cuts):
            raise ConfigError(f"min_cut..max_cut = {p.min_cut}..{hi} holds no valid cut of model "
                              f"'{cfg.model}'; valid cuts: {cuts[0]}..{cuts[-1]}")
