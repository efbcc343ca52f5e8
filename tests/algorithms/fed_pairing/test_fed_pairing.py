"""FedPairing wired into the runtime: the paired step against an autograd reference (eqs.
2-3, 7), labels that stay home, what crosses actor boundaries and how it is counted, the
aggregation rule against FedAvg, a run with partners on different actors, and learning."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raysfl.errors import ConfigError
from raysfl.models import build_model
from raysfl.transport import ClientRoundStats, GradReply, Smashed


def test_doubled_step_only_where_both_flows_reached_the_layer():
    """eq. 7: with plain SGD a block that both flows reached since the last step moves by
    2 * lr * its gradient, every other block by lr * gradient; with one flow only (the
    partner finished its steps, or a solo step) nothing is doubled; switched off, nothing
    is. ``doubled_layers`` records the count per update."""
    import raysfl
    from raysfl.algorithms.fed_pairing.algorithm import PeerClient, PeerRound
    from raysfl.algorithms.roles import ClientRound
    from raysfl.resolve import validate

    for double, own, theirs, want_doubled in [(True, range(0, 3), range(1, 4), [1, 2]),
                                              (True, range(0, 3), None, []),
                                              (True, None, range(1, 4), []),
                                              (False, range(0, 3), range(1, 4), [])]:
        model = build_model("cnn", (1, 8, 8), 10, seed=0)
        part = model.part(0, model.num_blocks)
        before = {n: p.detach().clone() for n, p in part.named_parameters()}
        for p in part.parameters():
            p.grad = torch.ones_like(p)
        a = ClientRound(0, 3, 1, 8, 0, part, torch.optim.SGD(part.parameters(), lr=0.1), {}, ClientRoundStats(0, 3),
                        state=PeerRound(own_flow=own, partner_flow=theirs))
        cfg = validate(raysfl.config_from_kwargs(algo="fed_pairing", fed_pairing={"double_overlap": double}))
        PeerClient(cfg, None)._step(a)
        for n, p in part.named_parameters():
            want = 0.2 if int(n.split(".")[1]) in want_doubled else 0.1
            assert torch.allclose(before[n] - p.detach(), torch.full_like(p, want)), (n, double, own, theirs)
        assert all(p.grad is None for p in part.parameters())
        assert a.stats.metrics == {"doubled_layers": [float(len(want_doubled))]}
        assert a.state.own_flow is None and a.state.partner_flow is None


def _walk(obj):
    """Every leaf object inside ``obj`` (dataclasses, dicts, lists, tuples)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk(v)
    elif hasattr(obj, "__dataclass_fields__"):
        for f in obj.__dataclass_fields__:
            yield from _walk(getattr(obj, f))
    else:
        yield obj


class _Pair:
    """Two in-process client actors hosting clients 0 and 1, partners of each other, driven
    through the four calls of a FedPairing step exactly as the federation wires them
    (payloads pass through the object store); every payload that crosses is kept."""

    def __init__(self, ray, cuts=(1, 3), weights=(0.3, 0.7), steps=1, double=True, lr=0.1, batch=8):
        import raysfl
        from raysfl.algorithms.fed_pairing.spec import FedPairing
        from raysfl.algorithms.fed_pairing.peer_exchange import PairPlan
        from raysfl.algorithms.roles import FederationContext
        from raysfl.data import load_dataset
        from raysfl.devices import sample_profiles
        from raysfl.resolve import validate
        from raysfl.runtime.client_actor import ClientActor
        from raysfl.runtime.planning import ClientPlan
        from raysfl.transport import state_to_wire

        self.ray = ray
        cfg = validate(raysfl.config_from_kwargs(algo="fed_pairing", model="cnn", clients=2, batch_size=batch, lr=lr,
                                                 fed_pairing={"double_overlap": double}))
        self.cfg, self.ds = cfg, load_dataset("digits")
        self.model = build_model("cnn", self.ds.input_shape, self.ds.num_classes, seed=0)
        ctx = FederationContext(2, self.model.num_blocks, self.model.valid_cuts(), np.array([40, 40]),
                                np.zeros((2, 10)), sample_profiles(2, cfg.devices, 0), self.model.block_flops(),
                                conv_blocks=self.model.leading_conv_blocks(), num_classes=self.ds.num_classes)
        planner = FedPairing.make_planner(cfg)
        planner.setup(ctx)
        self.parts = {0: np.arange(40), 1: np.arange(40, 80)}
        self.actors = [ClientActor(i) for i in (0, 1)]
        for i, actor in enumerate(self.actors):
            actor.setup("test", cfg, FedPairing, ctx, planner.shared(), self.ds, {i: self.parts[i]})
        self.global_state = state_to_wire(self.model.state_dict())
        models = {"global": self.global_state, "own": {}, "charged": [0, 1]}
        W = self.model.num_blocks
        for c in (0, 1):  # each holds the whole model; its partner runs the rest of its own flow
            pair = PairPlan(1 - c, list(range(cuts[1 - c] + 1, cuts[c] + 1)), weights[c])
            self.actors[c].begin_round({c: ClientPlan(cuts[c], steps, batch, 0, lr, blocks=W, round=1, role=pair)},
                                       models)
        self.crossed: list = []  # every payload that left one actor for the other
        self.steps = steps

    def _put(self, x):
        self.crossed.append(x)
        return self.ray.put(x)

    def run(self):
        a0, a1 = self.actors
        back = {0: [], 1: []}
        for s in range(self.steps):
            sent = {c: self.actors[c].call_role("pair_forward", s, [1 - c], {c: 1 - c}, back[c]) for c in (0, 1)}
            outs = {c: self.actors[1 - c].call_role("pair_serve", s, [self._put(sent[c])]) for c in (0, 1)}
            dl = {c: self.actors[c].call_role("pair_loss", s, [1 - c], {c: 1 - c}, [self._put(outs[c])])
                  for c in (0, 1)}
            back = {c: [self._put(self.actors[1 - c].call_role("pair_backward", s, [self._put(dl[c])]))]
                    for c in (0, 1)}
        self.results = {c: self.actors[c].end_round(back[c]) for c in (0, 1)}
        return self.results

    def batch(self, c, step=0):
        from raysfl.runtime.client_actor import sample_stream

        b = self.cfg.batch_size
        idx = sample_stream(self.parts[c], c, self.cfg.seed, step * b, b)
        return self.ds.to_tensor(self.ds.x_train[idx]), torch.from_numpy(self.ds.y_train[idx])


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("cuts", [(1, 3), (2, 2), (3, 1)])
def test_paired_step_matches_autograd_reference(ray_session, cuts, double):
    """Eqs. (2)-(3): after one paired step with plain SGD, client i's model is
    w - eta (w_i grad_{1..L_i} l_i + w_j grad_{L_j+1..W} l_j), both gradients taken on the
    whole model w by autograd; eq. (7) doubles the blocks in both ranges."""
    weights, lr = (0.3, 0.7), 0.1
    pair = _Pair(ray_session, cuts=cuts, weights=weights, double=double, lr=lr)
    (upd0, _), (upd1, _) = pair.run().values()
    W = pair.model.num_blocks
    grads = []
    for c in (0, 1):
        ref = build_model("cnn", pair.ds.input_shape, pair.ds.num_classes, seed=0)
        x, y = pair.batch(c)
        F.cross_entropy(ref(x), y).backward()
        grads.append({n: p.grad.detach().clone() for n, p in ref.named_parameters()})
    w0 = {n: p.detach().clone() for n, p in pair.model.named_parameters()}
    for c, upd in ((0, upd0), (1, upd1)):
        j = 1 - c
        state = upd[0].state
        for n, p0 in w0.items():
            k = int(n.split(".")[1])
            own, theirs = k < cuts[c], k >= cuts[j]
            g = weights[c] * grads[c][n] * own + weights[j] * grads[j][n] * theirs
            if double and own and theirs:
                g = 2 * g
            assert np.allclose(state[n], (p0 - lr * g).numpy(), atol=1e-6), (c, n, cuts, double)
        assert all(int(n.split(".")[1]) < W for n in state)


def test_several_paired_steps_match_a_sequential_reference(ray_session):
    """Three steps: in every step both flows run on both copies as updated by the step
    before (own prefix on the own copy, suffix on the partner's), then each copy takes one
    SGD step on everything it collected, eq. (7) doubling the blocks both flows reached."""
    cuts, weights, lr, steps = (1, 3), (0.4, 0.9), 0.1, 3
    pair = _Pair(ray_session, cuts=cuts, weights=weights, steps=steps, double=True, lr=lr)
    (upd0, _), (upd1, _) = pair.run().values()
    W = pair.model.num_blocks
    ref = [build_model("cnn", pair.ds.input_shape, pair.ds.num_classes, seed=0) for _ in (0, 1)]
    for s in range(steps):
        for c in (0, 1):
            x, y = pair.batch(c, s)
            out = ref[1 - c].part(cuts[c], W)(ref[c].part(0, cuts[c])(x))
            (weights[c] * F.cross_entropy(out, y)).backward()
        with torch.no_grad():
            for c in (0, 1):
                for n, p in ref[c].named_parameters():
                    k = int(n.split(".")[1])
                    both = k < cuts[c] and k >= cuts[1 - c]
                    if p.grad is not None:
                        p -= lr * (2 if both else 1) * p.grad
                        p.grad = None
    for c, upd in ((0, upd0), (1, upd1)):
        for n, p in ref[c].named_parameters():
            assert np.allclose(upd[0].state[n], p.detach().numpy(), atol=1e-5), (c, n)


def test_labels_stay_home_and_every_transfer_is_counted(ray_session):
    """No label array reaches the other client's actor: what crosses is activations (no
    labels), outputs, gradients (float arrays only); each direction of each transfer is in
    both clients' traffic."""
    pair = _Pair(ray_session, cuts=(1, 3), steps=2)
    results = pair.run()
    labels = {c: [pair.batch(c, s)[1].numpy() for s in range(2)] for c in (0, 1)}
    smashed = [x for x in _walk(pair.crossed) if isinstance(x, np.ndarray)]
    assert smashed and all(arr.dtype.kind == "f" for arr in smashed)  # no integer (label) array at all
    kinds = [type(v) for p in pair.crossed for v in (p.values() if isinstance(p, dict) else [p])]
    assert Smashed in kinds and GradReply in kinds
    assert all(v.labels is None for p in pair.crossed if isinstance(p, dict) for v in p.values()
               if isinstance(v, Smashed))
    for arr in smashed:
        for ys in labels.values():
            assert not any(arr.size == y.size and np.array_equal(arr.ravel().astype(np.int64), y) for y in ys)
    # bytes per step and client: activations at its cut up, outputs in, d(loss)/d(outputs) out, cut gradient in;
    # as a partner: the other's activations in, outputs out, d(loss)/d(outputs) in, cut gradient out
    b, n_cls = pair.cfg.batch_size, pair.ds.num_classes
    act = {c: b * 4 * int(np.prod(pair.model.part(0, (1, 3)[c])(pair.batch(c)[0]).shape[1:])) for c in (0, 1)}
    out = b * n_cls * 4
    for c in (0, 1):
        t = next(st for st in results[c][1] if st.client == c).traffic
        j = 1 - c
        assert t.smashed_up == 2 * act[c] and t.grad_down == 2 * act[c]
        assert t.other_down == 2 * (out + act[j] + out) and t.other_up == 2 * (out + out + act[j])
        # latency is charged per hop of the client's own flow (4 a step: smashed data out, outputs in, their
        # gradient out, the cut gradient in); its partner's 4 hops run at the same time and are the partner's
        assert t.messages == 1 + 2 * 4 + 1  # model down, 4 hops per step on the critical path, model up


def test_raw_samples_never_leave_the_client_actor(ray_session):
    """What a client actor hands to the other in a FedPairing round -- activations, outputs,
    gradients, updates -- holds no array of input-sample shape and no input sample's values."""
    pair = _Pair(ray_session, cuts=(1, 3))
    results = pair.run()
    raw = pair.ds.x_train[np.concatenate([pair.parts[0], pair.parts[1]])]
    upd = [u for c in (0, 1) for u in results[c][0]]
    assert {u.client for u in upd} == {0, 1}
    arrays = [x for x in _walk([pair.crossed, upd, results[0][1], results[1][1]]) if isinstance(x, np.ndarray)]
    assert arrays and all(arr.shape[1:] != raw.shape[1:] for arr in arrays if arr.ndim == raw.ndim)
    flat_rows = {row.tobytes() for row in raw.reshape(len(raw), -1).astype(np.float32)}
    for arr in arrays:
        if arr.ndim >= 2 and arr.dtype == np.float32:
            assert not any(r.tobytes() in flat_rows for r in arr.reshape(len(arr), -1))
    assert {k for u in upd for k in u.state} == set(pair.model.state_dict())  # updates: model parameters only
    sent = [p for p in pair.crossed if isinstance(p, dict) and any(isinstance(v, Smashed) and v.cut < 4
                                                                  for v in p.values())]
    assert sorted(v.cut for p in sent for v in p.values()) == [1, 3]  # activations at each client's own split


def _global(run_dir, rnd: int):
    """The global model after round ``rnd``, from the run's checkpoint."""
    from raysfl import checkpoint

    state = checkpoint._decode(torch.load(run_dir / "checkpoints" / f"round_{rnd:04d}.pt", weights_only=True))
    return state["federation"]["fed"]["global"]


def test_fedavg_weights_make_a_round_fedavg_and_paper_weights_divide_it_by_k(quick):
    """The aggregation rule (weighting.py). 3 IID clients of 479 digits each (one pair, one
    client alone), one local SGD step per round: with ``pair_weights=fedavg`` (loss weight
    K a_i, plain mean) and no doubled step, FedPairing's global model IS FedAvg's, round
    after round; with ``paper`` (a_i = 1/K, plain mean) the global step is FedAvg's / K."""
    import raysfl

    common = dict(clients=3, local_steps=1, lr=0.1, momentum=0.0, partition="iid", batch_size=16, model="cnn")
    fp = raysfl.run(quick(algo="fed_pairing", rounds=2, fed_pairing={"double_overlap": False}, **common))
    fa = raysfl.run(quick(algo="fedavg", rounds=2, **common))
    w0 = build_model("cnn", (1, 8, 8), 10, seed=0).state_dict()
    for rnd in (1, 2):
        g_fp, g_fa = _global(fp.run_dir, rnd), _global(fa.run_dir, rnd)
        assert set(g_fp) == set(g_fa)
        assert max(np.abs(g_fa[k] - w0[k].numpy()).max() for k in g_fa) > 1e-3  # the model moved
        for k in g_fa:
            assert np.allclose(g_fp[k], g_fa[k], atol=1e-6), (rnd, k)
    one_fa = _global(fa.run_dir, 1)
    one_paper = _global(raysfl.run(quick(algo="fed_pairing", rounds=1, **common,
                                         fed_pairing={"double_overlap": False, "pair_weights": "paper"})).run_dir, 1)
    for k in one_fa:
        assert np.allclose(one_paper[k] - w0[k].numpy(), (one_fa[k] - w0[k].numpy()) / 3, atol=1e-6), k


def test_fed_pairing_run_with_partners_on_different_actors(quick):
    from pathlib import Path

    import raysfl
    from raysfl.metrics import read_rows

    res = raysfl.run(quick(algo="fed_pairing", model="cnn", clients=5, rounds=2))
    rows = read_rows(Path(res.run_dir) / "clients.parquet")
    assert all(r["completed"] == r["participants"] == 5 and r["failures"] == 0 for r in res.metrics)
    solo = [r for r in rows if r["cut"] == 4]
    paired = [r for r in rows if r["cut"] < 4]
    assert len(solo) == 2 and len(paired) == 8  # 5 clients: two pairs and one alone, each round
    by_round = {}
    for r in paired:
        by_round.setdefault(r["round"], []).append(r["cut"])
    assert all(sum(cuts) == 2 * 4 for cuts in by_round.values())  # L_i + L_j = W in both pairs
    assert all(r["bytes_smashed_up"] == 0 for r in solo) and all(r["bytes_smashed_up"] > 0 for r in paired)
    assert all(math.isfinite(r["train_loss"]) and r["sim_time_s"] > 0 for r in rows)
    assert all(r["bytes_params_up"] > 0 for r in rows)  # every client uploads its whole model
    assert res.metrics[-1]["test_accuracy"] == res.metrics[-1]["test_accuracy"]
    # per update, a client with L = 3 (its partner's L = 1) doubles blocks 2-3; the others none
    for m in res.metrics:
        long = sum(r["cut"] == 3 for r in paired if r["round"] == m["round"])
        assert m["doubled_layers"] == pytest.approx(2 * long / 5)


def test_fed_pairing_learns_like_fedavg(quick):
    """A tiny IID setting with FedPairing's defaults (fedavg weights, eq. 7): within a few
    points of FedAvg at the same lr and local work."""
    import raysfl

    common = dict(clients=4, rounds=4, local_steps=8, batch_size=16, lr=0.1, momentum=0.0, partition="iid",
                  model="cnn")
    fp = raysfl.run(quick(algo="fed_pairing", **common)).final["test_accuracy"]
    fa = raysfl.run(quick(algo="fedavg", **common)).final["test_accuracy"]
    assert fp >= 0.45 and fp >= fa - 0.05, (fp, fa)  # 10 classes: chance is 0.1


@pytest.mark.parametrize("params,match", [
    ({"pairing": "best"}, "unknown pairing 'best'; allowed: greedy, random, location, computation"),
    ({"pair_weights": "sum"}, "unknown pair_weights 'sum'; allowed: fedavg, paper"),
    ({"radius_m": 0}, "radius_m must be a finite number > 0, got 0"),
    ({"pair_alpha": -1}, "pair_alpha must be a finite number >= 0, got -1"),
    ({"round_deadline_s": 5}, "fed_pairing does not take real-time deadlines"),
])
def test_bad_fed_pairing_settings_are_refused(params, match):
    import raysfl
    from raysfl.resolve import validate

    top = {k: params.pop(k) for k in list(params) if k == "round_deadline_s"}
    with pytest.raises(ConfigError, match=match):
        validate(raysfl.config_from_kwargs(algo="fed_pairing", fed_pairing=params, **top))
