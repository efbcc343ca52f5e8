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

from raysfl.aggregation import weighted_average

EPS = 1e-8


def client_weights(depths, losses, eps: float = EPS) -> np.ndarray:
    """Eq. (6)."""
    d = np.asarray(depths, dtype=np.float64)
    inv = 1.0 / (np.asarray(losses, dtype=np.float64) + eps)
    return d / d.sum() * inv / inv.sum()


def consensus_average(client_states: list[dict[str, np.ndarray]], weights, server_state: dict[str, np.ndarray],
                      lam: float = 0.01) -> dict[str, np.ndarray]:
    """Eq. (8) per parameter over the clients holding it; the server copy elsewhere.

    Eq. (8) is the weighted mean over the holders of a layer with the server's copy as one
    more holder of weight lambda, i.e. the shared layer-wise average with that extra term.
    """
    return weighted_average(list(zip(client_states, (float(w) for w in weights))) + [(server_state, lam)],
                            base=server_state)
