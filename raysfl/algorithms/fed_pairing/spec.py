"""FedPairing as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:mod:`~raysfl.algorithms.fed_pairing.planner`: positions, links, pairs, split lengths), its
exchange (:mod:`~raysfl.algorithms.fed_pairing.peer_exchange`) and the client and aggregator
(:mod:`~raysfl.algorithms.fed_pairing.algorithm`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError

PAIRINGS = ("greedy", "random", "location", "computation")  # Alg. 1 and Table I's baselines (pairing.py)
PAIR_WEIGHTS = ("fedavg", "paper")  # the loss weights of eqs. (2)-(3) (weighting.py)
LINK_MODELS = ("paper", "profiles")  # the simulated clock (planner.client_sim_time)


@dataclass
class FedPairingParams:
    """FedPairing's knobs; defaults are the paper's (Sec. IV-A) where it gives one."""

    pairing: str = "greedy"       # greedy (Alg. 1) | random | location | computation (Table I)
    pair_alpha: float = 1.0       # alpha of eq. 5, per GHz^2 (the paper gives no value)
    pair_beta: float = 1.0        # beta of eq. 5, per Gbit/s (the paper gives no value)
    pair_weights: str = "fedavg"  # fedavg: loss weight K a_i, FedAvg's global step | paper: a_i (weighting.py)
    double_overlap: bool = True   # eq. 7: overlapping layers take twice the step
    radius_m: float = 50.0        # clients uniform in a disk of this radius around the server
    bandwidth_mhz: float = 64.0   # B
    power_w: float = 1.0          # P
    noise_w: float = 1e-9         # sigma^2
    gain_ref: float = 1e-3        # h0: channel gain at 1 m (the paper gives no value)
    path_loss_exp: float = 3.0    # delta (the paper gives no value)
    # The simulated clock: "paper", Shannon links to the partner and the server, no latency
    # (Sec. II-C); "profiles", the device profiles' links and a latency per message, the cost
    # model of every other algorithm (ours: so that a time comparison changes one thing).
    link_model: str = "paper"


class FedPairing(Algorithm):
    name = "fed_pairing"
    tables = "raysfl.algorithms.fed_pairing.tables"
    summary = "FedPairing: greedy client pairing, client-to-client split training, overlapping-layer steps"
    params_cls = FedPairingParams
    planner = role("raysfl.algorithms.fed_pairing.planner:PairingPlanner")
    client = role("raysfl.algorithms.fed_pairing.algorithm:PeerClient")
    aggregator = role("raysfl.algorithms.fed_pairing.algorithm:PlainAverage")
    # Sec. IV-A: 20 clients, 2 local epochs, "We train the ResNet18 neural network model using
    # stochastic gradient descent optimization with a learning rate of 0.1" (no momentum named).
    # The model matters: with BatchNorm, FedPairing leads FedAvg on non-IID data; with the
    # 4-block CNN it trails it (docs/fed-pairing.md).
    config_defaults = {"clients": 20, "local_epochs": 2, "lr": 0.1, "momentum": 0.0, "model": "resnet18"}

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        return {**super().facets(cfg), "cost_model": cfg.algo_params.link_model}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if p.link_model not in LINK_MODELS:
            raise ConfigError(f"unknown link_model '{p.link_model}'; allowed: {', '.join(LINK_MODELS)}")
        if p.pairing not in PAIRINGS:
            raise ConfigError(f"unknown pairing '{p.pairing}'; allowed: {', '.join(PAIRINGS)}")
        if p.pair_weights not in PAIR_WEIGHTS:
            raise ConfigError(f"unknown pair_weights '{p.pair_weights}'; allowed: {', '.join(PAIR_WEIGHTS)}")
        for name in ("radius_m", "bandwidth_mhz", "power_w", "noise_w", "gain_ref", "path_loss_exp"):
            v = getattr(p, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {v}")
        if cfg.round_deadline_s is not None or cfg.step_deadline_s is not None:
            raise ConfigError("fed_pairing does not take real-time deadlines (round_deadline_s, step_deadline_s): "
                              "partners wait for each other; use sim_deadline_s")
        for name in ("pair_alpha", "pair_beta"):
            if not (math.isfinite(getattr(p, name)) and getattr(p, name) >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {getattr(p, name)}")
