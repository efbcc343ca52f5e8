"""Angles between the clients' gradients (pure PyTorch): GAPSL's consistency scores (eq. 1)
and its footnote 2's mean pairwise angle, which ``--grad-angles`` records for every algorithm."""

from __future__ import annotations

import torch


def pairwise_angles(grads: torch.Tensor) -> torch.Tensor:
    """(S, S) matrix of arccos(cos(g_i, g_j)) for the rows of ``grads`` (radians)."""
    g = grads.double()
    unit = g / g.norm(dim=1, keepdim=True).clamp_min(1e-30)
    return torch.arccos((unit @ unit.T).clamp(-1.0, 1.0))


def mean_pairwise_angle(grads: torch.Tensor, angles: torch.Tensor | None = None) -> float:
    """The average angular deviation over all distinct client pairs (GAPSL's footnote 2, Fig. 3b),
    radians (NaN for fewer than two clients). ``angles``: :func:`pairwise_angles` of ``grads``
    where the caller has it already (GAPSL's step reads it twice)."""
    s = grads.shape[0]
    if s < 2:
        return float("nan")
    a = pairwise_angles(grads) if angles is None else angles
    return float(a[torch.triu_indices(s, s, offset=1).unbind()].mean())
