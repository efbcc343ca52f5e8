"""FedPairing's planner (the driver's role; no torch): client positions, links and CPU
frequencies once per run (Sec. II-A, IV-A), each round's pairs (Alg. 1, eqs. 5-6), split
lengths and loss weights, and the round's simulated time over the partner and server links."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from raysfl.algorithms.fed_pairing.pairing import (
    client_positions,
    overlapping_layers,
    pair_clients,
    pair_split_lengths,
    rate_bps,
    rate_matrix,
)
from raysfl.algorithms.fed_pairing.peer_exchange import PairPlan, PeerExchange
from raysfl.algorithms.fed_pairing.weighting import loss_weights
from raysfl.algorithms.roles.context import FederationContext
from raysfl.algorithms.roles.planner import Planner


class PairingPlanner(Planner):
    """Positions, links and CPU frequencies once per run; each round's pairs (Alg. 1), split
    lengths and loss weights; the round's simulated time over the partner and server links."""

    exchange = PeerExchange
    plans_ahead = False  # client_sim_time reads the pairs of the round planned last: round r's metrics need round r's

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
            self.record("partner", -1 if j is None else int(j), client=c)  # clients.parquet: -1 trains alone
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
        """``link_model="paper"``: compute on the client's CPU, activations and gradients over
        the partner link r_ij, the model over the client-server link r_i0 (the paper models no
        latency). ``"profiles"``: the runtime's cost model, as every other algorithm's."""
        if self.params.link_model == "profiles":
            return super().client_sim_time(client, stats, profile, server_flops_per_s)
        t = stats.traffic
        compute = stats.client_flops / profile.flops_per_s
        model = (t.params_up + t.params_down) * 8.0 / self.server_rates[client]
        peer = t.smashed_up + t.grad_down + t.other_up + t.other_down
        partner = self._partner.get(client)
        link = self.rates[client, partner] if partner is not None else math.inf
        return compute + model + peer * 8.0 / link
