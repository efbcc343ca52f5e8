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

import dataclasses
from dataclasses import dataclass

import numpy as np

from raysfl.aggregation import weighted_average
from raysfl.algorithms.base import Algorithm, ClientUpdate, FederationContext, Protocol
from raysfl.algorithms.flex_sfl.das import DAS_MODES, DASResult, das
from raysfl.algorithms.flex_sfl.edcs import edcs_select
from raysfl.algorithms.flex_sfl.hilo import data_weights, schedule
from raysfl.errors import ConfigError
from raysfl.server_steps import shared_server_step


@dataclass
class FlexSFLParams:
    """FLEX-SFL's knobs; defaults are the paper's setting (Sec. 5.1)."""

    edge_servers: int = 3           # N: edge servers = edge clusters (eqs. 6-10)
    rho: float = 0.2                # participation rate: K_n = rho * |C_n| per cluster (eq. 16)
    random_ratio: float = 0.4       # lambda: share of K_n drawn at random; 1 = pure random (Alg. 2)
    tau_c: int = 4                  # rounds between intra-cluster client aggregations (eq. 23)
    tau_e: int = 2                  # rounds between edge-server aggregations (eq. 26)
    tau_r: int = 10                 # server updates per received batch of smashed data (Sec. 3.3)
    das_mode: str = "spread"        # spread | paper: how cluster split points become valid cuts (das.py)
    min_cut: int = 1                # split points are clamped to valid cuts in [min_cut, max_cut];
    max_cut: int = 3                # the paper puts the first 1-3 conv modules on the clients (Sec. 5.2)
    clients_per_cluster: int | None = None  # fixed K_n instead of rho * |C_n| (the paper's Fig. 5: 7)
    client_agg_scope: str = "cluster"  # cluster: eq. 23 over all of C_n | trained: only clients that
                                       # trained since the last aggregation (the convergence analysis' S_t(n))


AGG_SCOPES = ("cluster", "trained")


def _block(key: str) -> int:
    return int(key.split(".")[1])


class FlexSFL(Algorithm):
    name = "flex_sfl"
    summary = "FLEX-SFL: device-aware cuts, edge-server clusters, entropy selection, HiLo aggregation"
    params_cls = FlexSFLParams
    protocol = Protocol(broadcast_servers=True)  # one server actor per edge cluster: set from the params
    config_defaults = {"clients": 100, "partition": "pathological", "classes_per_client": 2,
                       "quantity_skew": 1.0}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.protocol = dataclasses.replace(FlexSFL.protocol, servers=self.params.edge_servers)
        self.das: DASResult | None = None
        self.sizes: np.ndarray | None = None
        self.histograms: np.ndarray | None = None

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if not 1 <= p.edge_servers <= cfg.clients:
            raise ConfigError(f"edge_servers must be between 1 and clients ({cfg.clients}), got {p.edge_servers}")
        if not 0 < p.rho <= 1:
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
        if cfg.clients_per_round is not None:
            raise ConfigError("flex_sfl selects rho x |cluster| clients per edge cluster; "
                              f"use --rho or --clients-per-cluster instead of --clients-per-round "
                              f"({cfg.clients_per_round})")
        from raysfl.data import dataset_info
        from raysfl.models import build_model

        info = dataset_info(cfg.dataset)
        cuts = build_model(cfg.model, info.input_shape, info.num_classes, seed=0).valid_cuts()
        if p.min_cut > p.max_cut or not any(p.min_cut <= c <= p.max_cut for c in cuts):
            raise ConfigError(f"min_cut..max_cut = {p.min_cut}..{p.max_cut} holds no valid cut of model "
                              f"'{cfg.model}'; valid cuts: {cuts[0]}..{cuts[-1]}")

    # ----------------------------------------------------------------- driver side
    def setup(self, ctx: FederationContext) -> None:
        """DAS once per run: capacities R_k are fixed per device (Sec. 3.1.1)."""
        p = self.params
        capacity = [prof.flops_per_s for prof in ctx.profiles]
        self.das = das(capacity, ctx.num_blocks, p.edge_servers, ctx.valid_cuts, p.min_cut, p.max_cut, p.das_mode)
        self.sizes = np.asarray(ctx.sizes, dtype=np.float64)
        self.histograms = np.asarray(ctx.histograms, dtype=np.float64)
        self.cluster_data = [float(self.sizes[members].sum()) for members in self.das.clusters]  # D_n, eq. (24)

    def client_info(self, client: int) -> dict:
        d = self.das
        n = d.cluster_of(client)
        return {"edge_cluster": n, "cut": d.cluster_cut[n], "das_point": float(d.points[client]),
                "das_final_point": float(d.final[client])}

    def select(self, rnd: int, ctx: FederationContext) -> list[int]:
        """Algorithm 2 in every cluster (seeded per round and cluster)."""
        p, chosen = self.params, []
        for n, members in enumerate(self.das.clusters):
            if not members:
                continue
            rng = np.random.default_rng([self.cfg.seed, rnd, n, 0xEDC5])
            rand, greedy = edcs_select(members, self.histograms, p.rho, p.random_ratio, rng, p.clients_per_cluster)
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

    def eval_metric_names(self) -> list[str]:
        return [f"acc_cluster_{n}" for n in range(self.params.edge_servers)]

    # ----------------------------------------------------------------- edge servers
    def server_step(self, server, batches):
        """tau_r updates of w_e^n on the cached batch; the clients get the first one's gradients."""
        grads, losses = shared_server_step(server.model, server.opt, batches)
        for _ in range(self.params.tau_r - 1):
            shared_server_step(server.model, server.opt, batches)
        return grads, losses

    def server_updates_per_step(self) -> int:
        return self.params.tau_r

    # ----------------------------------------------------------------- central / fed server
    def _cluster_start(self, fed, n: int) -> dict[str, np.ndarray]:
        """The latest aggregated client submodel of cluster n (the initial model before any)."""
        m = fed.extra.get("cluster_models", {}).get(n)
        if m is not None:
            return m
        cut = self.das.cluster_cut[n]
        return {k: v for k, v in fed.global_state.items() if _block(k) < cut}

    def fed_client_state(self, fed, client: int, cut: int):
        """A client continues from its own submodel; after an intra-cluster aggregation it
        downloads the cluster's (once per aggregation: eq. 23's broadcast)."""
        if client in fed.own:
            return fed.own[client], False
        n = self.das.cluster_of(client)
        version = fed.extra.setdefault("version", {}).get(n, 0)
        have = fed.extra.setdefault("have", {})
        charged = have.get(client) != version
        have[client] = version
        return self._cluster_start(fed, n), charged

    def fed_aggregate(self, fed, rnd: int, server_states: list[dict], updates: list[ClientUpdate]):
        for u in updates:  # w_c^k after this round's local training
            fed.own[u.client] = u.state
        when = schedule(rnd, self.params.tau_c, self.params.tau_e)
        if when["client"]:
            for n, members in enumerate(self.das.clusters):
                trained = [k for k in members if k in fed.own]
                if not trained:
                    continue  # nobody moved since the last broadcast: w_c^n is unchanged
                # eq. (23) over all of C_n; members without a fresh model still hold the last broadcast
                stale = float(sum(self.sizes[k] for k in members if k not in fed.own))
                items = [(fed.own.pop(k), self.sizes[k]) for k in trained]
                if stale > 0 and self.params.client_agg_scope == "cluster":
                    items.append((self._cluster_start(fed, n), stale))
                fed.extra.setdefault("cluster_models", {})[n] = weighted_average(items)
                versions = fed.extra.setdefault("version", {})
                versions[n] = versions.get(n, 0) + 1
        if when["edge"] and server_states:
            # eq. (26), layer by layer over the edge servers holding each layer
            items = [(s, self.cluster_data[n]) for n, s in enumerate(server_states) if s]
            if items:
                base = fed.extra.get("edge_model") or {}
                fed.extra["edge_model"] = weighted_average(items, base=base)
                return fed.extra["edge_model"]
        return None

    def fed_evaluate(self, fed, evaluate_state):
        """W = Combine({w_c^n}, w_e) (eq. 28): cluster n's model is its client submodel on
        blocks [0, cut_n) and the global server model on [cut_n, L). Reported: the
        data-weighted (beta_n) mean over the clusters, and each cluster's accuracy."""
        edge = fed.extra.get("edge_model") or {}
        accs, losses, weights, extras = [], [], [], {}
        for n, members in enumerate(self.das.clusters):
            if not members:
                continue
            cut = self.das.cluster_cut[n]
            state = dict(fed.global_state)
            state.update({k: v for k, v in edge.items() if _block(k) >= cut})
            state.update(self._cluster_start(fed, n))
            acc, loss = evaluate_state(state)
            accs.append(acc)
            losses.append(loss)
            weights.append(self.cluster_data[n])
            extras[f"acc_cluster_{n}"] = acc
        beta = data_weights(weights)
        return float(np.dot(beta, accs)), float(np.dot(beta, losses)), extras
