"""Weighted averaging of model states, layer by layer over the updates that hold each key.

Updates may cover different blocks (per-client cuts, edge clusters with different split
points, server-side states): each key is averaged over exactly the updates that contain
it, with weights renormalised over those holders. Keys held by nobody keep their old value.

A client actor may send its clients' updates already summed (:class:`UpdateSum`, ours:
``--update-sums``): FedAvg is a weighted sum divided by the total weight, so the fed server
adds the client actors' partial sums instead of every client's state -- one state per client
actor and server crosses the object store instead of one per client. The sums are kept in
float64, as the average is: the result differs from summing client by client only in the order
of float64 additions, which can move an average's float32 by one unit in the last place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class UpdateSum:
    """Some clients' updates holding the same keys, summed by their client actor: per key
    sum_i w_i v_i in float64, with sum_i w_i (> 0) and the dtype the states came in."""

    clients: list[int]
    weighted: dict[str, np.ndarray]
    weight: float
    dtypes: dict[str, np.dtype]


def weighted_average(updates: list[tuple[dict[str, np.ndarray], float] | UpdateSum],
                     base: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Return ``base`` with every key held by some update replaced by the weighted mean.

    ``updates`` is a list of (state, weight) with weight >= 0 (data sizes, usually), or of
    :class:`UpdateSum` (several such pairs already summed). Integer buffers (BatchNorm's
    ``num_batches_tracked``) take the weighted mean rounded.
    """
    out = dict(base) if base else {}
    keys: dict[str, list[tuple[np.ndarray, float, bool]]] = {}  # key -> (value or sum, weight, summed)
    dtypes: dict[str, np.dtype] = {}
    for u in updates:
        summed = isinstance(u, UpdateSum)
        state, w = (u.weighted, u.weight) if summed else u
        for k, v in state.items():
            keys.setdefault(k, []).append((v, float(w), summed))
            dtypes.setdefault(k, u.dtypes[k] if summed else v.dtype)
    for k, holders in keys.items():
        total = sum(w for _, w, _ in holders)
        if total <= 0:  # only unsummed updates (a sum's weight is > 0): each counts once
            holders = [(v, 1.0, False) for v, _, _ in holders]
            total = float(len(holders))
        acc, tmp = np.zeros(np.shape(holders[0][0]), dtype=np.float64), np.empty(np.shape(holders[0][0]))
        for v, w, summed in holders:
            if summed:
                acc += np.divide(v, total, out=tmp)
            else:
                add_scaled(acc, v, w / total, tmp)
        dtype = dtypes[k]
        out[k] = np.rint(acc).astype(dtype) if np.issubdtype(dtype, np.integer) else acc.astype(dtype)
    return out


def add_scaled(acc: np.ndarray, v, scale: float, tmp: np.ndarray) -> None:
    """``acc += float64(v) * scale`` through ``tmp`` (float64, acc's shape): the same values as
    ``v.astype(np.float64) * scale``, without its two temporaries (a model's state is summed
    client by client: for a ResNet-18, 11 M elements each)."""
    np.multiply(v, scale, out=tmp, dtype=np.float64)
    acc += tmp


def sum_updates(updates: list, group_of: dict[int, object], weight_of=lambda u: u.weight) -> list:
    """A client actor's round updates (objects with ``client``, ``state``, ``weight``), with those
    of each group's clients that hold the same keys replaced by one :class:`UpdateSum`
    (``group_of``: {client: group}; the driver groups the clients it would drop together, by
    server), each weighted by ``weight_of(update)`` (the aggregator's ``update_weight``). An
    update alone in its set, or of weight <= 0 (the average's fallback counts such updates once
    each), is left as it is."""
    weights = {id(u): float(weight_of(u)) for u in updates}
    sets: dict[tuple, list] = {}
    for u in updates:
        if u.client in group_of and weights[id(u)] > 0:
            sets.setdefault((group_of[u.client], tuple(u.state)), []).append(u)
    summed = {id(u) for members in sets.values() if len(members) > 1 for u in members}
    out = [u for u in updates if id(u) not in summed]
    for members in sets.values():
        if len(members) > 1:
            first, weighted = members[0].state, {}
            for k, v in first.items():
                acc, tmp = np.zeros(np.shape(v), dtype=np.float64), np.empty(np.shape(v))
                for u in members:
                    add_scaled(acc, u.state[k], weights[id(u)], tmp)
                weighted[k] = acc
            out.append(UpdateSum([u.client for u in members], weighted, sum(weights[id(u)] for u in members),
                                 {k: v.dtype for k, v in first.items()}))
    return out
