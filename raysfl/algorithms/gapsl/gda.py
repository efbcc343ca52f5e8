"""GAPSL's Gradient Direction Alignment (GDA, Sec. III-C, eqs. 5-8, Algorithm 2).

    theta_lead,i = arccos(<g_i, g_lead> / (|g_i| |g_lead|))                          (5)
    theta_th     = max(min(mu(theta_lead) - eta * nu(theta_lead), pi/2), 0)            (6)
    L~_i         = L_i + lambda * (1 - cos theta_lead,i)      for i with theta_lead,i <= theta_th   (7)
    L_g          = sum over those i of L~_i                                            (8)

**The first-order reading.** Footnote 6 treats g_i and g_lead as detached constants, and
then the regulariser of eq. (7) has no gradient with respect to the model: read literally,
GDA would only filter. raysfl keeps it first order but makes the term act. The
regulariser is differentiated with respect to the *gradient* g_i, and each selected
gradient takes one step of size lambda down that slope, towards the leader:

    d(1 - cos)/d g_i = -( g_lead / (|g_i| |g_lead|) - cos * g_i / |g_i|^2 )
    g~_i = g_i - lambda * d(1 - cos)/d g_i

This direction is orthogonal to g_i and points towards g_lead, so for a small enough
lambda the angle to the leader shrinks (tests/test_gapsl.py proves it). The server-side
model then steps on the gradient of eq. (8), with g~_i in place of each client's term:
sum_i g~_i (``reduction="sum"``, as eq. (8) is written) or its mean (``"mean"``, the
step size of a PSL server that averages).

Ablations (Sec. V-C): ``none`` (Non-GDA) steps on the leader gradient alone; ``random``
(Rand-GDA) aligns a random subset of the size the threshold would have kept.
"""

from __future__ import annotations

import math

import numpy as np
import torch

GDA_MODES = ("gda", "none", "random")
REDUCTIONS = ("sum", "mean")


def angles_to_leader(grads: torch.Tensor, lead: torch.Tensor) -> torch.Tensor:
    """Eq. (5) for every row of ``grads`` (radians)."""
    g, l_ = grads.double(), lead.double()
    cos = (g @ l_) / (g.norm(dim=1) * l_.norm()).clamp_min(1e-30)
    return torch.arccos(cos.clamp(-1.0, 1.0))


def angular_threshold(angles: torch.Tensor, eta: float) -> float:
    """Eq. (6): mean - eta * std (population std), clipped to [0, pi/2]."""
    mu, nu = float(angles.mean()), float(angles.std(unbiased=False)) if len(angles) > 1 else 0.0
    return max(min(mu - eta * nu, math.pi / 2), 0.0)


def alignment_step(g: torch.Tensor, lead: torch.Tensor, lam: float) -> torch.Tensor:
    """One step of size ``lam`` on (1 - cos(g, lead)) with respect to g (the first-order
    reading of eq. 7)."""
    gn, ln = g.norm().clamp_min(1e-30), lead.norm().clamp_min(1e-30)
    cos = torch.dot(g, lead) / (gn * ln)
    d_cos = lead / (gn * ln) - cos * g / gn**2
    return g + lam * d_cos


def server_update(grads: torch.Tensor, lead: torch.Tensor, leader_set: list[int], eta: float, lam: float,
                  mode: str = "gda", reduction: str = "sum", rng: np.random.Generator | None = None):
    """Algorithm 2 and the server-side update. Returns (update vector, clients whose
    gradients it uses, theta_th, angles to the leader).

    An empty selection (every angle above the threshold) gives a zero update: L_g is an
    empty sum.
    """
    angles = angles_to_leader(grads, lead)
    th = angular_threshold(angles, eta)
    if mode == "none":
        used = list(leader_set)
        update = lead if reduction == "mean" else lead * len(used)
        return update, used, th, angles
    keep = [i for i in range(len(grads)) if float(angles[i]) <= th]
    if mode == "random":
        keep = sorted(int(i) for i in (rng or np.random.default_rng()).choice(len(grads), size=len(keep),
                                                                           replace=False))
    if not keep:
        return torch.zeros_like(lead), [], th, angles
    aligned = torch.stack([alignment_step(grads[i], lead, lam) for i in keep])
    update = aligned.sum(dim=0) if reduction == "sum" else aligned.mean(dim=0)
    return update, keep, th, angles
