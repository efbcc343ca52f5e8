"""SuperSFL wired into the runtime: shared super-network on the server, TPGF and fallback on
the client, the server-loss fallback in a real run, availability schedules in both modes,
aggregation and evaluation on the fed server, measured allocation, and that it learns.
(The equations themselves are checked by hand in test_super_sfl_math.py.)"""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raysfl.algorithms.roles import ClientRound, FederationContext, PerClientServer, Reply
from raysfl.algorithms.super_sfl.algorithm import TPGFRound
from raysfl.algorithms.super_sfl.planner import available_rounds
from raysfl.algorithms.super_sfl.spec import SuperSFL
from raysfl.config import round_set
from raysfl.algorithms.super_sfl.tpgf import clip_l2, client_weight
from raysfl.errors import ConfigError
from raysfl.models import build_model
from raysfl.models.heads import client_classifier
from raysfl.transport import ClientRoundStats


def _cfg(**params):
    import raysfl

    cfg = raysfl.config_from_kwargs(algo="super_sfl", super_sfl=params)
    from raysfl.resolve import validate

    return validate(cfg)


def _ctx(num_blocks: int = 8) -> FederationContext:
    """A federation whose model has ``num_blocks`` blocks (what the roles read of it)."""
    return FederationContext(4, num_blocks, list(range(1, num_blocks)), np.full(4, 50), np.ones((4, 10)), [],
                             [1] * num_blocks, num_classes=10)


def _role(num_blocks: int = 8, **params):
    """SuperSFL's client role (TPGF) on a model of ``num_blocks`` blocks."""
    return SuperSFL.client(_cfg(**params), _ctx(num_blocks), None)


def _planner(**params):
    return SuperSFL.make_planner(_cfg(**params))


def test_server_layers_are_shared_between_depths():
    """A depth-2 client's step and a depth-4 client's step update the SAME tensors of the one
    server-side model (no per-depth copies): blocks 4..L-1 move in both steps."""
    torch.manual_seed(0)
    model = build_model("vit", (1, 8, 8), 10, seed=0)
    srv = SuperSFL.server(_cfg(), _ctx(model.num_blocks), None, model, "cpu")
    srv.opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(6, 1, 8, 8)
    y = torch.randint(0, 10, (6,))

    def smashed(depth):
        with torch.no_grad():
            return model.part(0, depth)(x)

    def step(client, depth):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
        srv.step([(client, depth, smashed(depth), y)])
        assert {n: p.data_ptr() for n, p in model.named_parameters()} == ptrs  # updated in place
        return {n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())}

    moved_2, moved_4 = step(0, 2), step(1, 4)
    block = lambda n: int(n.split(".")[1])  # noqa: E731
    assert {block(n) for n in moved_2} == set(range(2, 8))
    assert {block(n) for n in moved_4} == set(range(4, 8))
    shared = moved_2 & moved_4
    assert shared == {n for n in moved_4} and {block(n) for n in shared} == set(range(4, 8))
    assert not isinstance(srv, PerClientServer) and not getattr(srv, "client_models", None)  # one model, every depth


def _client(depth=2, lr=0.1, seed=0):
    torch.manual_seed(seed)
    model = build_model("vit", (1, 8, 8), 10, seed=seed)
    part = copy.deepcopy(model.part(0, depth))
    with torch.no_grad():
        shape = tuple(part(torch.zeros(1, 1, 8, 8)).shape[1:])
    head = client_classifier(shape, 10)
    return ClientRound(0, depth, 1, 8, 0, part, torch.optim.SGD(part.parameters(), lr=lr), {},
                       ClientRoundStats(client=0, cut=depth), round=1, local=False, fwd_flops=0.0, head=head,
                       head_opt=torch.optim.SGD(head.parameters(), lr=lr), state=TPGFRound())


def test_tpgf_client_step_is_eqs_3_and_4():
    """Phase 1 steps the classifier on the local loss; phase 3 steps the encoder on
    w * clip(g_client) + (1 - w) * g_server with w from eq. (3)."""
    role = _role()
    a = _client(depth=2)
    ref = copy.deepcopy(a)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    grad_at_cut = torch.randn(8, *ref.part(x).shape[1:]) * 0.1
    server_loss = 1.7

    # by hand, on the copy
    enc, head = list(ref.part.parameters()), list(ref.head.parameters())
    acts = ref.part(x)
    loss_c = F.cross_entropy(ref.head(acts), y)
    g_all = torch.autograd.grad(loss_c, enc + head, retain_graph=True)
    g_c = clip_l2(list(g_all[:len(enc)]), 0.5)
    g_s = torch.autograd.grad(acts, enc, grad_outputs=grad_at_cut)
    w = client_weight(2, 6, float(loss_c.detach()), server_loss, "full")
    want_enc = [p.detach() - 0.1 * (w * gc + (1 - w) * gs) for p, gc, gs in zip(enc, g_c, g_s)]
    want_head = [p.detach() - 0.1 * g for p, g in zip(head, g_all[len(enc):])]

    acts = a.part(x)
    role.forward(a, acts, y)
    for p, want in zip(a.head.parameters(), want_head):
        torch.testing.assert_close(p.detach(), want)
    role.backward(a, acts, Reply(grad_at_cut, {"loss": server_loss}))
    for p, want in zip(a.part.parameters(), want_enc):
        torch.testing.assert_close(p.detach(), want)
    assert 0 < w < 2 / 8  # depth term 2/8 times a loss ratio < 1
    report = role.report(a)
    assert report["depth"] == 2 and report["loss_server"] == pytest.approx(server_loss)
    assert report["w_client"] == pytest.approx(w)
    # the logged TPGF figures: w_client, the clipped and raw local norms, the server gradient's norm
    m = a.stats.metrics
    assert m["tpgf_w_client"] == [pytest.approx(w)]
    assert m["grad_norm_local"] == [pytest.approx(float(torch.sqrt(sum((g ** 2).sum() for g in g_c))))]
    raw = float(torch.sqrt(sum((g ** 2).sum() for g in g_all[:len(enc)])))
    assert m["grad_norm_local_raw"] == [pytest.approx(raw, rel=1e-5)]
    assert m["grad_norm_server"] == [pytest.approx(float(torch.sqrt(sum((g ** 2).sum() for g in g_s))))]
    assert m["grad_norm_local"][0] <= 0.5 + 1e-6 and (raw <= 0.5 or m["grad_norm_local"][0] == pytest.approx(0.5))


def test_gradients_mode_ignores_the_server_gradient_in_rounds_without_it():
    """availability_mode=gradients (the default): in a round without server gradients the
    client's step is Alg. 3's local step whatever gradient the server sent, it counts as a
    fallback step, and the client enters eq. (6) with its client loss alone."""
    role = _role(availability_rounds="1")
    a = _client(depth=2)
    a.round = 2  # not in the schedule: no server gradients this round
    ref = copy.deepcopy(a)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    enc = list(ref.part.parameters())
    loss_c = F.cross_entropy(ref.head(ref.part(x)), y)
    g = clip_l2(list(torch.autograd.grad(loss_c, enc)), 0.5)
    acts = a.part(x)
    role.forward(a, acts, y)
    role.backward(a, acts, Reply(torch.randn_like(acts), {"loss": 0.3}))  # a gradient that arrived, to be ignored
    for p, r, gi in zip(a.part.parameters(), enc, g):
        torch.testing.assert_close(p.detach(), r.detach() - 0.1 * gi)
    assert a.stats.fallback_steps == 1 and a.stats.loss_count == 0  # the server counted this batch's loss
    report = role.report(a)
    assert report["loss_server"] is None and report["w_client"] is None
    assert report["loss"] == pytest.approx(float(loss_c.detach()))
    assert "tpgf_w_client" not in a.stats.metrics and "grad_norm_local" in a.stats.metrics
    # in a round with server gradients the same call fuses; server mode never ignores a gradient
    b = _client(depth=2)
    b.round = 1
    acts = b.part(x)
    role.forward(b, acts, y)
    role.backward(b, acts, Reply(torch.zeros_like(acts), {"loss": 0.3}))
    assert b.stats.fallback_steps == 0 and role.report(b)["w_client"] is not None
    server_mode, gradients_mode = (_planner(availability_rounds="1", availability_mode="server"),
                                   _planner(availability_rounds="1"))
    assert server_mode.servers_down(2) == {0} and gradients_mode.servers_down(2) == set()
    assert server_mode.servers_down(1) == set() == gradients_mode.servers_down(1)


@pytest.mark.parametrize("mode,expect", [("equal", 0.5), ("no_loss", 2 / 8)])
def test_tpgf_ablation_modes_reach_the_client(mode, expect):
    a = _client()
    role = _role(fusion=mode)
    x, y = torch.randn(4, 1, 8, 8), torch.randint(0, 10, (4,))
    acts = a.part(x)
    role.forward(a, acts, y)
    role.backward(a, acts, Reply(torch.zeros_like(acts), {"loss": 2.0}))
    assert role.report(a)["w_client"] == pytest.approx(expect)
    assert a.stats.metrics["tpgf_w_client"] == [pytest.approx(expect)]


def _report(role, depth, lc, ls=None):
    """The client role's report for a client whose round had mean client loss ``lc`` and, if it
    was supervised, mean server loss ``ls`` (one step each)."""
    x = TPGFRound(lc_sum=lc, n=1)
    if ls is not None:
        x.ls_sum, x.ns, x.w_sum, x.fused_steps, x.gn_server_sum = ls, 1, 0.1, 1, 1.0
    return role.report(SimpleNamespace(cut=depth, state=x, stats=ClientRoundStats(client=0, cut=depth)))


def test_fed_aggregate_wiring():
    """Classifiers stay with their clients; a client the server supervised enters eq. (6)
    with its eq. (3)-fused loss, a fallback-only one with its client loss; eq. (8) pulls each
    layer towards the server's copy (the servers' state of this round) with weight lambda;
    a layer no client holds is the server's copy; the main server gets the result."""
    from raysfl.algorithms.roles import ClientUpdate

    role = _role(num_blocks=4)
    v = lambda x: np.array([x], dtype=np.float32)  # noqa: E731
    agg = SuperSFL.aggregator(_cfg(), _ctx(4), None, {f"blocks.{i}.w": v(100.0) for i in range(4)})
    server = {f"blocks.{i}.w": v(10.0 * (i + 1)) for i in range(4)}  # this round's server-side copy
    # client 0: depth 2, supervised (client loss 1, server loss 3): eq. 3 weight 2/4 * 0.75 = 0.375,
    # fused loss 0.375 * 1 + 0.625 * 3 = 2.25; client 1: depth 1, fallback only, client loss 0.5
    r0, r1 = _report(role, 2, 1.0, 3.0), _report(role, 1, 0.5)
    assert r0["loss"] == pytest.approx(2.25) and r1["loss"] == pytest.approx(0.5)
    u0 = ClientUpdate(0, {"blocks.0.w": v(1.0), "blocks.1.w": v(2.0), "head.1.weight": v(7.0)}, 5.0, report=r0)
    u1 = ClientUpdate(1, {"blocks.0.w": v(3.0), "head.1.weight": v(8.0)}, 50.0, report=r1)
    out = agg.aggregate(1, [server], [u0, u1], {})
    # eq. 6: depth 2/3, 1/3 times inverse loss (1/2.25, 1/0.5) / (1/2.25 + 2)   (sample counts play no part)
    inv = np.array([1 / 2.25, 2.0])
    w0, w1 = 2 / 3 * inv[0] / inv.sum(), 1 / 3 * inv[1] / inv.sum()
    lam = 0.01
    assert out["blocks.0.w"][0] == pytest.approx((w0 * 1.0 + w1 * 3.0 + lam * 10.0) / (w0 + w1 + lam), rel=1e-5)
    assert out["blocks.1.w"][0] == pytest.approx((w0 * 2.0 + lam * 20.0) / (w0 + lam), rel=1e-5)
    assert out["blocks.2.w"][0] == 30.0 and out["blocks.3.w"][0] == 40.0  # held by no client: the server's
    assert not any(k.startswith("head.") for k in out) and out is agg.global_state
    assert agg.own == {0: {"head.1.weight": v(7.0)}, 1: {"head.1.weight": v(8.0)}}
    assert agg.state.depth == {0: 2, 1: 1}


def test_fed_evaluate_own_paths_on_the_balanced_test_set_and_on_their_label_mix():
    """acc_local: each client's own path (global prefix + its classifier) on the balanced test
    set; acc_local_own: the same model with each class weighted by the client's label mix.
    A classifier that always answers a client's only class is right on its own mix and
    right on one class in ten of the balanced set."""
    from raysfl.data import load_dataset
    from raysfl.runtime.fed_actor import ClientViews, Evaluator

    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    agg = SuperSFL.aggregator(_cfg(), _ctx(model.num_blocks), None,
                              {k: v.numpy().copy() for k, v in model.state_dict().items()})
    hist = np.zeros((2, 10), dtype=np.int64)
    hist[0, 3] = 50                      # client 0 holds only class 3
    hist[1] = [10, 0, 0, 0, 0, 0, 0, 0, 0, 10]   # client 1: classes 0 and 9
    for c, (depth, k) in enumerate([(1, 3), (2, 0)]):
        head = client_classifier(model.activation_shape(depth), 10, spatial=True)
        with torch.no_grad():
            head[-1].weight.zero_()
            head[-1].bias.zero_()
            head[-1].bias[k] = 1.0       # always class k
        agg.own[c] = {f"head.{n}": t.numpy().copy() for n, t in head.state_dict().items()}
        agg.state.depth[c] = depth
    agg.last_clients = [0, 1]
    ev = Evaluator(model, ds, "cpu", ClientViews([], hist))
    acc, _, extras = agg.evaluate(ev)
    share = [float(np.mean(ds.y_test == k)) for k in (3, 0)]
    assert extras["acc_local"] == pytest.approx(np.mean(share))
    assert extras["acc_local_std"] == pytest.approx(np.std(share))
    assert extras["acc_local_own"] == pytest.approx((1.0 + 0.5) / 2)  # client 1: right on class 0, wrong on 9
    assert acc == pytest.approx(ev(agg.global_state)[0])  # the super-network: all blocks of the global model


def test_spatial_classifier_keeps_the_layout_and_the_pooled_one_is_unchanged():
    from raysfl.models.heads import client_classifier as head

    assert head((32, 4, 4), 10, spatial=True)[-1].in_features == 32 * 16    # 4x4 maps: flattened as they are
    assert head((32, 14, 14), 10, spatial=True)[-1].in_features == 32 * 16  # pooled to 4x4 first
    assert head((64, 2, 2), 10, spatial=True)[-1].in_features == 64 * 4
    assert head((32, 14, 14), 10)[-1].in_features == 32                     # the default (BESplit's): GAP
    assert head((17, 64), 10, spatial=True)[-1].in_features == head((17, 64), 10)[-1].in_features == 64
    x = torch.zeros(2, 32, 4, 4)
    x[0, :, 0, 0], x[1, :, 3, 3] = 1.0, 1.0  # same channel means, different places
    torch.manual_seed(0)
    spatial, pooled = head((32, 4, 4), 10, spatial=True), head((32, 4, 4), 10)
    assert not torch.allclose(spatial(x)[0], spatial(x)[1]) and torch.allclose(pooled(x)[0], pooled(x)[1])
    role = _role()
    assert role.own_module(1, build_model("cnn", (1, 8, 8), 10, seed=0), 10)[-1].in_features == 32 * 16
    assert _role(classifier_head="pooled").own_module(1, build_model("cnn", (1, 8, 8), 10, seed=0),
                                                      10)[-1].in_features == 32


def test_fallback_step_uses_the_clipped_local_gradient_only():
    role = _role()
    a = _client()
    ref = copy.deepcopy(a)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,))
    enc = list(ref.part.parameters())
    g = clip_l2(list(torch.autograd.grad(F.cross_entropy(ref.head(ref.part(x)), y), enc)), 0.5)
    acts = a.part(x)
    role.forward(a, acts, y)
    assert role.fallback(a, acts)
    for p, r, gi in zip(a.part.parameters(), enc, g):
        torch.testing.assert_close(p.detach(), r.detach() - 0.1 * gi)
    assert a.stats.loss_count == 8  # a fallback step's local loss is the training loss
    assert role.report(a)["loss_server"] is None


def test_client_waits_at_most_the_timeout_then_falls_back(ray_session):
    """A server that does not answer within server_timeout_s: the client takes a fallback
    step instead of waiting (Alg. 3), and is not dropped from the round."""
    import ray

    import raysfl
    from raysfl.data import load_dataset
    from raysfl.resolve import validate
    from raysfl.runtime.client_actor import ClientActor
    from raysfl.runtime.planning import ClientPlan
    from raysfl.transport import state_to_wire

    cfg = validate(raysfl.config_from_kwargs(algo="super_sfl", clients=2, model="cnn", batch_size=8,
                                            super_sfl={"server_timeout_s": 0.5}))
    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    ctx = FederationContext(2, model.num_blocks, model.valid_cuts(), np.array([40, 40]), np.zeros((2, 10)), [],
                            model.block_flops(), num_classes=ds.num_classes)
    actor = ClientActor(0)
    actor.setup("test", cfg, SuperSFL, ctx, None, ds, {0: np.arange(40), 1: np.arange(40, 80)})
    plan = {0: ClientPlan(cut=2, steps=2, batch=8, stream_pos=0, lr=0.05, blocks=2, round=1)}
    actor.begin_round(plan, {"global": state_to_wire(model.state_dict()), "own": {}, "charged": []})
    actor.step(0, [0], {0: 0}, [])

    @ray.remote
    def silent_server():
        time.sleep(20)
        return {}

    t0 = time.perf_counter()
    actor.apply_grads([silent_server.remote()])
    waited = time.perf_counter() - t0
    a = actor.active[0]
    assert 0.4 < waited < 5, waited
    assert a.stats.fallback_steps == 1 and not a.failed and a.pending is None


# ~20 s: the main server killed and restarted; CI runs the slow tests (the fallback itself stays in the
# default suite: test_server_availability_schedule)
@pytest.mark.slow
def test_killed_main_server_clients_finish_in_fallback(quick):
    """The main server is killed mid-round: the clients finish the round on their local
    classifiers, nothing escapes, the round is not retried, and the metrics count it."""
    import raysfl
    from raysfl.metrics import read_rows

    cfg = quick(algo="super_sfl", model="cnn", rounds=3, local_steps=4, faults="kill:server:round=2:step=1",
                super_sfl={"server_timeout_s": 2.0})
    res = raysfl.run(cfg)
    rows = {r["round"]: r for r in res.metrics}
    assert rows[2]["failures"] >= 1 and rows[2]["retries"] == 0
    assert rows[2]["fallback_steps"] > 0 and rows[2]["fallbacks"] > 0
    assert rows[2]["completed"] == rows[2]["participants"] == 4
    assert rows[1]["fallback_steps"] == 0 and rows[3]["fallback_steps"] == 0  # the restarted server answers
    assert all(math.isfinite(r["test_accuracy"]) for r in res.metrics)
    clients = [r for r in read_rows(Path(res.run_dir) / "clients.parquet") if r["round"] == 2]
    assert sum(r["fallback_steps"] for r in clients) == rows[2]["fallback_steps"]


@pytest.mark.parametrize("mode", ["server", "gradients"])
def test_server_availability_schedule(quick, mode):
    """availability_rounds: in round 2 there are no server gradients, and every step is a
    fallback step. ``server`` mode: the server is off (no smashed data, no server work).
    ``gradients`` mode: the clients still send smashed data and the server still trains."""
    import raysfl

    res = raysfl.run(quick(algo="super_sfl", model="cnn", rounds=3,
                           super_sfl={"availability_rounds": "1,3", "availability_mode": mode}))
    rows = {r["round"]: r for r in res.metrics}
    assert [rows[r]["server_available"] for r in (1, 2, 3)] == [1.0, 0.0, 1.0]
    assert rows[2]["fallback_steps"] == 4 * 2 and rows[2]["fallbacks"] == 4
    assert (rows[2]["bytes_smashed_up"] > 0) == (rows[2]["server_flops"] > 0) == (mode == "gradients")
    assert math.isnan(rows[2]["tpgf_w_client"]) and math.isfinite(rows[2]["grad_norm_local"])
    assert rows[1]["fallback_steps"] == 0 and rows[1]["bytes_smashed_up"] > 0
    assert 0 < rows[1]["tpgf_w_client"] < 1 and rows[1]["grad_norm_server"] > 0
    assert rows[2]["completed"] == 4 and math.isfinite(rows[2]["train_loss"])
    assert all(math.isfinite(rows[r]["acc_local"]) and math.isfinite(rows[r]["acc_local_own"]) for r in (1, 2, 3))


def test_super_network_learns_without_server_gradients(quick):
    """Table III's 0 % column in the default (gradients) mode: the clients never get a server
    gradient, yet the server trains the deeper blocks on their smashed data, and the
    super-network learns far above chance (10 %)."""
    import raysfl

    res = raysfl.run(quick(algo="super_sfl", model="cnn", clients=4, rounds=6, local_steps=12, batch_size=32,
                           super_sfl={"server_availability": 0.0}))
    assert all(r["server_available"] == 0.0 for r in res.metrics)
    assert res.final["fallback_steps"] == 4 * 12
    assert res.final["test_accuracy"] >= 0.6, res.final["test_accuracy"]


def test_measured_allocation_probes_once_and_keeps_it(quick):
    import raysfl

    res = raysfl.run(quick(algo="super_sfl", rounds=1, super_sfl={"allocation": "measured"}))
    cal = json.loads((Path(res.run_dir) / "calibration.json").read_text())
    assert len(cal) == 4 and all(m > 0 and lat > 0 for m, lat in cal.values())
    clients = json.loads((Path(res.run_dir) / "clients.json").read_text())
    assert all(1 <= c["depth"] <= 7 and c["alloc_latency_s"] == cal[str(c["client"])][1] for c in clients)


def test_availability_fraction_and_schedule_parsing():
    assert round_set("1-3, 7") == {1, 2, 3, 7}
    up = available_rounds(0.3, 20, seed=1)
    assert len(up) == 6 and up <= set(range(1, 21)) and up == available_rounds(0.3, 20, seed=1)
    assert len(up & set(range(1, 11))) == 3  # exact in every block of 10 rounds
    assert up == available_rounds(0.3, 40, seed=1) & set(range(1, 21))  # does not depend on the run's length
    assert up != available_rounds(0.3, 20, seed=2)
    assert available_rounds(0.0, 10, 0) == set() and available_rounds(1.0, 10, 0) == set(range(1, 11))


@pytest.mark.parametrize("params,match", [
    ({"fusion": "mean"}, "unknown fusion 'mean'; allowed: full, no_loss, no_depth, equal"),
    ({"allocation": "guess"}, "unknown allocation 'guess'"),
    ({"server_availability": 1.5}, "server_availability must be a finite number in \\[0, 1\\], got 1.5"),
    ({"availability_rounds": "3-1"}, "availability_rounds must list rounds like '1-5,9', got '3-1'"),
    ({"server_timeout_s": 0}, "server_timeout_s must be a finite number > 0"),
    ({"clip_norm": -1}, "clip_norm must be a finite number > 0"),
    ({"availability_mode": "off"}, "unknown availability_mode 'off'; allowed: gradients, server"),
    ({"classifier_head": "mlp"}, "unknown classifier_head 'mlp'; allowed: spatial, pooled"),
])
def test_bad_super_sfl_settings_are_refused(params, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(**params)
