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

This module holds the roles that run in the actors (the edge servers, the central server's
aggregator); the spec (knobs, paper setting, checks) is in :mod:`raysfl.algorithms.flex_sfl.spec`,
the planner (DAS, EDCS, the schedule) in :mod:`raysfl.algorithms.flex_sfl.planner`.

Readings of the paper that the text leaves open are in docs/flex-sfl.md: how the N + 1
interval bounds become N clusters with one split point each, the clamp to valid cuts,
edge aggregation layer by layer over the edge servers holding each layer (clusters have
different cuts), and what "evaluation of W" means with N cluster-specific client parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raysfl.aggregation import weighted_average
from raysfl.algorithms.flex_sfl.hilo import data_weights, global_period, schedule
from raysfl.algorithms.roles import Aggregator, ClientUpdate, ServerSide
from raysfl.algorithms.roles.aggregator import block_of


class EdgeServer(ServerSide):
    """Edge server n: tau_r updates of w_e^n on each cached batch; the clients get the first one's
    gradients (Sec. 3.3, step 3; the shared step repeats ``updates_per_step`` times)."""

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
    keeps_updates = True  # w_c^k, as it came, until the next intra-cluster aggregation

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

    def aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate], failures: dict[int, str]):
        merged = self._aggregate(rnd, server_states, updates)
        if rnd % global_period(self.params.tau_c, self.params.tau_e) == 0:
            # eq. (28): W_global = Combine({w_c^n}, w_e) at t mod tau_G = 0, "used for evaluation
            # and inference in the current phase" -- kept until the next one (the parts are
            # replaced, never changed in place, by later aggregations)
            self.state.w_global = {"round": rnd, "edge_model": self.state.edge_model or {},
                                   "cluster_models": {n: self._cluster_start(n) for n in range(len(self.das.clusters))}}
        self.record("w_global_round", (self.state.w_global or {"round": 0})["round"])
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
        ``acc_mix``: the same Combine of the *latest* parts every round (fresh only at tau_G).
        ``w_global_round`` (recorded as it aggregates, so every round has it): the round W_global
        was built (0: the initial model)."""
        st = self.state
        with ev.aside():  # acc_mix's models: not W_global, which the test columns report
            mix, _, _ = self._evaluate_parts(ev, st.cluster_models, st.edge_model or {})
        w = st.w_global or {"round": 0, "cluster_models": {}, "edge_model": {}}
        cached = st.w_global_eval
        if cached is None or cached["round"] != w["round"]:  # evaluated once per W_global
            acc, loss, per = self._evaluate_parts(ev, w["cluster_models"], w["edge_model"])
            cached = st.w_global_eval = {"round": w["round"], "acc": acc, "loss": loss, "per": per,
                                         "passes": list(ev.recorded["test"])}  # for your metrics' columns
        else:
            ev.recorded["test"].extend(cached.get("passes", []))
        return cached["acc"], cached["loss"], {**cached["per"], "acc_mix": mix}

    def client_model(self, client: int) -> dict[str, np.ndarray]:
        """W_global's model for the client's cluster (``test_accuracy_local``)."""
        w = self.state.w_global or {"cluster_models": {}, "edge_model": {}}
        return self._combined(self.das.cluster_of(client), w["cluster_models"], w["edge_model"])

    def global_model(self):
        return None  # N cluster models (W_global): each client's is client_model
