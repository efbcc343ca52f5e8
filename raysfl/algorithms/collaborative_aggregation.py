"""SuperSFL's collaborative client-server aggregation (Sec. II-D, eqs. 6-8).

Client weights combine depth and update quality (eq. 6):

    w_i = d_i / sum_j d_j * (L_i + eps)^-1 / sum_j (L_j + eps)^-1

where L_i is the client loss, or, when the server supervised the client, the client and
server losses fused with eq. (3). Each encoder layer is then averaged over the clients
that hold it, pulled towards the main server's copy of the layer by the closed-form
minimiser of eq. (7):

    theta_bar = (sum_i w_i theta_i + lambda * theta_s) / (sum_i w_i + lambda)          (8)

Layers no client holds keep the server's copy. Classifiers stay local (not passed here).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-8


def client_weights(depths, losses, eps: float = EPS) -> np.ndarray:
    """Eq. (6)."""
    d = np.asarray(depths, dtype=np.float64)
    inv = 1.0 / (np.asarray(losses, dtype=np.float64) + eps)
    return d / d.sum() * inv / inv.sum()


def consensus_average(client_states: list[dict[str, np.ndarray]], weights, server_state: dict[str, np.ndarray],
                      lam: float = 0.01) -> dict[str, np.ndarray]:
    """Eq. (8) per parameter over the clients holding it; the server copy elsewhere."""
    out = dict(server_state)
    holders: dict[str, list[tuple[np.ndarray, float]]] = {}
    for state, w in zip(client_states, weights):
        for k, v in state.items():
            holders.setdefault(k, []).append((v, float(w)))
    for k, items in holders.items():
        acc = sum(w * v.astype(np.float64) for v, w in items)
        total = sum(w for _, w in items)
        if k in server_state:
            acc = acc + lam * server_state[k].astype(np.float64)
            total += lam
        dtype = items[0][0].dtype
        mean = acc / total
        out[k] = np.rint(mean).astype(dtype) if np.issubdtype(dtype, np.integer) else mean.astype(dtype)
    return out
