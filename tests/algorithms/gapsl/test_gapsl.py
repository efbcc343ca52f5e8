"""GAPSL: LGI (eqs. 1-4) and GDA (eqs. 5-8) by hand on small vectors, the batched
per-client gradients against one backward per client, the server step, and a run."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raysfl.algorithms.gapsl.gda import alignment_step, angles_to_leader, angular_threshold, server_update
from raysfl.algorithms.gapsl.lgi import (consistency_scores, leader_gradient, mean_pairwise_angle,
                                         selection_ratio)
from raysfl.errors import ConfigError
from raysfl.models import build_model
from raysfl.server_steps import per_client_gradients

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
    # the running range is carried from call to call (Alg. 1, lines 8-9)
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
    assert angles_to_leader(G3, lead).tolist() == pytest.approx(want)


def test_eq6_threshold_and_both_clips():
    a = torch.tensor([0.2, 0.4, 0.9], dtype=torch.float64)
    mu, sd = 0.5, float(np.std([0.2, 0.4, 0.9]))
    assert angular_threshold(a, 0.5) == pytest.approx(mu - 0.5 * sd)
    assert angular_threshold(a, 10.0) == 0.0                                   # clipped below at 0
    assert angular_threshold(torch.tensor([3.0, 3.0], dtype=torch.float64), 0.0) == pytest.approx(PI / 2)  # above


def test_eq7_first_order_alignment_reduces_the_angle():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        g, lead = torch.randn(50, generator=gen), torch.randn(50, generator=gen)
        before = float(angles_to_leader(g[None], lead)[0])
        step = alignment_step(g, lead, 0.05 * float(g.norm()) ** 2) - g
        assert abs(float(step @ g)) < 1e-4 * float(g.norm()) * float(step.norm()) + 1e-6  # orthogonal to g
        after = float(angles_to_leader(alignment_step(g, lead, 0.05 * float(g.norm()) ** 2)[None], lead)[0])
        assert after < before


def test_eq8_server_update_sums_the_aligned_selected_gradients():
    lead = torch.tensor([1.0, 0.5])
    angles = angles_to_leader(G3, lead)
    th = angular_threshold(angles, 0.5)
    keep = [i for i in range(3) if float(angles[i]) <= th]
    update, used, th2, _ = server_update(G3, lead, [0, 2], eta=0.5, lam=0.1)
    assert used == keep and th2 == pytest.approx(th) and keep  # the least deviating client(s)
    want = sum(alignment_step(G3[i], lead, 0.1) for i in keep)
    assert update.tolist() == pytest.approx(want.tolist())
    mean_update, _, _, _ = server_update(G3, lead, [0, 2], eta=0.5, lam=0.1, reduction="mean")
    assert mean_update.tolist() == pytest.approx((want / len(keep)).tolist())
    lead_only, used_none, _, _ = server_update(G3, lead, [0, 2], eta=0.5, lam=0.1, mode="none")  # Non-GDA
    assert used_none == [0, 2] and lead_only.tolist() == pytest.approx((2 * lead).tolist())
    _, used_rand, _, _ = server_update(G3, lead, [0, 2], 0.5, 0.1, mode="random", rng=np.random.default_rng(1))
    assert len(used_rand) == len(keep)  # Rand-GDA: as many as the threshold keeps
    empty, none_kept, _, _ = server_update(G3, lead, [0, 2], eta=50.0, lam=0.1)
    assert none_kept == [] and empty.abs().sum() == 0  # every angle above a zero threshold


@pytest.mark.parametrize("name,shape", [("cnn", (1, 8, 8)), ("vit", (1, 8, 8)), ("vgg16", (3, 32, 32))])
def test_batched_per_client_gradients_equal_one_backward_per_client(name, shape):
    """vmap over clients == a separate backward pass per client (BatchNorm on each client's
    own batch statistics, as in such a pass), parameters and smashed-data gradients alike."""
    from raysfl.server_steps import _batch_stats_only

    torch.manual_seed(0)
    model = build_model(name, shape, 10, seed=0)
    model.train()
    cut = 2
    batches = []
    for c, n in enumerate([6, 6, 6, 4]):  # two batch sizes: two vmap groups
        with torch.no_grad():
            a = model.part(0, cut)(torch.randn(n, *shape))
        batches.append((c, cut, a, torch.randint(0, 10, (n,))))
    stats_before = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    grads, act, losses, names, has_bn = per_client_gradients(model, batches)
    assert has_bn == (name == "vgg16")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in stats_before.items())  # running stats untouched
    part = model.part(cut, model.num_blocks)
    params = dict(part.named_parameters())
    for i, (c, _, a, y) in enumerate(batches):
        a = a.clone().requires_grad_(True)
        with _batch_stats_only(part):
            loss = F.cross_entropy(part(a), y)
        gs = torch.autograd.grad(loss, [params[n] for n in names] + [a])
        ref = torch.cat([g.reshape(-1) for g in gs[:-1]])
        assert torch.allclose(grads[i], ref, atol=1e-5, rtol=1e-4)
        assert torch.allclose(act[c], gs[-1], atol=1e-5, rtol=1e-4)
        assert losses[c] == pytest.approx(float(loss.detach()), abs=1e-5)


def _gapsl(**params):
    import raysfl
    from raysfl.algorithms.gapsl.algorithm import GAPSL
    from raysfl.resolve import validate

    cfg = validate(raysfl.config_from_kwargs(algo="gapsl", momentum=0.0, server_lr=0.1, rounds=10, gapsl=params))
    return GAPSL(cfg)


def test_server_step_updates_from_lgi_and_gda_and_returns_each_clients_gradient():
    from raysfl.runtime.server_actor import ServerState

    algo = _gapsl(gda_lambda=0.01)
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    state = ServerState(model, torch.optim.SGD(model.parameters(), lr=0.1), "cpu")
    state.round = 4
    gen = torch.Generator().manual_seed(1)
    batches = []
    for c in range(5):
        with torch.no_grad():
            a = model.part(0, 2)(torch.randn(8, 1, 8, 8, generator=gen))
        batches.append((c, 2, a, torch.randint(0, 10, (8,), generator=gen)))
    ref = copy.deepcopy(model)
    grads, act_ref, _, names, _ = per_client_gradients(ref, batches)
    lead, leaders, k, _ = leader_gradient(grads, 4, 10, None)
    update, used, _, _ = server_update(grads, lead, leaders, 0.5, 0.01)
    act, losses = algo.server_step(state, batches)
    for c in range(5):
        assert torch.allclose(act[c], act_ref[c])  # every client, selected or not, gets its own gradient
    def flat(m):
        params = dict(m.part(2, m.num_blocks).named_parameters())
        return torch.cat([params[n].detach().reshape(-1) for n in names])

    flat_before, flat_after = flat(ref), flat(model)
    assert torch.allclose(flat_after, flat_before - 0.1 * update, atol=1e-6)
    assert 0 < len(used) <= 5 and state.metrics["lgi_k"] == [pytest.approx(k)]
    assert state.metrics["gda_kept"] == [pytest.approx(len(used) / 5)]


def test_gapsl_and_psl_runs_record_gradient_angles(quick):
    import raysfl

    g = raysfl.run(quick(algo="gapsl", partition="dirichlet", alpha=0.3, lr=0.05))
    p = raysfl.run(quick(algo="psl", partition="dirichlet", alpha=0.3, grad_angles=True))
    v1 = raysfl.run(quick(algo="splitfed_v1", grad_angles=True))
    for res in (g, p, v1):
        assert all(0 < r["grad_angle_deg"] < 180 for r in res.metrics)
    assert all(0.2 <= r["lgi_k"] <= 0.8 and 0 < r["gda_kept"] <= 1 for r in g.metrics)
    assert all(math.isfinite(r["test_accuracy"]) for r in g.metrics)


@pytest.mark.parametrize("params,match", [
    ({"lgi": "best"}, "unknown lgi 'best'; allowed: lgi, none, random"),
    ({"gda": "x"}, "unknown gda 'x'; allowed: gda, none, random"),
    ({"k_min": 0.9, "k_max": 0.5}, "need 0 < k_min <= k_max <= 1, got k_min=0.9, k_max=0.5"),
    ({"gda_eta": -1}, "gda_eta must be a finite number >= 0, got -1"),
    ({"gda_reduction": "max"}, "unknown gda_reduction 'max'; allowed: sum, mean"),
])
def test_bad_gapsl_settings_are_refused(params, match):
    with pytest.raises(ConfigError, match=match):
        _gapsl(**params)
