"""FLEX-SFL as an algorithm: its knobs (the paper's setting as defaults), its paper settings and
its checks -- no torch, so listing and validating it imports none. Its roles: the planner
(:mod:`~raysfl.algorithms.flex_sfl.planner`: DAS, EDCS, HiLo's schedule) and the edge servers
and central aggregator (:mod:`~raysfl.algorithms.flex_sfl.algorithm`)."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError
from raysfl.models.catalog import model_info

DAS_MODES = ("spread", "paper")  # how cluster split points become valid cuts (das.py)
AGG_SCOPES = ("cluster", "trained")
MAX_CONV_CUT = 3  # Sec. 5.2: "the first 1-3 convolutional modules"


@dataclass
class FlexSFLParams:
    """FLEX-SFL's knobs; defaults are the paper's setting (Sec. 5.1, 5.2)."""

    edge_servers: int = knob(3, "FLEX-SFL: edge servers = edge clusters = server actors (N, eqs. 6-10)",
                             integer=True, at_least=1)
    rho: float | None = knob(None, "FLEX-SFL eq. 16: participation rate, K_n = rho x |C_n| per cluster",
                             above=0, at_most=1, unset="0.2, or --clients-per-round / clients")
    random_ratio: float = knob(0.4, "FLEX-SFL Alg. 2: lambda, the share of K_n drawn at random (1 = pure random)",
                               above=0, at_most=1)
    tau_c: int = knob(4, "FLEX-SFL eq. 23: rounds between intra-cluster client aggregations", integer=True,
                      at_least=1)
    tau_e: int = knob(2, "FLEX-SFL eq. 26: rounds between edge-server aggregations", integer=True, at_least=1)
    tau_r: int = knob(10, "FLEX-SFL Sec. 3.3: server updates per received batch of smashed data", integer=True,
                      at_least=1)
    das_mode: str = knob("paper", "FLEX-SFL DAS: paper (eq. 5 as written) | spread (raysfl's: cluster cuts spread "
                                  "over the range)", choices=DAS_MODES)
    min_cut: int = knob(1, "FLEX-SFL: shallowest client-side cut (split points are clamped to valid cuts in "
                           "[min_cut, max_cut])", integer=True, at_least=1)
    max_cut: int | None = knob(None, "FLEX-SFL: deepest client-side cut (Sec. 5.2: \"the first 1-3 convolutional "
                                     "modules\")", integer=True, at_least=1,
                               unset="the model's leading conv modules, at most 3")
    clients_per_cluster: int | None = knob(None, "FLEX-SFL: fixed K_n instead of rho x |C_n| (Fig. 5: 7)",
                                           integer=True, at_least=1)
    client_agg_scope: str = knob("cluster", "FLEX-SFL eq. 23 over: cluster (all of C_n) | trained (only clients "
                                            "that trained since the last aggregation: the convergence analysis' "
                                            "S_t(n))", choices=AGG_SCOPES)


def max_cut_of(params: FlexSFLParams, conv_blocks: int, valid_cuts: list[int] | tuple[int, ...]) -> int:
    """The deepest client-side cut allowed: ``max_cut``, else the model's leading conv modules
    (at most 3), never below the smallest valid cut."""
    if params.max_cut is not None:
        return params.max_cut
    return max(min(valid_cuts), min(MAX_CONV_CUT, conv_blocks))


class FlexSFL(Algorithm):
    name = "flex_sfl"
    tables = "raysfl.algorithms.flex_sfl.tables"
    targets = ("classes",)  # EDCS clusters clients by their label distributions
    summary = "FLEX-SFL: device-aware cuts, edge-server clusters, entropy selection, HiLo aggregation"
    params_cls = FlexSFLParams
    planner = role("raysfl.algorithms.flex_sfl.planner:FlexPlanner")
    server = role("raysfl.algorithms.flex_sfl.algorithm:EdgeServer")
    aggregator = role("raysfl.algorithms.flex_sfl.algorithm:HiLoAggregator")
    # Sec. 5.1: 100 clients, two classes each, power-law sample counts; Table 2's optimiser for FMNIST
    # (lr 0.1, decay 0.98 per round; no momentum is named: plain SGD) and per data set below.
    config_defaults = {"clients": 100, "partition": "pathological", "classes_per_client": 2,
                       "quantity_skew": 1.0, "model": "cnn", "lr": 0.1, "lr_decay": 0.98, "momentum": 0.0}
    dataset_defaults = {"cifar10": {"model": "vgg16", "lr": 0.03, "lr_decay": 0.997},
                        "cifar100": {"model": "vgg19", "lr": 0.03, "lr_decay": 0.998, "classes_per_client": 20}}

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        """Participation is rho per edge cluster (eq. 16), or a fixed K_n, not a global count; the
        edge servers make tau_r updates per received batch."""
        p, out = cfg.algo_params, super().facets(cfg)
        if p.clients_per_cluster is not None:
            out["participation"] = f"{p.clients_per_cluster} per edge cluster"
        elif p.rho is not None:
            out["participation"] = f"rho {p.rho:g} of each edge cluster"
        else:  # rho from --clients-per-round / clients, else the paper's 0.2: about that many a round
            out["participation"] = f"{cfg.clients_per_round or round(0.2 * cfg.clients)} of {cfg.clients} a round"
        out["server_updates"] = f"{p.tau_r} per batch"  # tau_r (Sec. 3.3)
        return out

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if p.edge_servers > cfg.clients:
            raise ConfigError(f"edge_servers must be between 1 and clients ({cfg.clients}), got {p.edge_servers}")
        given = [name for name, v in (("rho", p.rho), ("clients_per_cluster", p.clients_per_cluster),
                                      ("clients_per_round", cfg.clients_per_round)) if v is not None]
        if len(given) > 1:
            raise ConfigError(f"flex_sfl's participation is set by one of rho, clients_per_cluster or "
                              f"clients_per_round; got {' and '.join(given)}")
        model = model_info(cfg.model)  # the zoo's catalogue (or your registered model): nothing is built
        cuts = model.cuts
        hi = max_cut_of(p, model.conv_blocks, cuts)
        if p.min_cut > hi or not any(p.min_cut <= c <= hi for c in cuts):
            raise ConfigError(f"min_cut..max_cut = {p.min_cut}..{hi} holds no valid cut of model "
                              f"'{cfg.model}'; valid cuts: {cuts[0]}..{cuts[-1]}")
