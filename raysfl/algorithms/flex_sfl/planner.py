"""FLEX-SFL's planner (the driver's role; no torch): DAS once per run (eqs. 5-10,
:mod:`~raysfl.algorithms.flex_sfl.das`), EDCS in every cluster each round (eqs. 14-19,
:mod:`~raysfl.algorithms.flex_sfl.edcs`), one edge server per cluster, and HiLo's schedule of
edge synchronisations (:mod:`~raysfl.algorithms.flex_sfl.hilo`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raysfl.algorithms.flex_sfl.das import DASResult, das
from raysfl.algorithms.flex_sfl.edcs import cluster_quota, cluster_quotas, edcs_select
from raysfl.algorithms.flex_sfl.hilo import schedule
from raysfl.algorithms.flex_sfl.spec import max_cut_of
from raysfl.algorithms.roles.context import FederationContext
from raysfl.algorithms.roles.planner import Planner

PAPER_RHO = 0.2  # Sec. 5.1: "the client participation rate set to rho = 0.2"


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
        """Algorithm 2 in every cluster (seeded per round and cluster), among the cluster's
        available members (churn, ``ctx.unavailable``): K_n of them, or all when fewer are
        available (K_n is the whole cluster's, eq. 16)."""
        p, chosen = self.params, []
        for n, (members, quota) in enumerate(zip(self.das.clusters, self.quotas())):
            if not members or quota == 0:
                continue
            if quota is None:
                quota = cluster_quota(len(members), self.rho)
            members = [c for c in members if c not in ctx.unavailable]
            if not members:
                continue
            rng = np.random.default_rng([self.cfg.seed, rnd, n, 0xEDC5])
            rand, greedy = edcs_select(members, self.histograms, self.rho, p.random_ratio, rng, quota)
            chosen += rand + greedy
        return sorted(chosen)

    def assign_cuts(self, rnd, clients, ctx):
        return {c: self.das.cluster_cut[self.das.cluster_of(c)] for c in clients}

    def assign_servers(self, rnd, clients, cuts, ctx):
        return {c: self.das.cluster_of(c) for c in clients}

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return ["client_aggregation", "edge_aggregation", "global_sync"]  # HiLo's schedule (recorded below)

    def sync_servers(self, rnd: int) -> bool:
        """HiLo-Agg (Sec. 3.3, eqs. 24-27): the edge servers aggregate every tau_e rounds; the round's whole
        schedule is recorded (client aggregation, edge aggregation, global sync)."""
        s = schedule(rnd, self.params.tau_c, self.params.tau_e)
        for name, key in (("client_aggregation", "client"), ("edge_aggregation", "edge"), ("global_sync", "global")):
            self.record(name, float(s[key]))
        return s["edge"]
