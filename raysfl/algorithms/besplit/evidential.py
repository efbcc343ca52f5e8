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
entropy of the Dirichlet, which is what :func:`epistemic` computes (the two agree when S = 2).

That differential entropy is <= 0 (0 for alpha = 1, -12.8 already for N = 10 classes and
alpha_i = 2) and falls as evidence grows, so eq. (9)'s ratio sum / own of it gives *more*
weight to the *more* uncertain client. Evidential Aggregation's sentence "Clients with high
aleatoric or epistemic uncertainty should contribute less" needs a measure that is >= 0 and
grows with uncertainty; two standard ones for a Dirichlet (:func:`epistemic_measure`):

    MI   = H[E p] - E[H(p)] = H(alpha / S) - U_ale     mutual information of y and p      (epistemic
                                                      part of the total entropy, Malinin & Gales 2018)
    u    = N / S                                       vacuity (App. B, eq. 21; Sensoy et al. 2018)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from raysfl.algorithms.besplit.spec import EPISTEMIC, EVIDENCE


def evidence(logits: torch.Tensor, kind: str = "exp") -> torch.Tensor:
    """Non-negative evidence phi(logits) (Sec. 3.2; the paper does not name phi). ``exp`` is
    clamped at logit 10 (evidence e^10) against overflow."""
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


def mutual_information(alpha: torch.Tensor) -> torch.Tensor:
    """I(y; p) = H[E p] - E[H(p)] per row: the entropy of the expected categorical alpha / S
    minus eq. (3)'s expected entropy. >= 0; largest for little evidence, 0 as S grows."""
    s = alpha.sum(dim=-1, keepdim=True)
    mean = alpha / s
    return -(mean * torch.log(mean)).sum(dim=-1) - aleatoric(alpha)


def vacuity(alpha: torch.Tensor) -> torch.Tensor:
    """u = N / S per row (App. B, eq. 21): 1 without evidence, falling towards 0 as it grows."""
    return alpha.shape[-1] / alpha.sum(dim=-1)


def epistemic_measure(alpha: torch.Tensor, kind: str = "mutual_info") -> torch.Tensor:
    """The epistemic uncertainty eq. (9) weighs clients by (see the module docstring):
    ``mutual_info``, ``vacuity`` (both >= 0, growing with uncertainty) or ``entropy`` (eq. 4
    as printed, the Dirichlet's differential entropy, <= 0)."""
    if kind == "mutual_info":
        return mutual_information(alpha)
    if kind == "vacuity":
        return vacuity(alpha)
    if kind == "entropy":
        return epistemic(alpha)
    raise ValueError(f"unknown epistemic measure '{kind}'; allowed: {', '.join(EPISTEMIC)}")


def kl_to_uniform(alpha: torch.Tensor) -> torch.Tensor:
    """KL[Dir(alpha) || Dir(1, ..., 1)] per row."""
    n = alpha.shape[-1]
    s = alpha.sum(dim=-1)
    return (torch.lgamma(s) - torch.lgamma(torch.tensor(float(n), dtype=alpha.dtype, device=alpha.device))
            - torch.lgamma(alpha).sum(dim=-1)
            + ((alpha - 1) * (torch.digamma(alpha) - torch.digamma(s).unsqueeze(-1))).sum(dim=-1))


def annealing(t: int, total: int) -> float:
    """lambda_t = min(1, t / T) (eq. 5). T is a horizon in rounds: BESplit's default is the run's
    rounds (App. D writes T for the number of rounds); Sensoy et al. (2018), whose loss eq. (5)
    is, anneal over T = 10 epochs (``--anneal-rounds 10``)."""
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
