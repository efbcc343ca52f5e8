"""GAPSL's Leader Gradient Identification (LGI, Sec. III-B, eqs. 1-4, Algorithm 1).

Inputs are the clients' gradients of the shared server-side model, one flat vector per
client (rows of a matrix G). All functions are pure; the running min/max of the
dispersion is passed in and returned, so the caller keeps it across steps.

    theta_i = 1/(|S|-1) sum_{j != i} arccos(<g_i, g_j> / (|g_i| |g_j|))                 (1)
    K^t     = K_min + t/T * (nu_max - nu(theta)) / (nu_max - nu_min) * (K_max - K_min)     (2)
    S~      = the ceil(K^t |S|) clients with the lowest theta_i                           (3)
    g_lead  = mean of their gradients                                                    (4)

Eq. (2) has the t/T factor that Algorithm 1 (line 10) leaves out; raysfl follows eq. (2)
(``time_scaling=False`` gives Algorithm 1's form). With nu_max = nu_min (the first
observation) the stability term is 0/0; it is taken as 0, i.e. K^t = K_min.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from raysfl.angles import pairwise_angles


def consistency_scores(grads: torch.Tensor, angles: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. (1): each client's mean angular deviation to the other clients (``angles``: their
    :func:`raysfl.angles.pairwise_angles`, where the caller has it)."""
    s = grads.shape[0]
    if s < 2:
        return torch.zeros(s, dtype=torch.float64, device=grads.device)
    return (pairwise_angles(grads) if angles is None else angles).sum(dim=1) / (s - 1)


def selection_ratio(nu: float, nu_min: float, nu_max: float, t: int, total: int, k_min: float = 0.2,
                    k_max: float = 0.8, time_scaling: bool = True) -> float:
    """Eq. (2) with the running extremes already updated to include ``nu`` (Alg. 1, lines 8-9)."""
    span = nu_max - nu_min
    stability = (nu_max - nu) / span if span > 0 else 0.0
    scale = t / total if time_scaling else 1.0
    return k_min + scale * stability * (k_max - k_min)


def leader_gradient(grads: torch.Tensor, t: int, total: int, nu_range: tuple[float, float] | None,
                    k_min: float = 0.2, k_max: float = 0.8, mode: str = "lgi",
                    rng: np.random.Generator | None = None, time_scaling: bool = True,
                    angles: torch.Tensor | None = None):
    """Algorithm 1. Returns (g_lead, chosen client indices, K^t, new (nu_min, nu_max)).

    ``nu_range`` is the running (min, max) of the dispersion before this step (None at the
    start). ``mode``: ``lgi`` (eqs. 1-4), ``none`` (Non-LGI: the mean of every gradient),
    ``random`` (Rand-LGI: a random subset of the size LGI would pick). ``angles``: the
    gradients' :func:`raysfl.angles.pairwise_angles`, where the caller has it.
    """
    s = grads.shape[0]
    theta = consistency_scores(grads, angles)
    nu = float(theta.std(unbiased=False)) if s > 1 else 0.0
    lo, hi = (nu, nu) if nu_range is None else (min(nu_range[0], nu), max(nu_range[1], nu))
    k = selection_ratio(nu, lo, hi, t, total, k_min, k_max, time_scaling)
    n = min(s, max(1, math.ceil(k * s - 1e-9)))
    if mode == "none":
        chosen = list(range(s))
    elif mode == "random":
        chosen = sorted(int(i) for i in (rng or np.random.default_rng()).choice(s, size=n, replace=False))
    else:
        order = sorted(range(s), key=lambda i: (float(theta[i]), i))  # ascending score; ties by index
        chosen = sorted(order[:n])
    return grads[chosen].mean(dim=0), chosen, k, (lo, hi)
