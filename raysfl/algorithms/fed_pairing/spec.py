"""FedPairing as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:mod:`~raysfl.algorithms.fed_pairing.planner`: positions, links, pairs, split lengths), its
exchange (:mod:`~raysfl.algorithms.fed_pairing.peer_exchange`) and the client and aggregator
(:mod:`~raysfl.algorithms.fed_pairing.algorithm`)."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role

PAIRINGS = ("greedy", "random", "location", "computation")  # Alg. 1 and Table I's baselines (pairing.py)
PAIR_WEIGHTS = ("fedavg", "paper")  # the loss weights of eqs. (2)-(3) (weighting.py)
LINK_MODELS = ("paper", "profiles")  # the simulated clock (planner.client_sim_time)


@dataclass
class FedPairingParams:
    """FedPairing's knobs; defaults are the paper's (Sec. IV-A) where it gives one."""

    pairing: str = knob("greedy", "FedPairing pairs by: greedy (Alg. 1) | random | location | computation (Table I)",
                        choices=PAIRINGS)
    pair_alpha: float = knob(1.0, "FedPairing eq. 5: weight of the squared CPU-frequency difference (per GHz^2; "
                                  "the paper gives no value)", at_least=0)
    pair_beta: float = knob(1.0, "FedPairing eq. 5: weight of the partner link rate (per Gbit/s; the paper gives no "
                                 "value)", at_least=0)
    pair_weights: str = knob("fedavg", "FedPairing loss weights: fedavg (K a_i: FedAvg's global step to first "
                                       "order; each client's lr scaled by n_i / mean n) | paper (a_i: the step / N)",
                             choices=PAIR_WEIGHTS)
    double_overlap: bool = knob(True, "FedPairing eq. 7: overlapping layers take twice the step")
    radius_m: float = knob(50.0, "FedPairing: clients uniform in a disk of this radius (m) around the server",
                           above=0)
    bandwidth_mhz: float = knob(64.0, "FedPairing: link bandwidth B (MHz)", above=0)
    power_w: float = knob(1.0, "FedPairing: transmit power P (W)", above=0)
    noise_w: float = knob(1e-9, "FedPairing: noise power sigma^2 (W)", above=0)
    gain_ref: float = knob(1e-3, "FedPairing: channel gain h0 at 1 m (the paper gives no value)", above=0)
    path_loss_exp: float = knob(3.0, "FedPairing: path-loss exponent delta (the paper gives no value)", above=0)
    link_model: str = knob("paper", "FedPairing's simulated clock: paper (Shannon links to the partner and the "
                                    "server, no latency, Sec. II-C) | profiles (the device profiles' links and "
                                    "latency, every other algorithm's; ours, so that a time comparison changes one "
                                    "thing)", choices=LINK_MODELS)


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
