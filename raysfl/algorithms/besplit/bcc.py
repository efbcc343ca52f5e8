"""BESplit's Bias-Compensated Collaboration (Sec. 4.2, App. D.2) and Dual-Teacher
Distillation losses (Sec. 4.3, eqs. 15-17), as pure functions (the server step that mixes
the samples is :mod:`raysfl.algorithms.besplit.bcc_step`, the distillation step :mod:`raysfl.algorithms.besplit.dtd`).

BCC, from the clients' label distributions P_k (rows summing to 1) and the global P_g:

    B        = {k | JS(P_k, P_g) > d_(i*)},  i* = argmax_i d_(i+1) - d_(i)  (largest gap)   (11)
    G(i, j)  = |P_i - P_g|_1 + |P_j - P_g|_1 - |(P_i - P_g) + (P_j - P_g)|_1              (33)
    M        = greedy matching on G over B (largest first, positive weights only)
    C_{i->j} = {n | p_i,n > p_j,n}                                                       (13)
    rho*     = (P_i,n - P_g,n) / P_i,n if w_i > w_j;  (P_g,n - P_j,n) / P_i,n if w_j > w_i  (31-32)

DTD, with temperature tau:

    L_KD-G = tau^2 sum_n p_g^n(tau) (log p_g^n(tau) - log p_a^n(tau))                   (15)
    M^ab   = |z^a - z^b|_2^2      (optionally / its off-diagonal mean, see relational_matrix)  (16)
    L_KD-C = tau^2 KL(LogSoftmax(M_C / tau), Softmax(M_Ae / tau))   (PyTorch's kl_div)    (17)
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from raysfl.algorithms.besplit.spec import DISTANCES
from raysfl.matching import greedy_matching


def js_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (natural log) of two distributions."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    m = (p + q) / 2

    def kl(a, b):
        mask = a > 0
        return float(np.sum(a[mask] * np.log(a[mask] / b[mask])))

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def biased_clients(dists: np.ndarray, global_dist: np.ndarray) -> list[int]:
    """Eq. (11): the clients above the largest consecutive gap of the sorted divergences."""
    d = np.array([js_divergence(p, global_dist) for p in dists])
    if len(d) < 2:
        return []
    s = np.sort(d)
    cut = s[int(np.argmax(np.diff(s)))]
    return [k for k in range(len(d)) if d[k] > cut]


def complementarity(p_i: np.ndarray, p_j: np.ndarray, p_g: np.ndarray) -> float:
    """Eq. (33): how much the l1 deviation from P_g shrinks when i and j compensate each other."""
    a, b = np.asarray(p_i) - p_g, np.asarray(p_j) - p_g
    return float(np.abs(a).sum() + np.abs(b).sum() - np.abs(a + b).sum())


def bcc_pairs(dists: np.ndarray, global_dist: np.ndarray, candidates: list[int]) -> list[tuple[int, int]]:
    """Greedy matching on eq. (33)'s weights among ``candidates``; only positive weights."""
    idx = list(candidates)
    n = len(idx)
    w = np.full((n, n), -np.inf)
    for a in range(n):
        for b in range(a + 1, n):
            g = complementarity(dists[idx[a]], dists[idx[b]], global_dist)
            if g > 1e-12:
                w[a, b] = w[b, a] = g
    return [(idx[a], idx[b]) for a, b in greedy_matching(w) if np.isfinite(w[a, b])]


def overrepresented(p_i: np.ndarray, p_j: np.ndarray) -> tuple[list[int], list[int]]:
    """Eq. (13): (classes over-represented in i against j, and in j against i)."""
    return [n for n in range(len(p_i)) if p_i[n] > p_j[n]], [n for n in range(len(p_i)) if p_j[n] > p_i[n]]


def mix_ratio(p_i_n: float, p_j_n: float, p_g_n: float, w_i: float, w_j: float) -> float:
    """Eqs. (31)-(32): the share of class-n mass moved from i (over-represented) to j,
    clipped to [0, 1]. With w_i == w_j every ratio in between is optimal; the smaller end
    of that interval is taken (the least mixing that reaches the minimum)."""
    if p_i_n <= 0:
        return 0.0
    a, b = (p_i_n - p_g_n) / p_i_n, (p_g_n - p_j_n) / p_i_n
    rho = a if w_i > w_j else b if w_j > w_i else min(a, b)
    return float(min(max(rho, 0.0), 1.0))


def kd_global(logits_aux: torch.Tensor, logits_global: torch.Tensor, tau: float = 5.0) -> torch.Tensor:
    """Eq. (15), averaged over the batch."""
    log_pa = F.log_softmax(logits_aux / tau, dim=-1)
    log_pg = F.log_softmax(logits_global / tau, dim=-1)
    return tau ** 2 * (log_pg.exp() * (log_pg - log_pa)).sum(dim=-1).mean()


def relational_matrix(z: torch.Tensor, distance: str = "raw") -> torch.Tensor:
    """Eq. (16): squared Euclidean distances between the batch's (flattened) features.

    ``distance="mean"`` divides them by their mean over the off-diagonal pairs (the
    normalisation of relational KD, Park et al. 2019), so the matrix does not scale with the
    features' norm; ``"raw"`` is eq. (16) as printed."""
    f = z.reshape(len(z), -1)
    sq = (f * f).sum(dim=1)
    # the Gram form, not cdist(f, f) ** 2: the square root's gradient at the zero diagonal is NaN
    m = (sq[:, None] + sq[None, :] - 2.0 * f @ f.T).clamp_min(0.0)
    if distance == "mean" and len(z) > 1:
        m = m / (m.sum() / (len(z) * (len(z) - 1))).clamp_min(1e-12)
    elif distance not in DISTANCES:
        raise ValueError(f"unknown distance '{distance}'; allowed: {', '.join(DISTANCES)}")
    return m


def kd_client(z_client: torch.Tensor, z_aux: torch.Tensor, tau: float = 5.0, distance: str = "raw") -> torch.Tensor:
    """Eq. (17) as written, with PyTorch's kl_div(input=log-probs, target=probs): row-wise
    KL(Softmax(M_Ae/tau) || Softmax(M_C/tau)), summed over rows and divided by the batch.
    ``distance``: see :func:`relational_matrix`."""
    m_c, m_ae = relational_matrix(z_client, distance), relational_matrix(z_aux, distance)
    # the target as log-probabilities (log_target): the same value, but a target probability
    # that underflows to 0 would give 0 * log 0 and a NaN gradient
    return tau ** 2 * F.kl_div(F.log_softmax(m_c / tau, dim=-1), F.log_softmax(m_ae / tau, dim=-1),
                               reduction="batchmean", log_target=True)
