"""SuperSFL as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:mod:`~raysfl.algorithms.super_sfl.planner`: depths, server availability) and the client, the
main server and the aggregator (:mod:`~raysfl.algorithms.super_sfl.algorithm`: TPGF, the
super-network, collaborative aggregation)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError

ALLOCATIONS = ("profile", "measured")
AVAILABILITY_MODES = ("gradients", "server")
CLASSIFIER_HEADS = ("spatial", "pooled")
FUSION_MODES = ("full", "no_loss", "no_depth", "equal")  # TPGF's client weight, eq. (3), and its ablations (tpgf.py)


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


class SuperSFL(Algorithm):
    name = "super_sfl"
    tables = "raysfl.algorithms.super_sfl.tables"
    summary = "SuperSFL: weight-sharing super-network, TPGF, client-classifier fallback, collaborative aggregation"
    params_cls = SuperSFLParams
    planner = role("raysfl.algorithms.super_sfl.planner:DepthPlanner")
    client = role("raysfl.algorithms.super_sfl.algorithm:TPGFClient")
    server = role("raysfl.algorithms.super_sfl.algorithm:SuperNetworkServer")
    aggregator = role("raysfl.algorithms.super_sfl.algorithm:CollaborativeAggregator")
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
