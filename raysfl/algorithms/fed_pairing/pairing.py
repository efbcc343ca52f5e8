"""FedPairing's wireless model, client pairing and split lengths (Sec. II-A, III, IV-A), as
pure functions, used by :mod:`raysfl.algorithms.fed_pairing.algorithm`.

* Positions: uniform in a disk of radius R (50 m) around the server (Sec. IV-A).
* Rate (Sec. II-A):  r_ij = B log2(1 + P h_ij / sigma^2),  h_ij = h0 * d_ij^-delta.
* Edge weight (eq. 5):  e_ij = alpha (f_i - f_j)^2 + beta r_ij   (f in GHz, r in Gbit/s here).
* Pairing (eq. 6, Alg. 1): greedy maximum-weight matching -- edges by weight, LARGEST first
  (the prose and the objective; Alg. 1's listing says ascending, which would minimise it),
  skipping covered vertices; with an odd count one client is left to train alone.
  Baselines of Table I: random, location (nearest partner), computation (largest
  CPU-frequency difference).
* Split lengths (Sec. II-A):  L_i = floor(W f_i / (f_i + f_j)),  L_j = W - L_i, once per
  pair: the slower client takes the floor (ties: the lower index), clamped so both run at
  least one layer.
* Overlapping layers (Sec. III-B): in client i's model its own flow runs layers 1..L_i and
  its partner's flow layers L_j+1..W; the layers in both take the doubled step of eq. (7).
"""

from __future__ import annotations

import math

import numpy as np

from raysfl.algorithms.fed_pairing.spec import PAIRINGS
from raysfl.matching import greedy_matching


def client_positions(n: int, radius_m: float, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) positions uniform over a disk of ``radius_m`` centred on the server."""
    r = radius_m * np.sqrt(rng.uniform(0.0, 1.0, n))
    theta = rng.uniform(0.0, 2 * math.pi, n)
    return np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)


def rate_bps(distance_m, bandwidth_hz: float = 64e6, power_w: float = 1.0, noise_w: float = 1e-9,
             h0: float = 1e-3, delta: float = 3.0):
    """Shannon rate over a link of ``distance_m`` with gain h0 * d^-delta (bits/s)."""
    d = np.maximum(np.asarray(distance_m, dtype=np.float64), 1e-3)
    return bandwidth_hz * np.log2(1.0 + power_w * h0 * d ** (-delta) / noise_w)


def rate_matrix(positions: np.ndarray, **link) -> np.ndarray:
    """Pairwise client-to-client rates (bits/s); the diagonal is 0."""
    d = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=-1)
    r = rate_bps(d, **link)
    np.fill_diagonal(r, 0.0)
    return r


def edge_weights(freq_ghz, rates_bps: np.ndarray, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """Eq. (5) for every pair: alpha (f_i - f_j)^2 [GHz^2] + beta r_ij [Gbit/s]."""
    f = np.asarray(freq_ghz, dtype=np.float64)
    w = alpha * (f[:, None] - f[None, :]) ** 2 + beta * rates_bps / 1e9
    np.fill_diagonal(w, -np.inf)
    return w


def pair_clients(mode: str, freq_ghz, positions: np.ndarray, rates_bps: np.ndarray, rng: np.random.Generator,
                 alpha: float = 1.0, beta: float = 1.0) -> list[tuple[int, int]]:
    """Pairs of client indices by ``mode`` (FedPairing's greedy or a Table I baseline)."""
    n = len(positions)
    if mode == "greedy":
        return greedy_matching(edge_weights(freq_ghz, rates_bps, alpha, beta))
    if mode == "random":
        order = rng.permutation(n)
        return [tuple(sorted((int(order[k]), int(order[k + 1])))) for k in range(0, n - 1, 2)]
    if mode == "location":  # nearest first: the largest weight is the smallest distance
        d = np.linalg.norm(positions[:, None, :] - positions[None, :, :], axis=-1)
        w = -d
        np.fill_diagonal(w, -np.inf)
        return greedy_matching(w)
    if mode == "computation":  # the largest CPU-frequency difference first
        return greedy_matching(edge_weights(freq_ghz, np.zeros((n, n)), alpha=1.0, beta=0.0))
    raise ValueError(f"unknown pairing '{mode}'; allowed: {', '.join(PAIRINGS)}")


def split_lengths(num_layers: int, f_i: float, f_j: float) -> tuple[int, int]:
    """(L_i, L_j) of one pair, computed once for both partners (Sec. II-A): the slower
    client's share ``floor(W f / (f_i + f_j))`` is rounded down and the faster one runs the
    rest, so L_i + L_j = W always. Rounding down the slower share means rounding never adds
    work to the pair's straggler (the paper's aim: "assigns smaller propagation lengths to
    clients with poorer computational power"). On a tie (f_i == f_j) the first argument
    takes the floor; callers pass the lower client index first. Each length is at least 1."""
    if f_i <= f_j:
        li = min(max(math.floor(num_layers * f_i / (f_i + f_j)), 1), num_layers - 1)
        return li, num_layers - li
    lj, li = split_lengths(num_layers, f_j, f_i)
    return li, lj


def pair_split_lengths(num_layers: int, pairs, freq_ghz) -> dict[int, int]:
    """{client: L} for every client of ``pairs`` (client index pairs), one
    :func:`split_lengths` per pair with the lower index first (deterministic)."""
    out: dict[int, int] = {}
    for a, b in pairs:
        i, j = min(a, b), max(a, b)
        out[i], out[j] = split_lengths(num_layers, float(freq_ghz[i]), float(freq_ghz[j]))
    return out


def overlapping_layers(num_layers: int, own: int, partner: int) -> list[int]:
    """1-based layers of a client's model that both its own flow (1..own) and its partner's
    flow (partner+1..W) pass through: they take the doubled step of eq. (7)."""
    return list(range(partner + 1, own + 1)) if own > partner else []
