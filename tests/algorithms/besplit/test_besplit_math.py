"""BESplit's evidential learning (eqs. 3-5) and evidential aggregation (eqs. 6-10) by hand.
(The algorithm is not wired yet; these are its pure parts.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raysfl.algorithms.besplit.evidential import (aleatoric, annealing, epistemic, evidence, evidential_loss,
                                                  kl_to_uniform)
from raysfl.algorithms.besplit.evidential_aggregation import (ClientStateRecord, ema_update, evidence_concentration,
                                                              evidential_weights, expire, normalise)

A11 = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
A22 = torch.tensor([[2.0, 2.0]], dtype=torch.float64)
A31 = torch.tensor([[3.0, 1.0]], dtype=torch.float64)


def test_eq3_aleatoric():
    # alpha = (1, 1), S = 2: 2 * 1/2 * (psi(3) - psi(2)) = 1/2
    assert float(aleatoric(A11)[0]) == pytest.approx(0.5)
    # alpha = (3, 1), S = 4: 3/4 (psi(5) - psi(4)) + 1/4 (psi(5) - psi(2)) = 3/4 * 1/4 + 1/4 (1/2 + 1/3 + 1/4)
    assert float(aleatoric(A31)[0]) == pytest.approx(3 / 16 + (1 / 2 + 1 / 3 + 1 / 4) / 4)


def test_eq4_epistemic_is_the_dirichlet_entropy():
    assert float(epistemic(A11)[0]) == pytest.approx(0.0)  # the uniform density on the simplex
    # alpha = (2, 2): log B = 2 log 1! - log 3! = -log 6; + (4 - 2) psi(4) - 2 psi(2); psi(4) - psi(2) = 1/2 + 1/3
    assert float(epistemic(A22)[0]) == pytest.approx(-math.log(6) + 2 * (1 / 2 + 1 / 3))
    assert float(epistemic(torch.tensor([[20.0, 20.0]], dtype=torch.float64))[0]) < float(epistemic(A22)[0])


def test_eq5_loss_with_annealing():
    y = torch.tensor([0])
    # fit term: psi(S) - psi(alpha_y) = psi(4) - psi(3) = 1/3 for alpha = (3, 1)
    assert float(evidential_loss(A31, y, t=0, total=10)) == pytest.approx(1 / 3)
    # alpha~ = (1, 1) when the wrong class has no evidence: KL to uniform = 0, annealed or not
    assert float(evidential_loss(A31, y, t=10, total=10)) == pytest.approx(1 / 3)
    # wrong class holds the evidence: alpha = (1, 3), y = 0 -> fit psi(4) - psi(1) = 1 + 1/2 + 1/3
    # alpha~ = (1, 3): KL = log G(4) - log G(2) - log G(3) + 2 (psi(3) - psi(4)) = log 6 - log 2 - 2/3
    a13 = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    kl = math.log(3) - 2 / 3
    assert float(kl_to_uniform(a13)[0]) == pytest.approx(kl)
    assert float(evidential_loss(a13, y, t=5, total=10)) == pytest.approx(11 / 6 + 0.5 * kl)
    assert float(evidential_loss(a13, y, t=20, total=10)) == pytest.approx(11 / 6 + kl)  # lambda_t capped at 1
    assert annealing(3, 10) == pytest.approx(0.3) and annealing(30, 10) == 1.0


def test_evidence_is_non_negative():
    z = torch.tensor([-3.0, 0.0, 2.0])
    for kind in ("softplus", "relu", "exp"):
        assert (evidence(z, kind) >= 0).all()
    with pytest.raises(ValueError, match="unknown evidence activation 'tanh'"):
        evidence(z, "tanh")


def _rec(evidence_rows, counts, ale, epi, rnd=1):
    return ClientStateRecord(np.array(evidence_rows, float), np.array(counts, float), np.array(ale, float),
                             np.array(epi, float), rnd)


def test_eq6_staleness_aware_ema_and_ttl():
    old = _rec([[4, 0], [0, 4]], [2, 2], [1, 1], [2, 2], rnd=1)
    new = _rec([[8, 0], [0, 0]], [4, 0], [2, 0], [4, 0], rnd=4)
    r = ema_update(old, new, beta=0.5)      # beta_dec = 0.5^3 = 0.125
    assert r.evidence[0, 0] == pytest.approx(0.125 * 4 + 0.875 * 8) and r.counts[1] == pytest.approx(0.25)
    r2 = ema_update(old, _rec([[8, 0], [0, 0]], [4, 0], [2, 0], [4, 0], rnd=1), beta=0.5)  # max(1, 0) = 1
    assert r2.counts[0] == pytest.approx(0.5 * 2 + 0.5 * 4) and r.round == 4
    assert set(expire({1: old, 2: new}, now=6, ttl=3)) == {2}


def test_eq7_eq8_normalisation_and_concentration():
    r = _rec([[6, 2], [0, 0]], [2, 0], [1.0, 0], [3.0, 0])
    e_bar, seen, ua, ue = normalise(r)
    assert e_bar.tolist() == [[3, 1], [0, 0]] and seen.tolist() == [True, False]
    assert ua.tolist() == [0.5, 0.0] and ue.tolist() == [1.5, 0.0]
    assert evidence_concentration(e_bar, seen) == pytest.approx(3 / 8)  # eq. 8's 1/N: the unseen class has q = 0


def test_eq9_eq10_weights_sum_to_one_and_follow_the_formula():
    a = _rec([[3, 1], [1, 3]], [1, 1], [1.0, 1.0], [2.0, 2.0])   # Q = 3/4, sum U_ale = 2, sum U_epi = 4
    b = _rec([[1, 1], [1, 1]], [1, 1], [3.0, 3.0], [1.0, 1.0])   # Q = 1/2, sum U_ale = 6, sum U_epi = 2
    s_a = 0.75 * (8 / 2) * (6 / 4)
    s_b = 0.5 * (8 / 6) * (6 / 2)
    w = evidential_weights([a, b])
    assert w.sum() == pytest.approx(1.0)
    assert w.tolist() == pytest.approx([s_a / (s_a + s_b), s_b / (s_a + s_b)])
    only_q = evidential_weights([a, b], use_ale=False, use_epi=False)
    assert only_q.tolist() == pytest.approx([0.6, 0.4])
    assert evidential_weights([a, b], use_evidence=False, use_ale=False, use_epi=False).tolist() == [0.5, 0.5]


# ---------------------------------------------------------------- BCC and DTD (bcc.py)
from raysfl.algorithms.besplit.bcc import (bcc_pairs, biased_clients, complementarity, js_divergence, kd_client,  # noqa: E402
                                           kd_global, mix_ratio, overrepresented, relational_matrix)


def test_eq11_biased_set_by_the_largest_gap():
    g = np.array([0.5, 0.5])
    dists = np.array([[0.5, 0.5], [0.55, 0.45], [1.0, 0.0], [0.0, 1.0]])
    d = [js_divergence(p, g) for p in dists]
    # JS((1,0), (.5,.5)): m = (.75, .25); KL(p||m) = ln(4/3), KL(g||m) = ln(4/3) / 2 -> 3/4 ln(4/3)
    assert d[0] == 0.0 and d[2] == pytest.approx(0.75 * math.log(4 / 3))
    assert biased_clients(dists, g) == [2, 3]  # the gap between 0.0013 and 0.216 is the largest


def test_eq33_complementarity_and_matching():
    g = np.array([0.5, 0.5])
    # opposite deviations cancel: 0.5+0.5 + 0.5+0.5 - 0 = 2; aligned ones do not: 1 + 1 - 2 = 0
    assert complementarity([1, 0], [0, 1], g) == pytest.approx(2.0)
    assert complementarity([1, 0], [1, 0], g) == pytest.approx(0.0)
    assert complementarity([1, 0], [0.25, 0.75], g) == pytest.approx(1.0 + 0.5 - 0.5)
    dists = np.array([[1, 0], [1, 0], [0, 1], [0.25, 0.75]])
    pairs = bcc_pairs(dists, g, [0, 1, 2, 3])
    assert pairs == [(0, 2), (1, 3)]  # weights 2 then 1; (0, 1) has weight 0 and is never taken
    assert bcc_pairs(dists, g, [0, 1]) == []


def test_eq13_overrepresented_classes():
    assert overrepresented(np.array([0.6, 0.1, 0.3]), np.array([0.2, 0.5, 0.3])) == ([0], [1])


def test_eq31_eq32_mix_ratio():
    # P_i,n = 0.8, P_j,n = 0.1, P_g,n = 0.4
    assert mix_ratio(0.8, 0.1, 0.4, w_i=0.6, w_j=0.4) == pytest.approx((0.8 - 0.4) / 0.8)   # eq. 31
    assert mix_ratio(0.8, 0.1, 0.4, w_i=0.4, w_j=0.6) == pytest.approx((0.4 - 0.1) / 0.8)   # eq. 32
    assert mix_ratio(0.8, 0.1, 0.4, w_i=0.5, w_j=0.5) == pytest.approx(0.3 / 0.8)           # tie: smaller end
    assert mix_ratio(0.2, 0.1, 0.4, 0.6, 0.4) == 0.0  # nothing over-represented: no mixing


def test_eq15_global_distillation():
    la, lg = torch.tensor([[0.0, 0.0]]), torch.tensor([[5.0, 0.0]])
    pg = torch.softmax(lg / 5, -1)  # (e/(e+1), 1/(e+1))
    want = 25 * float((pg * (pg.log() - math.log(0.5))).sum())
    assert float(kd_global(la, lg, tau=5.0)) == pytest.approx(want)
    assert float(kd_global(lg, lg)) == pytest.approx(0.0, abs=1e-6)


def test_eq16_eq17_client_distillation():
    z = torch.tensor([[0.0, 0.0], [3.0, 4.0]])
    assert relational_matrix(z).flatten().tolist() == pytest.approx([0.0, 25.0, 25.0, 0.0], abs=1e-4)
    assert float(kd_client(z, z)) == pytest.approx(0.0, abs=1e-6)
    za = torch.tensor([[0.0, 0.0], [0.0, 0.0]])  # M_Ae = 0: uniform rows
    mc = torch.log_softmax(torch.tensor([[0.0, 5.0], [5.0, 0.0]]), -1)   # M_C / tau
    want = 25 * sum(0.5 * (math.log(0.5) - float(mc[r, c])) for r in range(2) for c in range(2)) / 2
    assert float(kd_client(z, za)) == pytest.approx(want, rel=1e-4)
