"""SuperSFL as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:mod:`~raysfl.algorithms.super_sfl.planner`: depths, server availability) and the client, the
main server and the aggregator (:mod:`~raysfl.algorithms.super_sfl.algorithm`: TPGF, the
super-network, collaborative aggregation)."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role
from raysfl.config import round_set
from raysfl.errors import ConfigError

ALLOCATIONS = ("profile", "measured")
AVAILABILITY_MODES = ("gradients", "server")
CLASSIFIER_HEADS = ("spatial", "pooled")
FUSION_MODES = ("full", "no_loss", "no_depth", "equal")  # TPGF's client weight, eq. (3), and its ablations (tpgf.py)


@dataclass
class SuperSFLParams:
    """SuperSFL's knobs; defaults are the paper's (Sec. II, III-A)."""

    depth_alpha: float = knob(0.5, "SuperSFL eq. 1: client layers per GB of memory (alpha)", at_least=0)
    depth_beta: float = knob(4.0, "SuperSFL eq. 1: extra client layers for the lowest latency (beta)", at_least=0)
    allocation: str = knob("profile", "SuperSFL depths from: profile (sampled devices) | measured (timed once at "
                                      "start-up, Sec. II-A)", choices=ALLOCATIONS)
    fusion: str = knob("full", "SuperSFL TPGF client weight (eq. 3): full | no_loss | no_depth | equal (Sec. IV)",
                       choices=FUSION_MODES)
    clip_norm: float = knob(0.5, "SuperSFL: tau, the L2 clip of the local encoder gradient (Alg. 2, line 8)",
                            above=0)
    consensus_lambda: float = knob(0.01, "SuperSFL eqs. 7-8: lambda, the pull of each layer towards the server's "
                                         "copy", at_least=0)
    server_timeout_s: float = knob(5.0, "SuperSFL: seconds a client waits for the server before a fallback step "
                                        "(Sec. II-C)", above=0)
    server_availability: float = knob(1.0, "SuperSFL: fraction of rounds with server gradients (Table III)",
                                      at_least=0, at_most=1)
    availability_rounds: str | None = knob(None, "SuperSFL: rounds with server gradients, e.g. 1-10,15 (instead "
                                                 "of --server-availability)")
    availability_mode: str = knob("gradients", "SuperSFL rounds without server gradients: gradients (the server "
                                               "trains, the client takes the local step) | server (the server is "
                                               "off)", choices=AVAILABILITY_MODES)
    classifier_head: str = knob("spatial", "SuperSFL client classifier on feature maps: spatial (pooled to <=4x4, "
                                           "flattened) | pooled (one value per channel); ViT tokens: the same head",
                                choices=CLASSIFIER_HEADS)


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
        if p.availability_rounds is not None:
            try:
                round_set(str(p.availability_rounds))
            except ValueError as e:
                raise ConfigError(f"availability_rounds must list rounds like '1-5,9', got "
                                  f"'{p.availability_rounds}' ({e})") from None
            if p.server_availability != 1.0:
                raise ConfigError("give either server_availability or availability_rounds, not both")
        if cfg.round_deadline_s is not None and cfg.round_deadline_s < p.server_timeout_s:
            raise ConfigError(f"round_deadline_s ({cfg.round_deadline_s}) must be at least server_timeout_s "
                              f"({p.server_timeout_s}), or no fallback step could finish in time")
