"""BESplit's Client State Records and Evidential Aggregation (Sec. 4.1, App. C, eqs. 6-10),
as pure NumPy functions, used by :mod:`raysfl.algorithms.besplit.algorithm` at the end of each round.

A record R holds, per client, the evidence matrix E (N x N: row = true class, column =
evidence for each class, summed over samples), the per-class counts M, and the per-class
sums of aleatoric and epistemic uncertainty.

    R      = beta_dec R_{t_k} + (1 - beta_dec) R_{t_c},  beta_dec = beta^max(1, t_c - t_k)    (6)
    E_bar  = diag(M)^-1 E,  U_bar_ale = U_ale / M,  U_bar_epi = U_epi / M                     (7)
    q_i    = E_bar_ii / (sum_j E_bar_ij + eps),  Q = mean_i q_i                               (8)
    R_ale  = sum_j sum_i U_bar_ale,i^(j) / (sum_i U_bar_ale,i^(k) + eps)   (and R_epi alike)  (9)
    s      = Q R_ale R_epi,  w = s / sum_j s                                                 (10)

**What EA is for** (Sec. 4.1): "to prevent biased local data from dominating global
updates"; "Clients with high aleatoric or epistemic uncertainty should contribute less";
"A higher Q indicates more concentrated and consistent evidence across classes"; "adaptively
prioritizing client updates with higher predictive confidence". Read literally, eqs. (8)-(9)
over all N classes do something else when a client has not seen every class (Dirichlet
kappa 0.1: 2-3 classes each): a class with M_i = 0 has no average, enters as 0, and eq. (9)'s
*sum* over classes then grows with the number of classes seen -- with identical evidence per
sample, a 2-class client gets 5x the uncertainty ratio of a 10-class one. How a client's
per-class figures become one number is therefore an option (``average``):

* ``seen`` (default): Q and both uncertainties are means over the classes the client has
  seen (M_i > 0). Identical evidence per sample gives identical weights, whatever the
  coverage; more uncertainty gives less weight.
* ``sample``: means over the client's samples (sum_i M_i q_i / sum_i M_i for Q,
  sum_i U_i / sum_i M_i for the uncertainties): the same, weighting classes by their counts.
* ``all``: eqs. (8)-(9) as printed: Q = (1/N) sum over all N classes (q_i = 0 for an unseen
  class), uncertainties summed over all N classes (0 for an unseen class).

``samples``: eq. (10) has no sample count n_k, unlike the FedAvg average it replaces; given
the counts, s is multiplied by n_k (EA then re-weights the sample-weighted average).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raysfl.algorithms.besplit.spec import AVERAGES, COMPARES

EPS = 1e-8


@dataclass
class ClientStateRecord:
    evidence: np.ndarray   # (N, N) summed evidence vectors, row = true class
    counts: np.ndarray     # (N,) samples per true class
    u_ale: np.ndarray      # (N,) summed aleatoric uncertainty per true class
    u_epi: np.ndarray      # (N,) summed epistemic uncertainty per true class
    round: int = 0         # the round these statistics were last updated (t_k)


def ema_update(old: ClientStateRecord | None, new: ClientStateRecord, beta: float) -> ClientStateRecord:
    """Eq. (6): staleness-aware EMA of the stored record with this round's statistics."""
    if old is None:
        return new
    b = beta ** max(1, new.round - old.round)
    mix = lambda a, c: b * a + (1 - b) * c  # noqa: E731
    return ClientStateRecord(mix(old.evidence, new.evidence), mix(old.counts, new.counts),
                             mix(old.u_ale, new.u_ale), mix(old.u_epi, new.u_epi), new.round)


def expire(records: dict[int, ClientStateRecord], now: int, ttl: int) -> dict[int, ClientStateRecord]:
    """Drop the records of clients inactive for more than ``ttl`` rounds."""
    return {k: r for k, r in records.items() if now - r.round <= ttl}


def normalise(r: ClientStateRecord) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Eq. (7): (E_bar, seen-class mask, U_bar_ale, U_bar_epi); unseen classes' entries are 0."""
    seen = r.counts > 0
    safe = np.where(seen, r.counts, 1.0)
    e_bar = np.where(seen[:, None], r.evidence / safe[:, None], 0.0)
    return e_bar, seen, np.where(seen, r.u_ale / safe, 0.0), np.where(seen, r.u_epi / safe, 0.0)


def class_concentration(e_bar: np.ndarray, seen: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Eq. (8)'s q_i per class: the share of class i's evidence on class i (0 where unseen)."""
    return np.where(seen, np.diag(e_bar) / (e_bar.sum(axis=1) + eps), 0.0)


def evidence_concentration(e_bar: np.ndarray, seen: np.ndarray, eps: float = EPS, average: str = "seen",
                           counts: np.ndarray | None = None) -> float:
    """Eq. (8)'s Q: q_i combined by ``average`` (module docstring): ``seen`` the mean over the
    seen classes, ``all`` the printed mean over all N classes (an unseen class counts q_i = 0),
    ``sample`` the count-weighted mean (needs ``counts``)."""
    q = class_concentration(e_bar, seen, eps)
    return float(_combine(q, seen, average, counts, mean=True))


def _combine(per_class: np.ndarray, seen: np.ndarray, average: str, counts: np.ndarray | None,
             mean: bool) -> float:
    """One client figure from per-class averages: ``seen`` mean over seen classes; ``sample``
    count-weighted mean; ``all`` the printed mean (Q, ``mean``) or sum (uncertainties) over N."""
    if not seen.any():
        return 0.0
    if average == "seen":
        return float(per_class[seen].mean())
    if average == "sample":
        if counts is None:
            raise ValueError("average='sample' needs the class counts")
        return float(np.dot(per_class, counts) / counts.sum())
    if average == "all":
        return float(per_class.mean() if mean else per_class.sum())
    raise ValueError(f"unknown average '{average}'; allowed: {', '.join(AVERAGES)}")


def client_figures(r: ClientStateRecord, average: str = "seen", eps: float = EPS,
                   q_average: str | None = None) -> tuple[float, float, float]:
    """(Q, U_ale, U_epi) of one client from its record (eqs. 7-9), combined over classes by
    ``average`` (module docstring); Q by ``q_average`` where given."""
    e_bar, seen, u_ale, u_epi = normalise(r)
    q = class_concentration(e_bar, seen, eps)
    return (_combine(q, seen, q_average or average, r.counts, mean=True),
            _combine(u_ale, seen, average, r.counts, mean=False), _combine(u_epi, seen, average, r.counts, mean=False))


def uncertainty_ratio(u: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Eq. (9): R^(k) = sum_j U^(j) / (U^(k) + eps) -- large for a client whose uncertainty is
    small against the others' (for U >= 0; a negative U, eq. 4 as printed, reverses that)."""
    return u.sum() / (u + eps)


def per_class_factors(records: list[ClientStateRecord], average: str = "seen", eps: float = EPS,
                      q_average: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Q, R_ale, R_epi) per client with every class compared among the clients that hold it
    (``compare="per_class"``): for class i and a client k that has seen it,

        q_i^(k) / mean_j q_i^(j),   mean_j U_bar_i^(j) / (U_bar_i^(k) + eps)   (j: clients that have seen i)

    then combined over k's seen classes by ``average`` (``seen`` or ``sample``; Q by ``q_average``
    where given, which may also be ``all``: eq. (8)'s 1/N over all N classes). Eq. (9)'s
    ratio "own uncertainty against everyone's", taken class by class: a class that only a
    few clients hold, or that the model has not learnt yet, makes its holders uncertain
    whoever they are; compared within the class, that no longer costs them their weight --
    only uncertainty above their peers' on the same classes does."""
    if average not in ("seen", "sample"):
        raise ValueError(f"per-class comparison combines classes by 'seen' or 'sample', got '{average}'")
    norm = [normalise(r) for r in records]
    seen = np.stack([n[1] for n in norm])                       # (K, N)
    q = np.stack([class_concentration(n[0], n[1], eps) for n in norm])
    ale, epi = np.stack([n[2] for n in norm]), np.stack([n[3] for n in norm])
    holders = np.maximum(seen.sum(axis=0), 1)

    def peer_mean(x):  # per class, over the clients that have seen it
        return np.where(seen, x, 0.0).sum(axis=0) / holders

    rel_q = np.where(seen, q / (peer_mean(q) + eps), 0.0)
    rel_ale = np.where(seen, peer_mean(ale) / (ale + eps), 0.0)
    rel_epi = np.where(seen, peer_mean(epi) / (epi + eps), 0.0)
    out = [[_combine(x[k], seen[k], how, records[k].counts, mean=True) for k in range(len(records))]
           for x, how in ((rel_q, q_average or average), (rel_ale, average), (rel_epi, average))]
    return tuple(np.array(o, dtype=np.float64) for o in out)


def evidential_weights(records: list[ClientStateRecord], use_evidence: bool = True, use_ale: bool = True,
                       use_epi: bool = True, eps: float = EPS, average: str = "seen",
                       samples: np.ndarray | None = None, compare: str = "pooled",
                       q_average: str | None = None) -> np.ndarray:
    """Eqs. (8)-(10) over the given clients' records: w = s / sum s, s = Q R_ale R_epi (times
    n_k when ``samples`` gives the clients' sample counts). The switches are Table 4's
    ablations (a factor switched off counts as 1); ``average``: see the module docstring;
    ``compare``: ``pooled`` (eq. 9 as printed: a client's figures against everyone's) or
    ``per_class`` (:func:`per_class_factors`); ``q_average``: how Q combines its classes, where
    it differs from ``average``."""
    if compare == "per_class":
        q, r_ale, r_epi = per_class_factors(records, average, eps, q_average)
    elif compare == "pooled":
        figs = np.array([client_figures(r, average, eps, q_average) for r in records],
                        dtype=np.float64).reshape(-1, 3)
        q, r_ale, r_epi = figs[:, 0], uncertainty_ratio(figs[:, 1], eps), uncertainty_ratio(figs[:, 2], eps)
    else:
        raise ValueError(f"unknown compare '{compare}'; allowed: {', '.join(COMPARES)}")
    s = np.ones(len(records), dtype=np.float64)
    if use_evidence:
        s = s * q
    if use_ale:
        s = s * r_ale
    if use_epi:
        s = s * r_epi
    if samples is not None:
        s = s * np.asarray(samples, dtype=np.float64)
    return s / s.sum() if s.sum() > 0 else np.full(len(records), 1.0 / len(records))
