"""FedPairing's wireless model, pairing, split lengths and loss weights by hand
(raysfl/algorithms/fed_pairing/pairing.py, weighting.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from raysfl.algorithms.fed_pairing.pairing import (client_positions, edge_weights, overlapping_layers, pair_clients,
                                                   pair_split_lengths, rate_bps, split_lengths)
from raysfl.algorithms.fed_pairing.weighting import loss_weights
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
    # the slower client's share is floored, the faster runs the rest: L_i + L_j = W
    assert split_lengths(10, 1.5, 0.5) == (8, 2)   # slower: floor(10 * 0.5 / 2) = 2
    assert split_lengths(10, 0.5, 1.5) == (2, 8)   # the same pair, the other way round
    assert split_lengths(10, 0.01, 2.0) == (1, 9)  # floor would give 0: clamped to one layer
    assert split_lengths(10, 2.0, 0.01) == (9, 1)
    assert split_lengths(3, 1.0, 2.0) == (1, 2)
    assert split_lengths(5, 1.0, 1.0) == (2, 3)    # a tie: the first (lower-index) client takes the floor
    assert pair_split_lengths(5, [(4, 1)], [0, 1.0, 0, 0, 1.0]) == {1: 2, 4: 3}
    assert pair_split_lengths(4, [(0, 2)], [1.9, 0, 0.2]) == {0: 3, 2: 1}
    # the paper's MLP example (Sec. III-B): W = 3, L_i = 1, L_j = 2 -> only c_j's layer 2 overlaps
    assert overlapping_layers(3, own=1, partner=2) == [] and overlapping_layers(3, own=2, partner=1) == [2]
    assert overlapping_layers(10, own=8, partner=2) == [3, 4, 5, 6, 7, 8]
    assert overlapping_layers(10, own=5, partner=5) == []


@pytest.mark.parametrize("mode", ["greedy", "random", "location", "computation"])
def test_every_pair_splits_the_whole_model(mode):
    """Split lengths are decided once per pair: for every pair the partners' lengths sum to
    W (every block of each copy is reached by one flow or both), the slower partner never
    runs more blocks, and each copy's overlap is the other's gap -- for several seeds,
    client counts, models and pairing modes, through the algorithm's own planner."""
    import raysfl
    from raysfl.algorithms.fed_pairing.spec import FedPairing
    from raysfl.algorithms.roles import FederationContext
    from raysfl.devices import sample_profiles
    from raysfl.resolve import validate

    for seed in (0, 1, 2, 3):
        for n in (2, 5, 20, 33):
            for W in (4, 10):
                cfg = validate(raysfl.config_from_kwargs(algo="fed_pairing", clients=n, seed=seed,
                                                         fed_pairing={"pairing": mode}))
                planner = FedPairing.make_planner(cfg)
                ctx = FederationContext(n, W, list(range(1, W)), np.full(n, 50), np.zeros((n, 10)),
                                        sample_profiles(n, cfg.devices, seed), [1] * W)
                planner.setup(ctx)
                clients = list(range(n))
                cuts = planner.assign_cuts(1, clients, ctx)
                plan = planner.client_plans(1, clients, cuts)
                solo = [c for c in clients if plan[c].partner is None]
                assert len(solo) == n % 2 and all(cuts[c] == W for c in solo)
                for c in clients:
                    j = plan[c].partner
                    if j is None:
                        continue
                    assert plan[j].partner == c and cuts[c] + cuts[j] == W and 1 <= cuts[c] < W, (seed, n, W, c)
                    if planner.freq_ghz[c] < planner.freq_ghz[j]:
                        assert cuts[c] <= cuts[j]
                    assert plan[c].overlap == overlapping_layers(W, cuts[c], cuts[j])
                    assert len(plan[c].overlap) + len(plan[j].overlap) == abs(cuts[c] - cuts[j])


def test_loss_weights():
    """``fedavg``: K a_i over the round's K clients (mean 1, proportional to size);
    ``paper``: a_i = |D_i| / sum over every client."""
    sizes = [10, 30, 20, 40]
    assert loss_weights("paper", sizes, [0, 1, 3]) == pytest.approx({0: 0.1, 1: 0.3, 3: 0.4})
    fedavg = loss_weights("fedavg", sizes, [0, 1, 3])
    assert fedavg == pytest.approx({0: 3 * 10 / 80, 1: 3 * 30 / 80, 3: 3 * 40 / 80})
    assert sum(fedavg.values()) == pytest.approx(3)
    assert loss_weights("fedavg", [7, 7, 7], [0, 1, 2]) == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0})
    with pytest.raises(ValueError, match="unknown pair_weights 'x'"):
        loss_weights("x", sizes, [0])
