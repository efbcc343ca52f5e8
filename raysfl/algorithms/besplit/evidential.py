"""BESplit's evidential learning (Sec. 3.2, App. B): Dirichlet evidence, its two
uncertainties, and the evidential loss. Pure PyTorch; used by the server step
(:mod:`raysfl.algorithms.besplit.bcc_step`) and the auxiliary models (:mod:`raysfl.algorithms.besplit.dtd`).

A head's non-negative evidence e gives Dirichlet parameters alpha = e + 1, strength
S = sum_i alpha_i. With psi the digamma function:

    U_ale = sum_i alpha_i / S * [psi(S + 1) - psi(alpha_i + 1)]                  (3)  expected entropy
    U_epi = H[Dir(alpha)] = log B(alpha) + (S - N) psi(S) - sum_i (alpha_i - 1) psi(alpha_i)   (4)
    L     = sum_i y_i [psi(S) - psi(alpha_i)] + lambda_t KL[Dir(alpha~) || Dir(1)],
            alpha~ = y + (1 - y) * alpha,  lambda_t = min(1, t / T)               (5)

Eq. (4) is printed as sum_i [log(Gamma(alpha_i) / Gamma(S)) - (alpha_i - 1)(psi(alpha_i) -
psi(S))], which counts log Gamma(S) N times; the text defines U_epi as the differential
entropy of the Dirichlet, which is what is computed here (the two agree when S = 2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

EVIDENCE = ("softplus", "relu", "exp")


def evidence(logits: torch.Tensor, kind: str = "softplus") -> torch.Tensor:
    """Non-negative evidence from a head's outputs."""
    if kind == "relu":
        return F.relu(logits)
    if kind == "exp":
        return torch.exp(logits.clamp(max=10.0))
    if kind == "softplus":
        return F.softplus(logits)
    raise ValueError(f"unknown evidence activation '{kind}'; allowed: {', '.join(EVIDENCE)}")


def aleatoric(alpha: torch.Tensor) -> torch.Tensor:
    """Eq. (3), per row of ``alpha`` (batch, classes)."""
    s = alpha.sum(dim=-1, keepdim=True)
    return (alpha / s * (torch.digamma(s + 1) - torch.digamma(alpha + 1))).sum(dim=-1)


def epistemic(alpha: torch.Tensor) -> torch.Tensor:
    """Eq. (4): the differential entropy of Dir(alpha), per row."""
    s = alpha.sum(dim=-1)
    n = alpha.shape[-1]
    log_b = torch.lgamma(alpha).sum(dim=-1) - torch.lgamma(s)
    return log_b + (s - n) * torch.digamma(s) - ((alpha - 1) * torch.digamma(alpha)).sum(dim=-1)


def kl_to_uniform(alpha: torch.Tensor) -> torch.Tensor:
    """KL[Dir(alpha) || Dir(1, ..., 1)] per row."""
    n = alpha.shape[-1]
    s = alpha.sum(dim=-1)
    return (torch.lgamma(s) - torch.lgamma(torch.tensor(float(n), dtype=alpha.dtype))
            - torch.lgamma(alpha).sum(dim=-1)
            + ((alpha - 1) * (torch.digamma(alpha) - torch.digamma(s).unsqueeze(-1))).sum(dim=-1))


def annealing(t: int, total: int) -> float:
    """lambda_t = min(1, t / T)."""
    return min(1.0, t / total)


def evidential_loss(alpha: torch.Tensor, y: torch.Tensor, t: int, total: int, reduction: str = "mean") -> torch.Tensor:
    """Eq. (5), averaged over the batch (``reduction="none"``: per sample); ``y`` holds class
    indices."""
    onehot = F.one_hot(y, alpha.shape[-1]).to(alpha.dtype)
    s = alpha.sum(dim=-1, keepdim=True)
    fit = (onehot * (torch.digamma(s) - torch.digamma(alpha))).sum(dim=-1)
    adjusted = onehot + (1 - onehot) * alpha
    per_sample = fit + annealing(t, total) * kl_to_uniform(adjusted)
    return per_sample if reduction == "none" else per_sample.mean()
