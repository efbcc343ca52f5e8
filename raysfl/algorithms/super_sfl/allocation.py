"""SuperSFL's resource-aware subnetwork allocation (Sec. II-A, eq. 1, Algorithm 1).

Each client gets a contiguous prefix of the super-network whose depth grows with its
memory and shrinks with its communication latency:

    d_i = min( floor(alpha * m_i) + floor(beta * (lat_max - lat_i) / (lat_max - lat_min + eps)), L - 1 ),
    d_i >= 1,

with m_i in GB, alpha in layers/GB (0.5), beta = 4, and lat_min/lat_max the extremes
observed over the clients at initialisation.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-8


def allocate_depths(memory_gb, latency_s, num_layers: int, alpha: float = 0.5, beta: float = 4.0,
                    eps: float = EPS) -> np.ndarray:
    """Eq. (1) for every client: the depth (number of leading blocks) it runs."""
    m = np.asarray(memory_gb, dtype=np.float64)
    lat = np.asarray(latency_s, dtype=np.float64)
    if m.shape != lat.shape or m.ndim != 1 or len(m) == 0:
        raise ValueError("memory and latency must be equal-length 1-D sequences")
    lo, hi = float(lat.min()), float(lat.max())
    depths = []
    for mi, li in zip(m, lat):
        d = math.floor(alpha * mi) + math.floor(beta * (hi - li) / (hi - lo + eps))
        depths.append(max(1, min(d, num_layers - 1)))
    return np.asarray(depths, dtype=np.int64)
