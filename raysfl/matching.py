"""Greedy maximum-weight matching, shared by two papers: FedPairing pairs clients with it
(Alg. 1, eq. 6) and BESplit's BCC pairs biased clients with it (eq. 33)."""

from __future__ import annotations

import numpy as np


def greedy_matching(weights: np.ndarray) -> list[tuple[int, int]]:
    """Alg. 1: take edges by descending weight (ties: lower indices first), keep an edge when
    neither end is covered. Returns pairs (i < j)."""
    n = len(weights)
    edges = sorted(((float(weights[i, j]), i, j) for i in range(n) for j in range(i + 1, n)),
                   key=lambda e: (-e[0], e[1], e[2]))
    covered: set[int] = set()
    pairs = []
    for _, i, j in edges:
        if i not in covered and j not in covered:
            pairs.append((i, j))
            covered |= {i, j}
    return pairs
