"""FedPairing: greedy client pairing, client-to-client split training, overlapping layers.

* Wireless and compute model (Sec. II-A, IV-A; :mod:`raysfl.algorithms.fed_pairing.pairing`): client
  positions uniform in a 50 m disk around the server, rates r_ij = B log2(1 + P h_ij /
  sigma^2) with h = h0 d^-delta, CPU frequencies from the device profiles (U[0.1, 2] GHz).
* Pairing (eqs. 5-6, Alg. 1): greedy maximum-weight matching on e_ij = alpha (f_i - f_j)^2 +
  beta r_ij among the round's clients, or a Table I baseline (``--pairing``).
* Split training (eqs. 1-3): L_i = floor(W f_i / (f_i + f_j)), L_j = W - L_i, once per pair
  (the slower client takes the floor); each client holds the whole model, runs its first L_i
  layers and its partner runs the rest on its own copy and returns the logits; the owner
  computes the loss with its labels and sends back d(loss)/d(logits)
  (:mod:`raysfl.algorithms.fed_pairing.peer_exchange`, FedPairing's own exchange). Losses are weighted (``--pair-weights``,
  :mod:`raysfl.algorithms.fed_pairing.weighting`): ``fedavg`` K a_i over the round's K
  clients, FedAvg's global step; ``paper`` the literal a_i = |D_i| / sum |D|.
* Overlapping layers (eq. 7): the doubled step where both flows reached a layer in that
  step, switchable (``--double-overlap``); ``doubled_layers`` counts them.
* Aggregation: the server averages the client models (the weights are already in the
  gradients, Sec. II-A.3).
* Simulated time: compute from each client's FLOPs and CPU frequency, transfers over r_ij
  between partners and over the client-server link r_i0 for the model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from raysfl.aggregation import weighted_average
from raysfl.algorithms.fed_pairing.peer_exchange import PairPlan, PeerClient, PeerExchange
from raysfl.algorithms.fed_pairing.pairing import (
    PAIRINGS,
    client_positions,
    overlapping_layers,
    pair_clients,
    pair_split_lengths,
    rate_bps,
    rate_matrix,
)
from raysfl.algorithms.fed_pairing.weighting import PAIR_WEIGHTS, loss_weights
from raysfl.algorithms.roles import Aggregator, ClientUpdate, FederationContext, Planner
from raysfl.algorithms.spec import Algorithm
from raysfl.errors import ConfigError


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


class PairingPlanner(Planner):
    """Positions, links and CPU frequencies once per run; each round's pairs (Alg. 1), split
    lengths and loss weights; the round's simulated time over the partner and server links."""

    exchange = PeerExchange

    def __init__(self, cfg):
        super().__init__(cfg)
        self.positions: np.ndarray | None = None
        self.rates: np.ndarray | None = None
        self.freq_ghz: np.ndarray | None = None
        self.sizes: np.ndarray | None = None
        self.num_blocks = 0
        self._pairs_round = 0
        self._partner: dict[int, int | None] = {}  # the last planned round's pairs
        self._lengths: dict[int, int] = {}  # ... and each client's propagation length L_i

    def _link(self) -> dict:
        p = self.params
        return {"bandwidth_hz": p.bandwidth_mhz * 1e6, "power_w": p.power_w, "noise_w": p.noise_w,
                "h0": p.gain_ref, "delta": p.path_loss_exp}

    def setup(self, ctx: FederationContext) -> None:
        rng = np.random.default_rng([self.cfg.seed, 0xFA12])
        self.num_blocks = ctx.num_blocks
        self.positions = client_positions(ctx.num_clients, self.params.radius_m, rng)
        self.rates = rate_matrix(self.positions, **self._link())
        self.server_rates = rate_bps(np.linalg.norm(self.positions, axis=1), **self._link())
        self.freq_ghz = np.array([p.cpu_ghz for p in ctx.profiles])
        self.sizes = np.asarray(ctx.sizes, dtype=np.float64)

    def pairs(self, rnd: int, clients: list[int]) -> dict[int, int | None]:
        """Each of the round's clients -> its partner (None: it trains alone); the pairs'
        propagation lengths go to ``self._lengths``, one split per pair."""
        if rnd != self._pairs_round or set(clients) != set(self._partner):
            idx = sorted(clients)
            rng = np.random.default_rng([self.cfg.seed, rnd, 0x9A1E])
            sub = np.ix_(idx, idx)
            local = pair_clients(self.params.pairing, self.freq_ghz[idx], self.positions[idx], self.rates[sub], rng,
                                 self.params.pair_alpha, self.params.pair_beta)
            partner: dict[int, int | None] = {c: None for c in idx}
            pairs = [(idx[a], idx[b]) for a, b in local]
            for a, b in pairs:
                partner[a], partner[b] = b, a
            lengths = {c: self.num_blocks for c in idx}
            lengths.update(pair_split_lengths(self.num_blocks, pairs, self.freq_ghz))
            self._pairs_round, self._partner, self._lengths = rnd, partner, lengths
        return self._partner

    def assign_cuts(self, rnd, clients, ctx):
        """L_i for each client (its whole model when alone)."""
        self.pairs(rnd, clients)
        return {c: self._lengths[c] for c in clients}

    def model_blocks(self, cut: int, ctx: FederationContext) -> int:
        return ctx.num_blocks  # every client holds the whole model; its partner runs the rest on its own

    def client_plans(self, rnd, clients, cuts) -> dict[int, PairPlan]:
        """Partner, overlapping layers (those both flows may reach in the client's copy) and
        loss weight of each of the round's clients."""
        weights = loss_weights(self.params.pair_weights, self.sizes, clients)
        out = {}
        for c, j in self.pairs(rnd, clients).items():
            overlap = [] if j is None else overlapping_layers(self.num_blocks, self._lengths[c], self._lengths[j])
            out[c] = PairPlan(j, overlap, float(weights[c]))
        return out

    def restrict(self, rnd: int, plans: dict, clients: list[int]) -> dict:
        """A client whose partner is not among ``clients`` trains alone, on its whole model."""
        keep, out = set(clients), {}
        for c in clients:
            p = plans[c]
            if p.role.partner is not None and p.role.partner not in keep:
                p = dataclasses.replace(p, cut=self.num_blocks, role=PairPlan(None, [], p.role.weight))
            out[c] = p
        return out

    def client_info(self, client: int) -> dict:
        return {"position_m": [float(v) for v in self.positions[client]], "cpu_ghz": float(self.freq_ghz[client]),
                "server_rate_bps": float(self.server_rates[client]),
                "a": float(self.sizes[client] / self.sizes.sum())}

    def client_sim_time(self, client, stats, profile, server_flops_per_s) -> float:
        """Compute on the client's CPU, activations and gradients over the partner link r_ij,
        the model over the client-server link r_i0 (the paper models no latency)."""
        t = stats.traffic
        compute = stats.client_flops / profile.flops_per_s
        model = (t.params_up + t.params_down) * 8.0 / self.server_rates[client]
        peer = t.smashed_up + t.grad_down + t.other_up + t.other_down
        partner = self._partner.get(client)
        link = self.rates[client, partner] if partner is not None else math.inf
        return compute + model + peer * 8.0 / link


class PlainAverage(Aggregator):
    """The plain average of the client models: the weights are already in their gradients
    (Sec. II-A.3; :mod:`raysfl.algorithms.fed_pairing.weighting`)."""

    def average(self, global_state, updates: list[ClientUpdate]):
        if not updates:
            return global_state
        return weighted_average([(u.state, 1.0) for u in updates], base=global_state)


class FedPairing(Algorithm):
    name = "fed_pairing"
    summary = "FedPairing: greedy client pairing, client-to-client split training, overlapping-layer steps"
    params_cls = FedPairingParams
    planner = PairingPlanner
    client = PeerClient
    aggregator = PlainAverage
    # Sec. IV-A: 20 clients, 2 local epochs, "We train the ResNet18 neural network model using
    # stochastic gradient descent optimization with a learning rate of 0.1" (no momentum named).
    # The model matters: with BatchNorm, FedPairing leads FedAvg on non-IID data; with the
    # 4-block CNN it trails it (docs/fed-pairing.md).
    config_defaults = {"clients": 20, "local_epochs": 2, "lr": 0.1, "momentum": 0.0, "model": "resnet18"}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
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
