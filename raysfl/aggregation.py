"""Weighted averaging of model states, layer by layer over the updates that hold each key.

Updates may cover different blocks (per-client cuts, edge clusters with different split
points, server-side states): each key is averaged over exactly the updates that contain
it, with weights renormalised over those holders. Keys held by nobody keep their old value.
"""

from __future__ import annotations

import numpy as np


def weighted_average(updates: list[tuple[dict[str, np.ndarray], float]],
                     base: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Return ``base`` with every key held by some update replaced by the weighted mean.

    ``updates`` is a list of (state, weight) with weight >= 0 (data sizes, usually).
    Integer buffers (BatchNorm's ``num_batches_tracked``) take the weighted mean rounded.
    """
    out = dict(base) if base else {}
    keys: dict[str, list[tuple[np.ndarray, float]]] = {}
    for state, w in updates:
        for k, v in state.items():
            keys.setdefault(k, []).append((v, float(w)))
    for k, holders in keys.items():
        total = sum(w for _, w in holders)
        if total <= 0:
            holders = [(v, 1.0) for v, _ in holders]
            total = float(len(holders))
        acc = np.zeros(holders[0][0].shape, dtype=np.float64)
        for v, w in holders:
            acc += v.astype(np.float64) * (w / total)
        dtype = holders[0][0].dtype
        out[k] = np.rint(acc).astype(dtype) if np.issubdtype(dtype, np.integer) else acc.astype(dtype)
    return out
