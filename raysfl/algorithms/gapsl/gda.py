"""GAPSL's Gradient Direction Alignment (GDA, Sec. III-C, eqs. 5-8, Algorithm 2).

    theta_lead,i = arccos(<g_i, g_lead> / (|g_i| |g_lead|))                          (5)
    theta_th     = max(min(mu(theta_lead) - eta * nu(theta_lead), pi/2), 0)            (6)
    S^           = {i : theta_lead,i <= theta_th}                          (Alg. 2, line 10)
    L~_i         = L_i + lambda * (1 - cos theta_lead,i)     for i in S^               (7)
    L_g          = sum over i in S^ of L~_i                                            (8)

The server back-propagates L_g: its server-side model moves by dL_g/dw and client i gets
dL_g/da_i at its cut -- the gradient of its own loss if i is in S^, and zero otherwise
(eq. 8 as written: a client outside S^ contributes nothing to L_g).

**Eq. 7, footnote 6.** "our implementation adopts a pragmatic first-order approximation by
treating the gradient vectors g_i and g_lead as detached constants from the computational
graph". Then lambda * (1 - cos theta) is a constant: its gradient is zero, lambda has no
effect, and dL_g/dw = sum over S^ of g_i -- GDA is the filter of eq. 6
(``regularizer="detached"``, the default). The term itself, differentiated through g_i and
g_lead (double back-propagation, which the footnote calls prohibitive) is
``regularizer="second_order"``: :func:`regularizer_coefficients` gives its gradient with
respect to every g_j, and :mod:`raysfl.algorithms.gapsl.second_order` carries that through
the Hessian of each client's loss to the server-side parameters and the cut.

Ablations (Sec. V-C): ``none`` (Non-GDA: "relies solely on the leader gradient for model
update", so L_g sums the leader set's losses) and ``random`` (Rand-GDA: a random subset of
the size the threshold keeps).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def angles_to_leader(grads: torch.Tensor, lead: torch.Tensor) -> torch.Tensor:
    """Eq. (5) for every row of ``grads`` (radians)."""
    g, l_ = grads.double(), lead.double()
    cos = (g @ l_) / (g.norm(dim=1) * l_.norm()).clamp_min(1e-30)
    return torch.arccos(cos.clamp(-1.0, 1.0))


def angular_threshold(angles: torch.Tensor, eta: float) -> float:
    """Eq. (6): mean - eta * std (population std), clipped to [0, pi/2]."""
    mu, nu = float(angles.mean()), float(angles.std(unbiased=False)) if len(angles) > 1 else 0.0
    return max(min(mu - eta * nu, math.pi / 2), 0.0)


def select(grads: torch.Tensor, lead: torch.Tensor, leader_set: list[int], eta: float, mode: str = "gda",
           rng: np.random.Generator | None = None) -> tuple[list[int], float, torch.Tensor]:
    """Algorithm 2, lines 1-10: (S^, theta_th, angles to the leader) for ``mode`` ``gda``;
    the leader set for ``none``; a random subset of S^'s size for ``random``."""
    angles = angles_to_leader(grads, lead)
    th = angular_threshold(angles, eta)
    if mode == "none":
        return sorted(leader_set), th, angles
    keep = [i for i in range(len(grads)) if float(angles[i]) <= th]
    if mode == "random":
        keep = sorted(int(i) for i in (rng or np.random.default_rng()).choice(len(grads), size=len(keep),
                                                                           replace=False))
    return keep, th, angles


def loss_gradient(grads: torch.Tensor, selected: list[int], reduction: str = "sum") -> torch.Tensor:
    """dL_g/dw of eq. (8) under footnote 6: the sum of the selected clients' gradients
    (``reduction="mean"``: their mean). An empty S^ is an empty sum: zero."""
    if not selected:
        return torch.zeros_like(grads[0])
    total = grads[selected].sum(dim=0)
    return total if reduction == "sum" else total / len(selected)


def regularizer_coefficients(grads: torch.Tensor, leader_set: list[int], selected: list[int],
                             lam: float) -> torch.Tensor:
    """c_j = d/dg_j of lambda * sum over i in S^ of (1 - cos(g_i, g_lead)), with g_lead the mean
    of the leader set's g_j (eq. 4): one row per client (zero for a client in neither set).

    By the chain rule the gradient of eq. (7)'s terms with respect to anything g_j depends on
    is c_j contracted with dg_j: for the server-side parameters H_j c_j (client j's loss
    Hessian times c_j), for client j's smashed data the mixed second derivative times c_j.
    """
    g = grads.detach().double().requires_grad_(True)
    if not selected or lam == 0:
        return torch.zeros_like(g).to(grads.dtype)
    lead = g[leader_set].mean(dim=0)
    rows = g[selected]
    cos = (rows @ lead) / (rows.norm(dim=1) * lead.norm()).clamp_min(1e-30)
    (coeffs,) = torch.autograd.grad(lam * (1 - cos).sum(), g)
    return coeffs.to(grads.dtype)
