"""FLEX-SFL's device-aware adaptive segmentation (DAS, Sec. 3.1, Algorithm 1).

Pure functions of the clients' compute capacities R_k (fixed per device, as in the paper):

1. eq. (5): the optimal split point s_k = R_k / sum_j R_j * V (V = number of layers/blocks);
2. eqs. (6)-(7): [p_min, p_max] is cut into N sub-intervals of width Delta = (p_max - p_min) / N,
   I_n = [p_min + (n-1) Delta, p_min + n Delta) (the last one closed);
3. eqs. (8)-(9): each point moves to the nearer bound of its interval (a tie goes to the
   lower bound: the client never takes more work than its nearer-or-equal option);
4. eq. (10): edge cluster E_n = the clients whose point lies in I_n (its final point is
   one of I_n's two bounds). N clusters, one per edge server.

Readings of the paper (also in docs/flex-sfl.md):

* **One split point per cluster.** The paper wants "consistent submodel structures"
  inside a cluster, yet eq. (9) may round two members of I_n to different bounds. The
  cluster's split point is the final point most of its members got (ties: the lower).
* **Clamping to valid cuts.** Eq. (5) sums to V over all K clients, so with K >> V every
  s_k is below one block (100 clients, 4 blocks: s_k ~ 0.04) and a literal clamp puts every
  cluster at the smallest cut. ``mode="paper"`` (the default, here and in FLEX-SFL's
  ``das_mode``) does exactly that (the nearest valid cut to the cluster's point, clamped into
  [min_cut, max_cut]): with the paper's 100 clients every cluster gets cut 1.
  ``mode="spread"`` (raysfl's extension, not in the paper)
  keeps eqs. (5)-(10) for the *clusters* and spreads their split points evenly over
  [min_cut, max_cut] in order of capacity -- the paper's experiments put "the first 1-3
  convolutional modules" on the clients (Sec. 5.2), weaker clusters shallower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raysfl.algorithms.flex_sfl.spec import DAS_MODES
from raysfl.errors import ConfigError


@dataclass
class DASResult:
    points: np.ndarray        # s_k, eq. (5)
    p_min: float
    p_max: float
    width: float              # Delta, eq. (6)
    interval: np.ndarray      # 0-based n of the interval I_{n+1} holding s_k, eq. (7)
    final: np.ndarray         # p_k^final, eq. (9)
    cluster_point: list[float]  # the split point shared by each cluster (before clamping)
    cluster_cut: list[int]    # the valid cut each cluster uses
    clusters: list[list[int]]  # E_n, eq. (10)

    def cluster_of(self, client: int) -> int:
        return int(self.interval[client])


def split_points(capacity, num_layers: int) -> np.ndarray:
    """Eq. (5): s_k = R_k / sum_j R_j * V."""
    r = np.asarray(capacity, dtype=np.float64)
    if r.ndim != 1 or len(r) == 0 or np.any(r <= 0):
        raise ConfigError(f"DAS needs positive compute capacities, got {r.tolist()[:5]}...")
    return r / r.sum() * num_layers


def discretize(points: np.ndarray, num_edges: int) -> tuple[float, float, float, np.ndarray, np.ndarray]:
    """Eqs. (6)-(9): (p_min, p_max, Delta, interval index per point, final point per point)."""
    p = np.asarray(points, dtype=np.float64)
    p_min, p_max = float(p.min()), float(p.max())
    width = (p_max - p_min) / num_edges
    if width == 0:
        return p_min, p_max, 0.0, np.zeros(len(p), dtype=np.int64), np.full(len(p), p_min)
    n = np.minimum(np.floor((p - p_min) / width).astype(np.int64), num_edges - 1)
    lower = p_min + n * width
    upper = p_min + (n + 1) * width
    d_minus, d_plus = np.abs(p - lower), np.abs(p - upper)  # eq. (8)
    final = np.where(d_minus <= d_plus, lower, upper)        # eq. (9), ties to the lower bound
    return p_min, p_max, width, n, final


def nearest_cut(point: float, valid_cuts: list[int], min_cut: int, max_cut: int) -> int:
    """The valid cut in [min_cut, max_cut] nearest to ``point`` (ties: the smaller)."""
    allowed = [c for c in valid_cuts if min_cut <= c <= max_cut]
    return min(allowed, key=lambda c: (abs(c - point), c))


def das(capacity, num_layers: int, num_edges: int, valid_cuts: list[int], min_cut: int, max_cut: int,
        mode: str = "paper") -> DASResult:
    """Algorithm 1: split points, N intervals, nearest bounds, clusters and their cuts."""
    if mode not in DAS_MODES:
        raise ConfigError(f"unknown das_mode '{mode}'; allowed: {', '.join(DAS_MODES)}")
    points = split_points(capacity, num_layers)
    p_min, p_max, width, interval, final = discretize(points, num_edges)
    clusters = [sorted(int(k) for k in np.flatnonzero(interval == n)) for n in range(num_edges)]
    cluster_point, cluster_cut = [], []
    for n, members in enumerate(clusters):
        lower, upper = p_min + n * width, p_min + (n + 1) * width
        if members:
            ups = int(np.sum(final[members] > lower))
            point = upper if ups > len(members) - ups else lower
        else:
            point = lower
        cluster_point.append(float(point))
        if mode == "paper":
            cluster_cut.append(nearest_cut(point, valid_cuts, min_cut, max_cut))
        else:
            target = min_cut if num_edges == 1 else min_cut + n * (max_cut - min_cut) / (num_edges - 1)
            cluster_cut.append(nearest_cut(target, valid_cuts, min_cut, max_cut))
    return DASResult(points, p_min, p_max, width, interval, final, cluster_point, cluster_cut, clusters)
