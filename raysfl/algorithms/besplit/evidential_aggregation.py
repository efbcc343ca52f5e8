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

Classes a client has never seen (M_i = 0) have no average: their E_bar row and U_bar entries
are 0, so they count q_i = 0 in eq. (8)'s mean over all N classes (a client that saw few
classes has a lower Q) and add nothing to eq. (9)'s uncertainty sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    """Eq. (7): (E_bar, seen-class mask, U_bar_ale, U_bar_epi)."""
    seen = r.counts > 0
    safe = np.where(seen, r.counts, 1.0)
    e_bar = np.where(seen[:, None], r.evidence / safe[:, None], 0.0)
    return e_bar, seen, np.where(seen, r.u_ale / safe, 0.0), np.where(seen, r.u_epi / safe, 0.0)


def evidence_concentration(e_bar: np.ndarray, seen: np.ndarray, eps: float = EPS) -> float:
    """Eq. (8): the evidence share on the true class, averaged over all N classes (its 1/N);
    a class the client has not seen has no evidence and counts q_i = 0."""
    q = np.where(seen, np.diag(e_bar) / (e_bar.sum(axis=1) + eps), 0.0)
    return float(q.mean())


def evidential_weights(records: list[ClientStateRecord], use_evidence: bool = True, use_ale: bool = True,
                       use_epi: bool = True, eps: float = EPS) -> np.ndarray:
    """Eqs. (8)-(10) over the given clients' records; the switches are Table 4's ablations
    (a factor switched off counts as 1)."""
    norm = [normalise(r) for r in records]
    q = np.array([evidence_concentration(e, seen, eps) for e, seen, _, _ in norm])
    ale = np.array([u.sum() for _, _, u, _ in norm])
    epi = np.array([u.sum() for _, _, _, u in norm])
    r_ale, r_epi = ale.sum() / (ale + eps), epi.sum() / (epi + eps)
    s = (q if use_evidence else 1.0) * (r_ale if use_ale else 1.0) * (r_epi if use_epi else 1.0)
    s = np.broadcast_to(np.asarray(s, dtype=np.float64), (len(records),))
    return s / s.sum() if s.sum() > 0 else np.full(len(records), 1.0 / len(records))
