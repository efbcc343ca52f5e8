"""SuperSFL's equations on hand-computed values (eq. 1, 3-4 with clipping, 6, 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from raysfl.algorithms.super_sfl.allocation import allocate_depths
from raysfl.algorithms.super_sfl.collaborative_aggregation import client_weights, consensus_average
from raysfl.algorithms.super_sfl.tpgf import client_weight, clip_l2, fuse, fused_loss


def test_eq1_allocation_with_clamps():
    # latencies 0.02..0.2 s: lat_min 0.02, lat_max 0.2 (span 0.18)
    mem = [2.0, 16.0, 7.0, 9.9, 1.0]
    lat = [0.2, 0.02, 0.11, 0.065, 0.2]
    d = allocate_depths(mem, lat, num_layers=10, alpha=0.5, beta=4.0)
    # c0: floor(1.0) + floor(4*0/0.18) = 1;  c1: floor(8) + floor(4*1) = 12 -> clamp L-1 = 9
    # c2: floor(3.5)=3 + floor(4*0.09/0.18)=floor(2)=... (2 - tiny eps) -> 1  => 4
    # c3: floor(4.95)=4 + floor(4*0.135/0.18)=floor(3 - tiny) = 2 => 6
    # c4: floor(0.5)=0 + 0 = 0 -> clamp >= 1
    assert d.tolist() == [1, 9, 4, 6, 1]


def test_eq3_client_weight_and_ablation_modes():
    # d_i = 2, d_s = 6, L_client = 1.0, L_server = 3.0: depth term 0.25, loss term (1/1)/(1/1 + 1/3) = 0.75
    assert client_weight(2, 6, 1.0, 3.0) == pytest.approx(0.25 * 0.75)
    assert client_weight(2, 6, 1.0, 3.0, "no_loss") == pytest.approx(0.25)
    assert client_weight(2, 6, 1.0, 3.0, "no_depth") == pytest.approx(0.75)
    assert client_weight(2, 6, 1.0, 3.0, "equal") == 0.5
    with pytest.raises(ValueError, match="unknown fusion mode"):
        client_weight(2, 6, 1.0, 3.0, "half")
    # the fused loss used by aggregation: w*Lc + (1-w)*Ls = 0.1875*1 + 0.8125*3
    assert fused_loss(2, 6, 1.0, 3.0) == pytest.approx(0.1875 + 0.8125 * 3.0)


def test_clipping_to_l2_norm():
    g = [torch.tensor([3.0, 0.0]), torch.tensor([[4.0]])]  # norm 5
    c = clip_l2(g, 0.5)
    assert math.isclose(float(torch.sqrt(sum((x ** 2).sum() for x in c))), 0.5, rel_tol=1e-6)
    assert c[0].tolist() == pytest.approx([0.3, 0.0]) and c[1].tolist() == [[pytest.approx(0.4)]]
    small = [torch.tensor([0.1, 0.2])]
    assert clip_l2(small, 0.5)[0].tolist() == pytest.approx([0.1, 0.2])  # under the threshold: unchanged


def test_eq4_fusion():
    out = fuse([torch.tensor([1.0, 2.0])], [torch.tensor([3.0, -2.0])], 0.25)
    assert out[0].tolist() == pytest.approx([0.25 * 1 + 0.75 * 3, 0.25 * 2 - 0.75 * 2])


def test_eq6_client_weights():
    # depths 1, 3; losses 1.0, 0.5 -> depth 1/4, 3/4; inverse loss 1/3, 2/3
    np.testing.assert_allclose(client_weights([1, 3], [1.0, 0.5]), [0.25 * (1 / 3), 0.75 * (2 / 3)], rtol=1e-6)


def test_eq8_consensus_per_layer():
    s = lambda v: np.array([v], dtype=np.float32)  # noqa: E731
    server = {"blocks.0.w": s(10.0), "blocks.1.w": s(20.0), "blocks.2.w": s(30.0)}
    clients = [{"blocks.0.w": s(1.0)}, {"blocks.0.w": s(3.0), "blocks.1.w": s(5.0)}]
    out = consensus_average(clients, [0.25, 0.75], server, lam=0.01)
    # layer 0: (0.25*1 + 0.75*3 + 0.01*10) / (1 + 0.01); layer 1: (0.75*5 + 0.01*20) / 0.76; layer 2: server's
    assert out["blocks.0.w"][0] == pytest.approx((0.25 + 2.25 + 0.1) / 1.01)
    assert out["blocks.1.w"][0] == pytest.approx((3.75 + 0.2) / 0.76)
    assert out["blocks.2.w"][0] == 30.0
