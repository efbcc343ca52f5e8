"""FLEX-SFL's hierarchical local asynchronous aggregation (HiLo-Agg, Sec. 3.3): the schedule
and the weights.

* Every tau_c rounds each edge cluster averages its clients' submodels with weights
  alpha_k = D_k / sum_{i in C_n} D_i (eqs. 22-23) and broadcasts the result to the cluster.
* Every tau_e rounds the central server averages the edge servers' submodels with weights
  beta_n = D_n / sum_i D_i, D_n = sum_{k in C_n} D_k (eqs. 24-26) and sends it back.
* Every tau_G = lcm(tau_c, tau_e) rounds (eq. 27) the latest client submodels and the
  global server model are concatenated into the global model W (eq. 28), the one
  evaluated. Rounds are numbered from 1, so round t aggregates when t mod tau == 0.
"""

from __future__ import annotations

import math

import numpy as np


def global_period(tau_c: int, tau_e: int) -> int:
    """Eq. (27): tau_G = lcm(tau_c, tau_e)."""
    return math.lcm(tau_c, tau_e)


def schedule(rnd: int, tau_c: int, tau_e: int) -> dict[str, bool]:
    """Which aggregations happen at the end of round ``rnd`` (1-based)."""
    return {"client": rnd % tau_c == 0, "edge": rnd % tau_e == 0,
            "global": rnd % global_period(tau_c, tau_e) == 0}


def data_weights(sizes) -> np.ndarray:
    """alpha_k (eq. 22) or beta_n (eq. 25): each size over their sum."""
    s = np.asarray(sizes, dtype=np.float64)
    return s / s.sum() if s.sum() > 0 else np.full(len(s), 1.0 / max(1, len(s)))
