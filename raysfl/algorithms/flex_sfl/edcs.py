"""FLEX-SFL's entropy-driven client selection (EDCS, Sec. 3.2, Algorithm 2).

Per edge cluster C_n and round t: K = rho * |C_n| clients (eq. 16); lambda * K of them drawn
uniformly at random (first stage); the rest chosen greedily, one at a time, as the
candidate whose label counts, merged with those already selected, give the largest label
entropy H_new (eqs. 17-19). lambda = 1 is pure random selection (the paper's ablation).

Counts are rounded half up (rho * |C_n| = 6.6 -> 7, lambda * K = 2.8 -> 3) and a non-empty
cluster sends at least one client. Greedy ties go to the lowest client id. Algorithm 2's
line 13 reads "argmax H_new - H(k)"; the text says "the client with the maximum H_new is
selected", which is what this implements.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-8  # epsilon of eq. (14)


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def label_entropy(counts, eps: float = EPS) -> float:
    """Eq. (14)/(19): H = -sum_z pi_z log(pi_z + eps) of a label count vector."""
    n = np.asarray(counts, dtype=np.float64)
    total = n.sum()
    if total <= 0:
        return 0.0
    pi = n / total
    return float(-(pi * np.log(pi + eps)).sum())


def cluster_quota(cluster_size: int, rho: float) -> int:
    """Eq. (16): K_n = rho * |C_n| (rounded half up; at least 1 for a non-empty cluster)."""
    if cluster_size == 0:
        return 0
    return min(cluster_size, max(1, round_half_up(rho * cluster_size)))


def cluster_quotas(sizes: list[int], total: int) -> list[int]:
    """A fixed number of clients per round (``--clients-per-round``) shared out over the clusters
    in proportion to their sizes (largest remainder, ties to the lower cluster index), so that
    FLEX-SFL trains exactly as many clients per round as a baseline selecting ``total``."""
    sizes = [int(s) for s in sizes]
    n = sum(sizes)
    total = min(int(total), n)
    exact = [total * s / n for s in sizes] if n else [0.0] * len(sizes)
    out = [min(s, math.floor(e)) for s, e in zip(sizes, exact)]
    order = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    left = total - sum(out)
    while left > 0:
        for i in order:
            if left and out[i] < sizes[i]:
                out[i] += 1
                left -= 1
    return out


def random_count(k: int, lam: float) -> int:
    """First stage size: lambda * K (rounded half up, within [0, K])."""
    return min(k, max(0, round_half_up(lam * k)))


def greedy_entropy(candidates: list[int], histograms: np.ndarray, start: np.ndarray, count: int) -> list[int]:
    """Second stage: ``count`` clients, each maximising the merged entropy H_new (eq. 19)."""
    chosen: list[int] = []
    remaining = sorted(candidates)
    n_sum = np.asarray(start, dtype=np.float64).copy()
    for _ in range(min(count, len(remaining))):
        scores = [label_entropy(n_sum + histograms[k]) for k in remaining]
        best = remaining[int(np.argmax(scores))]  # argmax returns the first (lowest id) on ties
        chosen.append(best)
        n_sum += histograms[best]  # n_sum <- n_new (eq. 17)
        remaining.remove(best)
    return chosen


def edcs_select(members: list[int], histograms: np.ndarray, rho: float, lam: float,
                rng: np.random.Generator, quota: int | None = None) -> tuple[list[int], list[int]]:
    """Algorithm 2 for one cluster: (random stage, greedy stage) client ids.

    ``quota`` overrides K_n (the paper's Fig. 5 uses seven clients per cluster).
    """
    members = sorted(members)
    k = cluster_quota(len(members), rho) if quota is None else min(quota, len(members))
    k_rand = random_count(k, lam)
    rand = sorted(int(c) for c in rng.choice(members, size=k_rand, replace=False)) if k_rand else []
    rest = [c for c in members if c not in set(rand)]
    start = histograms[rand].sum(axis=0) if rand else np.zeros(histograms.shape[1])
    return rand, greedy_entropy(rest, histograms, start, k - k_rand)
