"""FedPairing's wireless model, pairing and split lengths by hand (raysfl/algorithms/pairing.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from raysfl.algorithms.fed_pairing.pairing import (client_positions, edge_weights, overlapping_layers, pair_clients,
                                                   rate_bps, split_lengths)
from raysfl.matching import greedy_matching


def test_rate_formula():
    # B log2(1 + P h0 d^-delta / sigma^2): 64e6 * log2(1 + 1 * 1e-3 * 10^-3 / 1e-9) = 64e6 * log2(1001)
    assert rate_bps(10.0) == pytest.approx(64e6 * math.log2(1001))
    assert rate_bps(2.0, bandwidth_hz=1e6, power_w=2.0, noise_w=1e-6, h0=1e-2, delta=2.0) == pytest.approx(
        1e6 * math.log2(1 + 2.0 * 1e-2 / 4 / 1e-6))
    assert rate_bps(5.0) > rate_bps(10.0)  # closer is faster


def test_positions_stay_in_the_disk():
    p = client_positions(500, 50.0, np.random.default_rng(0))
    assert p.shape == (500, 2) and np.linalg.norm(p, axis=1).max() <= 50.0


def test_edge_weights_eq5():
    f = [0.5, 2.0]
    r = np.array([[0.0, 3e9], [3e9, 0.0]])
    w = edge_weights(f, r, alpha=2.0, beta=0.5)
    assert w[0, 1] == pytest.approx(2.0 * 1.5 ** 2 + 0.5 * 3.0) and w[0, 1] == w[1, 0]


def test_greedy_matching_on_a_hand_made_graph():
    # weights: (0,1)=5 (0,2)=9 (0,3)=1 (1,2)=8 (1,3)=7 (2,3)=2 -> take (0,2)=9, skip (1,2)=8, take (1,3)=7
    w = np.full((4, 4), -np.inf)
    for (i, j), v in {(0, 1): 5, (0, 2): 9, (0, 3): 1, (1, 2): 8, (1, 3): 7, (2, 3): 2}.items():
        w[i, j] = w[j, i] = v
    assert greedy_matching(w) == [(0, 2), (1, 3)]


@pytest.mark.parametrize("mode", ["greedy", "random", "location", "computation"])
@pytest.mark.parametrize("n", [6, 7])
def test_no_client_is_in_two_pairs(mode, n):
    rng = np.random.default_rng(3)
    pos = client_positions(n, 50.0, rng)
    f = rng.uniform(0.1, 2.0, n)
    d = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    pairs = pair_clients(mode, f, pos, rate_bps(d), rng)
    members = [c for p in pairs for c in p]
    assert len(members) == len(set(members)) and len(pairs) == n // 2  # odd n: one client alone


def test_baselines_pick_what_they_say():
    pos = np.array([[0.0, 0.0], [1.0, 0.0], [30.0, 0.0], [31.0, 0.0]])
    f = np.array([0.1, 0.2, 1.9, 2.0])
    rng = np.random.default_rng(0)
    assert pair_clients("location", f, pos, np.zeros((4, 4)), rng) == [(0, 1), (2, 3)]      # nearest
    assert pair_clients("computation", f, pos, np.zeros((4, 4)), rng) == [(0, 3), (1, 2)]   # fast with slow


def test_split_lengths_and_overlap():
    assert split_lengths(10, 1.5, 0.5) == (7, 3)   # floor(10 * 1.5 / 2) = 7
    assert split_lengths(10, 0.01, 2.0) == (1, 9)  # floor would give 0: clamped to one layer
    assert split_lengths(3, 1.0, 2.0) == (1, 2)
    # the paper's MLP example (Sec. III-B): W = 3, L_i = 1, L_j = 2 -> only c_j's layer 2 overlaps
    assert overlapping_layers(3, own=1, partner=2) == [] and overlapping_layers(3, own=2, partner=1) == [2]
    assert overlapping_layers(10, own=7, partner=3) == [4, 5, 6, 7]
    assert overlapping_layers(10, own=5, partner=5) == []
