"""A streamed server step (``--server-stream on``, ours): a server takes a step's smashed data
one client actor at a time, answers each at once and updates its parameters after the last
part -- what the one concatenated step over the group gives, within float rounding."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from raysfl.algorithms.roles import Wiring
from raysfl.algorithms.roles.exchange import SplitExchange
from raysfl.server_steps import finish_shared_step, shared_server_part, shared_server_step

from recording_handles import RecordingHandle as _Handle


def _server_side(model_name: str = "cnn", cut: int = 2):
    from raysfl.data import load_dataset
    from raysfl.models import build_model

    ds = load_dataset("digits")
    model = build_model(model_name, ds.input_shape, ds.num_classes, seed=0)
    torch.manual_seed(1)
    xs = torch.randn(20, *ds.input_shape)
    with torch.no_grad():
        acts = model.part(0, cut)(xs)
    ys = torch.randint(0, ds.num_classes, (20,))
    return model, acts, ys


def _batches(acts, ys, sizes, cut=2):
    out, o = [], 0
    for c, n in enumerate(sizes):
        out.append((c, cut, acts[o:o + n].clone(), ys[o:o + n]))
        o += n
    return out


def test_parts_of_a_step_equal_the_concatenated_step():
    """Clients 0-3 (batches of 5, 3, 7, 5 rows) from two senders, {0, 2} then {1, 3}: every
    client's gradient and loss, and the parameters after the update, are those of one step over
    the whole group (momentum and weight decay included: the update runs twice)."""
    model, acts, ys = _server_side()
    whole, parts = copy.deepcopy(model), copy.deepcopy(model)
    make_opt = lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)  # noqa: E731
    opt_whole, opt_parts = make_opt(whole), make_opt(parts)
    batches = _batches(acts, ys, [5, 3, 7, 5])
    for _ in range(2):
        g_whole, l_whole = shared_server_step(whole, opt_whole, batches)
        g_parts, l_parts, rows = {}, {}, 0
        for sender in ([batches[0], batches[2]], [batches[1], batches[3]]):
            g, losses, n = shared_server_part(parts, sender)
            g_parts.update(g)
            l_parts.update(losses)
            rows += n
        finish_shared_step(parts, opt_parts, rows)
        assert rows == 20 and sorted(g_parts) == [0, 1, 2, 3]
        for c in range(4):
            torch.testing.assert_close(g_parts[c], g_whole[c], rtol=1e-5, atol=1e-7)
            assert l_parts[c] == pytest.approx(l_whole[c], rel=1e-6)
        for (name, p), q in zip(whole.named_parameters(), parts.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-7, msg=name)
            assert q.grad is None  # the next step starts from nothing
    # the update changed the parameters: the comparison above was not of two untouched models
    assert not torch.equal(list(whole.parameters())[-1], list(model.parameters())[-1])


def _role(algo="splitfed_v2", model_name="cnn", **kw):
    import raysfl
    from raysfl.algorithms import get_algorithm
    from raysfl.data import load_dataset
    from raysfl.models import build_model

    from raysfl.resolve import validate

    cfg = validate(raysfl.config_from_kwargs(algo=algo, model=model_name, dataset="digits", clients=2, **kw))
    ds = load_dataset("digits")
    model = build_model(model_name, ds.input_shape, ds.num_classes, seed=0)
    return get_algorithm(algo).server(cfg, None, None, model, torch.device("cpu"))


@pytest.mark.parametrize("algo, kw, streams", [
    ("splitfed_v2", {}, True),
    ("psl", {}, True),  # its default server_reduction "mean" is SplitFed V2's step
    ("psl", {"psl": {"server_reduction": "sum"}}, False),  # GAPSL's summed per-client gradients need the whole group
    ("splitfed_v2", {"grad_angles": True}, False),  # the angles are between the group's clients
    ("splitfed_v2", {"splitfed_v2": {"server_updates": 2}}, False),
    ("splitfed_v1", {}, False),  # per-client server copies: a step of their own
    ("gapsl", {}, False),
    ("splitfed_v2", {"model": "resnet18", "dataset": "digits"}, False),  # BatchNorm on the server side
])
def test_only_a_step_that_parts_cannot_change_streams(algo, kw, streams):
    kw = dict(kw)
    model_name = kw.pop("model", "cnn")
    kw.pop("dataset", None)
    assert _role(algo, model_name, **kw).streams() is streams


def _plans(steps):
    return SimpleNamespace(steps=steps, local=False)


def test_a_streamed_exchange_asks_one_part_per_sender_and_ends_the_step_with_the_last():
    log = []
    w = Wiring([_Handle(f"client{i}", log) for i in range(3)], [_Handle("server", log)], stream=True)
    plans = {0: {0: _plans(2)}, 1: {1: _plans(2)}, 2: {2: _plans(1)}}
    prev = {i: [] for i in plans}
    markers = SplitExchange.steps(w, plans, {0: 0, 1: 0, 2: 0}, prev)
    parts = [args for name, method, args in log if method == "step_part"]
    assert [m for n, m, _ in log if n == "server"] == ["step_part"] * 5  # no whole-group step
    # step 0: three senders, the last ends the step; step 1: client actor 2 is done
    assert [(s, last) for s, _, last in parts] == [(0, False), (0, False), (0, True), (1, False), (1, True)]
    assert all(len(refs) == 1 for _, refs, _ in parts)  # a list: Ray does not resolve it before the call
    assert len(markers) == 2 and len(prev[0]) == 1 and len(prev[2]) == 1
    # without streaming (and with one sender) the group's step is one call
    log.clear()
    w.stream = False
    SplitExchange.steps(w, plans, {0: 0, 1: 0, 2: 0}, {i: [] for i in plans})
    assert [m for n, m, _ in log if n == "server"] == ["step", "step"]


def test_a_streamed_run_learns_as_the_whole_group_step_does(quick, monkeypatch):
    """psl on 2 client actors: the rows with ``--server-stream on`` are those of ``off`` within
    float rounding, and the run did stream (every round's wiring asked for it)."""
    import raysfl
    from raysfl.runtime import federation

    seen = []

    class Recording(Wiring):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            seen.append(self.stream)

    monkeypatch.setattr(federation, "Wiring", Recording)
    rows = {}
    for mode in ("off", "on"):
        seen.clear()
        cfg = quick(algo="psl", rounds=4, local_steps=4, lr=0.1, resources={"client_actors": 2, "server_stream": mode})
        rows[mode] = raysfl.run(cfg).metrics
        assert seen and all(s is (mode == "on") for s in seen)
    for a, b in zip(rows["off"], rows["on"]):
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)
        assert b["test_loss"] == pytest.approx(a["test_loss"], rel=1e-3)
    # it learns: 0.15 -> 0.33 in this setting (chance: 0.1), its training loss down by 0.33
    assert rows["on"][-1]["test_accuracy"] > 0.25 and rows["on"][-1]["train_loss"] < rows["on"][0]["train_loss"] - 0.2


def test_an_unknown_server_stream_is_refused_in_one_line():
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"unknown resources.server_stream 'sometimes'; allowed: off, on"):
        validate(raysfl.config_from_kwargs(algo="psl", resources={"server_stream": "sometimes"}))


@pytest.mark.parametrize("fault", [
    "kill:client:round=2:step=1:index=1",  # a sender dies: its part comes empty, the step still ends
    pytest.param("kill:server:round=2:step=1", marks=pytest.mark.slow),  # the server dies between parts
])
def test_a_streamed_step_survives_a_killed_sender_or_server(quick, fault):
    import raysfl

    res = raysfl.run(quick(algo="splitfed_v2", clients=6, rounds=4, local_steps=None, local_epochs=1,
                           batch_size=32, lr=0.05, faults=fault,
                           resources={"client_actors": 2, "server_stream": "on"}))
    rows = res.metrics
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["failures"] >= 1 and sum(r["failures"] for r in rows) == rows[1]["failures"]
    assert rows[1]["retries"] >= 1 or rows[1]["completed"] < rows[1]["participants"]
    assert rows[-1]["test_accuracy"] > 0.6 and rows[-1]["train_loss"] < rows[0]["train_loss"]
