"""BESplit's pure mathematics by hand: evidential learning (eqs. 3-5, and the epistemic
measures eq. 9 uses), evidential aggregation (eqs. 6-10: the arithmetic, and what Sec. 4.1
says it is for), BCC (eqs. 11, 13, 31-33) and DTD's losses (eqs. 15-17)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raysfl.algorithms.besplit.bcc_step import batch_statistics
from raysfl.algorithms.besplit.evidential import (aleatoric, annealing, epistemic, epistemic_measure, evidence,
                                                  evidential_loss, kl_to_uniform, mutual_information, vacuity)
from raysfl.algorithms.besplit.evidential_aggregation import (ClientStateRecord, client_figures, ema_update,
                                                              evidence_concentration, evidential_weights, expire,
                                                              normalise)
from raysfl.algorithms.besplit.spec import EPISTEMIC

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
    assert evidence_concentration(e_bar, seen, average="all") == pytest.approx(3 / 8)  # eq. 8's 1/N: unseen q = 0
    assert evidence_concentration(e_bar, seen) == pytest.approx(3 / 4)  # over the seen classes


def test_client_figures_combine_classes_as_each_reading_says():
    # class 0: 2 samples, q = 3/4, U_ale 0.5 each; class 1: 6 samples, q = 1/2, U_ale 1 each; class 2 unseen
    r = _rec([[6, 2, 0], [6, 6, 0], [0, 0, 0]], [2, 6, 0], [1.0, 6.0, 0], [0.2, 1.2, 0])
    q, ale, epi = client_figures(r, "seen")
    assert (q, ale, epi) == pytest.approx((0.625, 0.75, 0.15))
    q, ale, epi = client_figures(r, "sample")
    assert (q, ale, epi) == pytest.approx(((2 * 0.75 + 6 * 0.5) / 8, 7 / 8, 1.4 / 8))
    q, ale, epi = client_figures(r, "all")  # eqs. 8-9 as printed: Q over N = 3 classes, U summed
    assert (q, ale, epi) == pytest.approx((1.25 / 3, 1.5, 0.3))


def test_eq9_eq10_weights_sum_to_one_and_follow_the_formula():
    """Both clients have seen both classes: every reading gives the printed arithmetic (with
    ``all``, sums over classes; with ``seen``, means, the same up to the factor 2 that cancels)."""
    a = _rec([[3, 1], [1, 3]], [1, 1], [1.0, 1.0], [2.0, 2.0])   # Q = 3/4, sum U_ale = 2, sum U_epi = 4
    b = _rec([[1, 1], [1, 1]], [1, 1], [3.0, 3.0], [1.0, 1.0])   # Q = 1/2, sum U_ale = 6, sum U_epi = 2
    s_a = 0.75 * (8 / 2) * (6 / 4)
    s_b = 0.5 * (8 / 6) * (6 / 2)
    for average in ("all", "seen", "sample"):
        w = evidential_weights([a, b], average=average)
        assert w.sum() == pytest.approx(1.0)
        assert w.tolist() == pytest.approx([s_a / (s_a + s_b), s_b / (s_a + s_b)])
    # n_k in the weights: s times the sample count
    w = evidential_weights([a, b], samples=np.array([1.0, 3.0]))
    assert w.tolist() == pytest.approx([s_a / (s_a + 3 * s_b), 3 * s_b / (s_a + 3 * s_b)])
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


# ---------------------------------------------------------------- EA by intent (Sec. 4.1)
def _alphas(n_classes_seen: int, per_class: int, true_ev: float, other_ev: float, n: int = 10,
            first: int = 0) -> tuple:
    """A client's batch: ``per_class`` samples of each of classes ``first`` .. ``first +
    n_classes_seen - 1``, each with evidence ``true_ev`` on its true class and ``other_ev`` on
    every other class."""
    y = torch.arange(first, first + n_classes_seen).repeat_interleave(per_class)
    alpha = torch.full((len(y), n), 1.0 + other_ev, dtype=torch.float64)
    alpha[torch.arange(len(y)), y] = 1.0 + true_ev
    return alpha, y


def _record(alpha, y, kind="mutual_info", n=10):
    return ClientStateRecord(**batch_statistics(alpha, y, n, kind), round=1)


def test_every_uncertainty_term_has_the_sign_eq9_needs():
    """U_ale, mutual information and vacuity are >= 0 and fall as evidence grows; eq. (4) as
    printed (the differential entropy) is <= 0 (-log 9! = -12.8 for 10 classes without
    evidence), which is why eq. (9)'s ratio of it reverses the ranking."""
    g = torch.Generator().manual_seed(0)
    alpha = 1 + 20 * torch.rand(200, 10, generator=g, dtype=torch.float64)
    assert (aleatoric(alpha) >= 0).all() and (mutual_information(alpha) >= -1e-12).all()
    assert ((vacuity(alpha) > 0) & (vacuity(alpha) <= 1)).all() and (epistemic(alpha) <= 0).all()
    assert float(epistemic(torch.ones(1, 10, dtype=torch.float64))[0]) == pytest.approx(-math.log(math.factorial(9)))
    more = alpha.clone()
    more[:, 0] += 50  # more evidence: every uncertainty falls
    for f in (aleatoric, mutual_information, vacuity, epistemic):
        assert (f(more) < f(alpha)).all()
    # by hand: alpha = (1, 1): H[E p] = log 2, U_ale = 1/2; alpha = (2, 2): U_ale = psi(5) - psi(3) = 7/12
    assert float(mutual_information(A11)[0]) == pytest.approx(math.log(2) - 0.5)
    assert float(mutual_information(A22)[0]) == pytest.approx(math.log(2) - 7 / 12)
    assert float(vacuity(A31)[0]) == pytest.approx(0.5)
    assert float(epistemic_measure(A22, "entropy")[0]) == pytest.approx(float(epistemic(A22)[0]))
    with pytest.raises(ValueError, match="unknown epistemic measure 'x'; allowed: mutual_info, vacuity, entropy"):
        epistemic_measure(A22, "x")


@pytest.mark.parametrize("kind", ["mutual_info", "vacuity"])
@pytest.mark.parametrize("average", ["seen", "sample", "all"])
def test_ea_gives_the_more_uncertain_client_less_weight(kind, average):
    """Sec. 4.1: "Clients with high aleatoric or epistemic uncertainty should contribute less."
    Same classes, same counts; one client's evidence is weaker and more spread."""
    sure = _record(*_alphas(10, 4, 30.0, 0.5), kind)
    unsure = _record(*_alphas(10, 4, 3.0, 1.5), kind)
    for flags in ({}, {"use_evidence": False, "use_epi": False}, {"use_evidence": False, "use_ale": False},
                  {"use_ale": False, "use_epi": False}):
        w = evidential_weights([sure, unsure], average=average, **flags)
        assert w[0] > w[1], flags
    # as printed, eq. (4)'s negative entropy in eq. (9) favours the *more* uncertain client
    sure_h, unsure_h = _record(*_alphas(10, 4, 30.0, 0.5), "entropy"), _record(*_alphas(10, 4, 3.0, 1.5), "entropy")
    w = evidential_weights([sure_h, unsure_h], use_evidence=False, use_ale=False, average=average)
    assert w[0] < w[1]


@pytest.mark.parametrize("kind", EPISTEMIC[:2])
def test_ea_does_not_give_a_client_less_weight_for_seeing_more_classes(kind):
    """The same evidence per sample and the same sample count on 2 or on 10 classes: by
    intent the wider client gets no less weight ("seen" and "sample": equal). Eqs. (8)-(9) as
    printed (``all``) with the printed epistemic term give the 2-class client 5/6 of it."""
    narrow = _record(*_alphas(2, 20, 10.0, 1.0), kind)
    wide = _record(*_alphas(10, 4, 10.0, 1.0), kind)
    for average in ("seen", "sample"):
        w = evidential_weights([narrow, wide], average=average, samples=np.array([40.0, 40.0]))
        assert w[1] >= w[0] - 1e-9 and w.tolist() == pytest.approx([0.5, 0.5])
    narrow_h, wide_h = _record(*_alphas(2, 20, 10.0, 1.0), "entropy"), _record(*_alphas(10, 4, 10.0, 1.0), "entropy")
    literal = evidential_weights([narrow_h, wide_h], average="all")
    assert literal.tolist() == pytest.approx([5 / 6, 1 / 6])


def test_ea_with_sample_counts_scales_with_them():
    a = _record(*_alphas(10, 4, 10.0, 1.0))
    w = evidential_weights([a, a], samples=np.array([10.0, 30.0]))
    assert w.tolist() == pytest.approx([0.25, 0.75])
    assert evidential_weights([a, a]).tolist() == pytest.approx([0.5, 0.5])


def test_per_class_comparison_judges_a_client_against_the_holders_of_its_classes():
    """``compare="per_class"``: a class only one client holds, or one the model is unsure of for
    every holder, does not cost its holder weight; uncertainty above its peers' on the same
    classes does. Pooled (as printed), the client holding the hard classes loses weight."""
    easy = _record(*_alphas(5, 8, 30.0, 0.5))                 # classes 0-4, confident
    hard_alone = _record(*_alphas(5, 8, 3.0, 1.5, first=5))    # classes 5-9, held by no one else, unsure
    pooled = evidential_weights([easy, hard_alone])
    per_class = evidential_weights([easy, hard_alone], compare="per_class")
    assert pooled[1] < 0.2 and per_class.tolist() == pytest.approx([0.5, 0.5])
    # two holders of the same classes: the more uncertain one gets less, the more confident more
    peer = _record(*_alphas(5, 8, 3.0, 1.5))
    w = evidential_weights([easy, peer, hard_alone], compare="per_class")
    assert w[0] > w[2] > w[1]
    with pytest.raises(ValueError, match="per-class comparison combines classes by 'seen' or 'sample'"):
        evidential_weights([easy, peer], compare="per_class", average="all")


@pytest.mark.parametrize("compare", ["pooled", "per_class"])
def test_q_over_all_classes_favours_the_client_that_covers_more_of_them(compare):
    """``q_average="all"``: eq. (8)'s Q = (1/N) sum over all N classes, an unseen class counting
    q_i = 0 -- with the same evidence per sample, a client that has seen 10 classes gets 5 times
    the Q of one that has seen 2 ("to prevent biased local data from dominating"), while the
    uncertainty ratios stay per sample (equal here)."""
    narrow = _record(*_alphas(2, 20, 10.0, 1.0))
    wide = _record(*_alphas(10, 4, 10.0, 1.0))
    w = evidential_weights([narrow, wide], samples=np.array([40.0, 40.0]), average="sample", compare=compare,
                           q_average="all")
    assert w.tolist() == pytest.approx([1 / 6, 5 / 6])
    same = evidential_weights([narrow, wide], samples=np.array([40.0, 40.0]), average="sample", compare=compare)
    assert same.tolist() == pytest.approx([0.5, 0.5])
