"""GAPSL's equations on hand values: LGI (eqs. 1-4), GDA's selection (eqs. 5-6, Alg. 2), the
server's gradient of eq. 8 under footnote 6, and eq. 7 by double back-propagation against
torch.autograd's own second derivatives."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raysfl.algorithms.gapsl import gda
from raysfl.algorithms.gapsl.lgi import consistency_scores, leader_gradient, selection_ratio
from raysfl.angles import mean_pairwise_angle
from raysfl.models import build_model
from raysfl.server_steps import _batch_stats_only, per_client_gradients

PI = math.pi
G3 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # pairwise angles: pi/2, pi/4, pi/4


def test_eq1_consistency_scores():
    assert consistency_scores(G3).tolist() == pytest.approx([3 * PI / 8, 3 * PI / 8, PI / 4])
    assert mean_pairwise_angle(G3) == pytest.approx((PI / 2 + PI / 4 + PI / 4) / 3)


def test_eq2_selection_ratio_with_running_min_max():
    # K = 0.2 + t/T * (nu_max - nu)/(nu_max - nu_min) * (0.8 - 0.2) = 0.2 + 0.5 * 0.5 * 0.6
    assert selection_ratio(0.3, 0.1, 0.5, t=5, total=10) == pytest.approx(0.35)
    assert selection_ratio(0.3, 0.1, 0.5, t=5, total=10, time_scaling=False) == pytest.approx(0.5)  # Alg. 1
    assert selection_ratio(0.3, 0.3, 0.3, t=10, total=10) == pytest.approx(0.2)  # 0/0 -> K_min
    nu = float(consistency_scores(G3).std(unbiased=False))
    _, _, k, rng = leader_gradient(G3, 10, 10, None)
    assert rng == (pytest.approx(nu), pytest.approx(nu)) and k == pytest.approx(0.2)
    _, _, k, rng = leader_gradient(G3, 10, 10, (nu / 2, 2 * nu))
    assert rng == (pytest.approx(nu / 2), pytest.approx(2 * nu))
    assert k == pytest.approx(0.2 + (2 * nu - nu) / (2 * nu - nu / 2) * 0.6)


def test_eq3_eq4_leader_gradient():
    # nu = 0.185, range (0, 1): K = 0.2 + 0.5 * 0.815 * 0.6 = 0.44 -> ceil(0.44 * 3) = 2 clients:
    # client 2 (score pi/4), then client 0 (tied with 1 at 3pi/8; the lower index wins)
    lead, chosen, k, _ = leader_gradient(G3, 5, 10, (0.0, 1.0), k_min=0.2, k_max=0.8)
    nu = float(consistency_scores(G3).std(unbiased=False))
    assert k == pytest.approx(0.2 + 0.5 * (1.0 - nu) / 1.0 * 0.6) and math.ceil(k * 3) == 2
    assert chosen == [0, 2] and lead.tolist() == pytest.approx([1.0, 0.5])
    lead_all, chosen_all, _, _ = leader_gradient(G3, 5, 10, None, mode="none")  # Non-LGI
    assert chosen_all == [0, 1, 2] and lead_all.tolist() == pytest.approx([2 / 3, 2 / 3])
    _, chosen_rand, _, _ = leader_gradient(G3, 5, 10, (0.0, 1.0), mode="random", rng=np.random.default_rng(0))
    assert len(chosen_rand) == 2  # Rand-LGI: the size LGI would pick


def test_eq5_angles_to_leader():
    lead = torch.tensor([1.0, 0.5])
    want = [math.acos(1 / math.sqrt(1.25)), math.acos(0.5 / math.sqrt(1.25)), math.acos(1.5 / math.sqrt(2.5))]
    assert gda.angles_to_leader(G3, lead).tolist() == pytest.approx(want)


def test_eq6_threshold_and_both_clips():
    a = torch.tensor([0.2, 0.4, 0.9], dtype=torch.float64)
    mu, sd = 0.5, float(np.std([0.2, 0.4, 0.9]))
    assert gda.angular_threshold(a, 0.5) == pytest.approx(mu - 0.5 * sd)
    assert gda.angular_threshold(a, 10.0) == 0.0                                   # clipped below at 0
    assert gda.angular_threshold(torch.tensor([3.0, 3.0], dtype=torch.float64), 0.0) == pytest.approx(PI / 2)


def test_algorithm_2_selection_and_its_ablations():
    lead = torch.tensor([1.0, 0.5])
    angles = gda.angles_to_leader(G3, lead)  # 0.464, 1.107, 0.322 rad: mean 0.631, std 0.342
    th = gda.angular_threshold(angles, 0.5)  # 0.631 - 0.171 = 0.460: only client 2 is within
    kept, th2, _ = gda.select(G3, lead, [0, 2], eta=0.5)
    assert th2 == pytest.approx(th) and kept == [i for i in range(3) if float(angles[i]) <= th] == [2]
    assert gda.select(G3, lead, [0, 2], eta=0.0)[0] == [0, 2]                    # eta 0: within the mean
    assert gda.select(G3, lead, [0, 2], eta=0.5, mode="none")[0] == [0, 2]       # Non-GDA: the leader set
    rand, _, _ = gda.select(G3, lead, [0, 2], 0.5, "random", np.random.default_rng(1))
    assert len(rand) == 1                                                        # Rand-GDA: as many as S^
    assert gda.select(G3, lead, [0, 2], eta=50.0)[0] == []                       # threshold 0: nobody


def test_eq8_server_gradient_is_the_sum_over_s_hat():
    assert gda.loss_gradient(G3, [0, 2]).tolist() == [2.0, 1.0]
    assert gda.loss_gradient(G3, [0, 2], "mean").tolist() == [1.0, 0.5]
    assert gda.loss_gradient(G3, []).tolist() == [0.0, 0.0]  # an empty sum


def test_the_update_is_homogeneous_in_the_gradients_small_or_large():
    """Late in training the gradients are small. Under footnote 6 the selection depends only
    on angles and the update is the sum of the selected gradients, so shrinking every
    gradient by 1e-6 shrinks the update by exactly 1e-6 -- no term of size lambda / |g| (the
    old gradient-space alignment step, whose relative size grew to 0.4 late in training)."""
    gen = torch.Generator().manual_seed(0)
    g = torch.randn(8, 200, generator=gen, dtype=torch.float64)
    for scale in (1.0, 1e-6):
        lead, leaders, _, _ = leader_gradient(g * scale, 5, 10, (0.0, 1.0))
        kept, _, _ = gda.select(g * scale, lead, leaders, eta=0.5)
        update = gda.loss_gradient(g * scale, kept)
        if scale == 1.0:
            ref_kept, ref_update = kept, update
    assert kept == ref_kept and torch.allclose(update, ref_update * 1e-6, rtol=1e-12, atol=0)


def test_regularizer_coefficients_are_the_gradient_of_eq7_with_respect_to_each_g():
    """c_j = d/dg_j lambda * sum_{i in S^} (1 - cos(g_i, g_lead)), g_lead = mean of the leaders: by hand
    for two 2-D gradients, and by finite differences."""
    g = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float64)
    lam = 0.5
    # leader = g_0 only, S^ = {1}: d/dg_1 (1 - cos) = -(lead/(|g1||lead|) - cos * g1/|g1|^2) = -(1/2, 0)
    c = gda.regularizer_coefficients(g, [0], [1], lam)
    assert c[1].tolist() == pytest.approx([-lam * 0.5, 0.0])
    # and through the leader: d/dg_0 (1 - cos(g_1, g_0)) = -(g1/(|g1||g0|) - cos * g0/|g0|^2) = -(0, 1)
    assert c[0].tolist() == pytest.approx([0.0, -lam * 1.0])
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    leaders, kept = [0, 2], [0, 1, 2]

    def reg(x):
        lead = x[leaders].mean(0)
        return sum(lam * (1 - float(x[i] @ lead) / float(x[i].norm() * lead.norm())) for i in kept)

    c = gda.regularizer_coefficients(g, leaders, kept, lam)
    for j in range(4):
        for d in range(5):
            e = torch.zeros_like(g)
            e[j, d] = 1e-6
            assert float(c[j, d]) == pytest.approx((reg(g + e) - reg(g - e)) / 2e-6, abs=1e-6)
    assert gda.regularizer_coefficients(g, leaders, kept, 0.0).abs().sum() == 0  # lambda 0: nothing


def test_eq7_second_order_equals_double_backprop_through_autograd():
    """The regulariser's gradient with respect to the server-side parameters and every client's
    smashed data, from the batched reverse-over-reverse pass, against create_graph=True."""
    from raysfl.algorithms.gapsl.second_order import regularizer_gradients

    torch.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    cut, lam, leaders, kept = 1, 0.3, [0, 2], [0, 1, 2]
    batches = []
    for c, n in enumerate([5, 5, 5, 3]):  # client 3 is in neither set: no term
        with torch.no_grad():
            a = model.part(0, cut)(torch.randn(n, 1, 8, 8))
        batches.append((c, cut, a, torch.randint(0, 10, (n,))))
    grads, _, _, names, _ = per_client_gradients(model, batches)
    reg, reg_act = regularizer_gradients(model, batches, names,
                                         gda.regularizer_coefficients(grads, leaders, kept, lam))
    part = model.part(cut, model.num_blocks)
    params = [dict(part.named_parameters())[n] for n in names]
    xs = [b[2].clone().requires_grad_(True) for b in batches]
    flat = []
    with _batch_stats_only(part):
        for (_, _, _, y), x in zip(batches, xs):
            g = torch.autograd.grad(F.cross_entropy(part(x), y), params, create_graph=True)
            flat.append(torch.cat([t.reshape(-1) for t in g]))
    lead = torch.stack([flat[i] for i in leaders]).mean(0)
    total = sum(lam * (1 - flat[i] @ lead / (flat[i].norm() * lead.norm())) for i in kept)
    want = torch.autograd.grad(total, params + xs, allow_unused=True)
    assert torch.allclose(reg, torch.cat([t.reshape(-1) for t in want[:len(params)]]), atol=1e-6, rtol=1e-4)
    for c in range(3):
        assert torch.allclose(reg_act[c], want[len(params) + c], atol=1e-8, rtol=1e-4)
    assert 3 not in reg_act and want[-1] is None
