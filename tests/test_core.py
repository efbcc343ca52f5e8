"""Core helpers on small tensors: aggregation, server steps, transport, clock, devices, streams."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from raysfl.aggregation import weighted_average
from raysfl.config import DeviceConfig
from raysfl.data import load_dataset
from raysfl.devices import sample_profiles
from raysfl.models import build_model
from raysfl.runtime.client_actor import sample_stream
from raysfl.server_steps import per_client_server_step, shared_server_step
from raysfl.simclock import client_time, round_time
from raysfl.transport import ClientRoundStats, pack, unpack


def test_weighted_average_layer_by_layer_over_holders():
    a = {"blocks.0.w": np.array([1.0, 1.0], np.float32), "blocks.1.w": np.array([4.0], np.float32)}
    b = {"blocks.0.w": np.array([3.0, 5.0], np.float32)}
    base = {"blocks.0.w": np.zeros(2, np.float32), "blocks.1.w": np.zeros(1, np.float32),
            "blocks.2.w": np.array([9.0], np.float32)}
    out = weighted_average([(a, 1.0), (b, 3.0)], base=base)
    np.testing.assert_allclose(out["blocks.0.w"], [2.5, 4.0])   # (1*1 + 3*3)/4, (1 + 15)/4
    np.testing.assert_allclose(out["blocks.1.w"], [4.0])        # only a holds block 1
    np.testing.assert_allclose(out["blocks.2.w"], [9.0])        # nobody holds block 2
    assert out["blocks.0.w"].dtype == np.float32


def test_weighted_average_integer_buffers_rounded():
    out = weighted_average([({"n": np.array(3, np.int64)}, 1.0), ({"n": np.array(6, np.int64)}, 1.0)])
    assert out["n"].dtype == np.int64 and int(out["n"]) in (4, 5)


def _group(model, cut, sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = model.activation_shape(cut)
    return [(c, cut, torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,), generator=g))
            for c, n in enumerate(sizes)]


def test_shared_server_step_gives_each_client_its_own_mean_loss_gradient():
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    batches = _group(model, 2, [3, 5, 8])
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads, losses = shared_server_step(model, opt, [(c, k, x.clone(), y) for c, k, x, y in batches])
    for c, k, x, y in batches:  # what the client would get training alone with the server
        x = x.clone().requires_grad_(True)
        loss = F.cross_entropy(ref.server_part(k)(x), y)
        loss.backward()
        torch.testing.assert_close(grads[c], x.grad, rtol=1e-4, atol=1e-6)
        assert losses[c] == pytest.approx(loss.item(), rel=1e-5)


def test_shared_server_step_updates_with_mean_over_all_samples():
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    batches = _group(model, 2, [4, 12])
    ref = copy.deepcopy(model)
    shared_server_step(model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    x = torch.cat([b[2] for b in batches])
    y = torch.cat([b[3] for b in batches])
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    F.cross_entropy(ref.server_part(2)(x), y).backward()
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)


def test_shared_server_step_mixed_cuts_share_weights():
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    batches = _group(model, 1, [4]) + [(1, 2, *_group(model, 2, [5])[0][2:])]
    grads, _ = shared_server_step(model, torch.optim.SGD(model.parameters(), lr=0.1), batches)
    assert grads[0].shape == (4, *model.activation_shape(1))
    assert grads[1].shape == (5, *model.activation_shape(2))


def test_per_client_server_step_touches_only_own_model():
    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    models = {0: copy.deepcopy(model), 1: copy.deepcopy(model)}
    opts = {c: torch.optim.SGD(m.parameters(), lr=0.5) for c, m in models.items()}
    per_client_server_step(models, opts, _group(model, 2, [6])[:1])
    changed = [any(not torch.equal(p, q) for p, q in zip(models[c].parameters(), model.parameters())) for c in (0, 1)]
    assert changed == [True, False]


@pytest.mark.parametrize("dtype,nbytes", [("float32", 4), ("float16", 2), ("bfloat16", 2)])
def test_pack_unpack_roundtrip(dtype, nbytes):
    t = torch.randn(5, 3, 2)
    w = pack(t, dtype)
    assert w.nbytes == t.numel() * nbytes and w.data.flags.c_contiguous
    back = unpack(w)
    assert back.dtype == torch.float32 and back.shape == t.shape
    torch.testing.assert_close(back, t, rtol=1e-2 if nbytes == 2 else 0, atol=1e-2 if nbytes == 2 else 0)


def test_unpack_read_only_buffer():
    w = pack(torch.ones(3))
    w.data.setflags(write=False)
    t = unpack(w)
    t += 1  # must not touch the (shared, read-only) buffer
    assert float(w.data.sum()) == 3.0


def test_device_profiles_seeded_and_in_range():
    cfg = DeviceConfig()
    a, b = sample_profiles(50, cfg, 7), sample_profiles(50, cfg, 7)
    assert a == b and a != sample_profiles(50, cfg, 8)
    for p in a:
        assert 2 <= p.memory_gb <= 16 and 0.020 <= p.latency_s <= 0.200 and 0.1 <= p.cpu_ghz <= 2.0
        assert p.flops_per_s == pytest.approx(p.cpu_ghz * 1e9 * cfg.flops_per_cycle)


def test_client_time_formula():
    p = sample_profiles(1, DeviceConfig(), 0)[0]
    st = ClientRoundStats(client=0, cut=1, client_flops=2e9, server_flops=1e12)
    st.traffic.smashed_up, st.traffic.grad_down, st.traffic.messages = 1_000_000, 500_000, 4
    expected = (2e9 / p.flops_per_s + 1e12 / 1e13 + 8e6 / p.uplink_bps + 4e6 / p.downlink_bps + 4 * p.latency_s)
    assert client_time(st, p, 1e13) == pytest.approx(expected)
    assert round_time([1.0, 3.0, 2.0]) == 3.0 and round_time([1.0, 3.0], sequential=True) == 4.0


def test_sample_stream_covers_each_epoch_and_is_resumable():
    idx = np.arange(100, 110)
    first = sample_stream(idx, 3, 0, 0, 10)
    assert sorted(first) == list(idx)                              # one epoch = a permutation
    whole = sample_stream(idx, 3, 0, 0, 25)
    np.testing.assert_array_equal(np.concatenate([sample_stream(idx, 3, 0, 0, 7),
                                                  sample_stream(idx, 3, 0, 7, 18)]), whole)
    assert not np.array_equal(sample_stream(idx, 4, 0, 0, 10), first)  # clients differ


def test_run_logger_writes_parquet_off_thread_and_flush_waits_for_it(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from raysfl import metrics

    log = metrics.RunLogger(tmp_path, progress=False)
    for r in (1, 2, 3):
        log.log_round({"round": r, "test_accuracy": 0.1 * r}, [{"round": r, "client": 0}])
    log.flush()
    assert [x["round"] for x in pq.read_table(tmp_path / "metrics.parquet").to_pylist()] == [1, 2, 3]
    assert len(pq.read_table(tmp_path / "clients.parquet")) == 3

    def broken(rows, path):
        raise OSError(f"disk full writing {path.name}")

    monkeypatch.setattr(metrics, "_write_parquet", broken)
    log.log_round({"round": 4, "test_accuracy": 0.4}, [])
    with pytest.raises(OSError, match="disk full"):
        log.flush()
    with pytest.raises(OSError, match="disk full"):  # the writer has stopped: every later call says so
        log.log_round({"round": 5, "test_accuracy": 0.5}, [])
    with pytest.raises(OSError, match="disk full"):
        log.close()
    assert [x["round"] for x in pq.read_table(tmp_path / "metrics.parquet").to_pylist()] == [1, 2, 3]


def test_rows_table_gives_the_table_of_all_rows_converting_each_row_once():
    """The metrics writer converts only the rows logged since its last write (a rewrite's cost
    would grow with the rounds so far), and the table is still the one ``Table.from_pylist`` makes
    of all the rows: the first row's columns, a type per column over every row (an int column
    that turns float, a chunk where a column is all null or its lists all empty, a key missing
    from later rows, an extra key later: dropped, as from_pylist drops it)."""
    import pyarrow as pa

    from raysfl import metrics

    reads: list[tuple[int, int]] = []  # (call, row) of every row read for conversion

    class Row(dict):
        def get(self, key, default=None):
            reads.append((call, self["i"]))
            return super().get(key, default)

    rows = [Row(i=0, round=1, acc=0, note=None, cut=2, servers=[]), Row(i=1, round=1, acc=1, note=None, cut=2,
                                                                       servers=[]),
            Row(i=2, round=2, acc=0.5, note="a", servers=[0, 1]),
            Row(i=3, round=3, acc=float("nan"), note=None, cut=3, servers=[], late=True)]
    log = metrics.RowsTable()
    assert log.of([]).num_rows == 0
    for call, n in enumerate((2, 3, 3, 4)):
        table, whole = log.of(rows[:n]), pa.Table.from_pylist([dict(r) for r in rows[:n]])
        assert table.schema == whole.schema, (n, table.schema, whole.schema)
        assert repr(table.to_pylist()) == repr(whole.to_pylist())  # repr: NaN as NaN
    assert sorted({(c, r) for c, r in reads}) == [(0, 0), (0, 1), (1, 2), (3, 3)]  # each row in one call


def test_eta_leaves_out_the_first_rounds_one_off_costs(tmp_path, capsys):
    """Issue 46: round 1 pays one-off costs (it took 100 s, the next 1 s): no ETA is said after
    it, and the ETA after round 2 comes from round 2 alone (8 rounds left at 1 s: 8 s), not 8m24s."""
    from raysfl import metrics

    log = metrics.RunLogger(tmp_path, progress=True, total_rounds=10)
    base = {"test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "bytes_up": 0, "bytes_down": 0,
            "sim_time_s": 1.0}
    log.log_round({**base, "round": 1, "wall_time_s": 100.0}, [])
    log.log_round({**base, "round": 2, "wall_time_s": 1.0}, [])
    log.flush()
    lines = [x for x in capsys.readouterr().err.splitlines() if x.lstrip("\r\x1b[K").startswith("round")]
    assert "eta" not in lines[0]
    assert lines[1].rstrip().endswith("eta 8s"), lines[1]


def test_a_run_without_an_accuracy_is_labelled_and_summarised_by_its_loss(tmp_path, capsys):
    """Issue 46: a regression run's progress line says which loss is which, and its TensorBoard
    hparams summary holds its best (lowest) and final test loss, no NaN accuracy."""
    import math

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from raysfl import metrics

    log = metrics.RunLogger(tmp_path, progress=True, total_rounds=3, config={"lr": 0.1})
    nan = float("nan")
    for rnd, test_loss in ((1, 0.9), (2, 0.59), (3, 0.61)):
        log.log_round({"round": rnd, "test_accuracy": nan, "test_loss": test_loss, "train_loss": 0.45,
                       "bytes_up": 0, "bytes_down": 0, "sim_time_s": 1.0, "sim_time_total_s": float(rnd),
                       "wall_time_s": 1.0}, [])
    log._hparams()
    log.tb.flush()
    err = capsys.readouterr().err
    assert "test loss 0.5900 train loss 0.4500" in err
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert acc.Scalars("hparams/best_test_loss")[-1].value == pytest.approx(0.59)
    assert acc.Scalars("hparams/final_test_loss")[-1].value == pytest.approx(0.61)
    assert not any("accuracy" in t for t in tags if t.startswith("hparams/"))
    assert all(math.isfinite(acc.Scalars(t)[-1].value) for t in tags if t.startswith("hparams/"))


def test_startup_json_names_the_overlap_and_the_time_outside_every_stage(tmp_path):
    """Issue 46: startup.json's stages minus ``overlapped`` plus ``other`` are its ``total``: two
    stages run at once (0.2 s inside 0.3 s) and 0.2 s pass in none."""
    import json
    import threading
    import time

    from raysfl.runtime.experiment import StartupClock

    clock = StartupClock(tmp_path, verbose=False)
    side = threading.Thread(target=clock.timed, args=("setup", "setting up", lambda: time.sleep(0.2)))
    side.start()
    clock.timed("ray", "starting Ray", lambda: time.sleep(0.3))
    side.join()
    time.sleep(0.2)  # outside every stage
    clock.timed("actors", "starting actors", lambda: time.sleep(0.1))
    clock.write()
    out = json.loads((tmp_path / "startup.json").read_text())
    stages = sum(out[k] for k in ("setup", "ray", "actors", "warm_up", "state"))
    assert stages - out["overlapped"] + out["other"] == pytest.approx(out["total"], abs=0.005)
    assert out["overlapped"] == pytest.approx(0.2, abs=0.05)
    assert out["other"] == pytest.approx(0.2, abs=0.08)


def test_accuracy_on_a_client_label_mix_weights_per_class_accuracy():
    from raysfl.evaluation import evaluate_by_class, mix_weighted_accuracy

    class Fixed(torch.nn.Module):  # predicts class 0 for every input
        def forward(self, x):
            return torch.tensor([[1.0, 0.0, 0.0]]).repeat(len(x), 1)

    x = np.zeros((6, 1, 1, 1), dtype=np.float32)
    y = np.array([0, 0, 1, 1, 2, 2])
    correct, total = evaluate_by_class(Fixed(), x, y, torch.from_numpy, 3)
    assert correct.tolist() == [2, 0, 0] and total.tolist() == [2, 2, 2]
    assert mix_weighted_accuracy(correct, total, np.array([30, 10, 0])) == pytest.approx(0.75)
    assert mix_weighted_accuracy(correct, total, np.array([0, 5, 5])) == 0.0
    assert mix_weighted_accuracy(correct, total, np.array([1, 1, 1])) == pytest.approx(1 / 3)


def test_evaluating_a_client_model_leaves_the_global_model_alone():
    """The fed server evaluates other states in its model; the global model it holds must not
    follow them (it once aliased the model's tensors: a never-trained PSL client then started
    from the last evaluated client's model, FLEX-SFL's 'initial' parts drifted)."""
    import raysfl
    from raysfl.resolve import validate_run
    from raysfl.runtime.experiment import prepare
    from raysfl.runtime.fed_actor import FedActor

    cfg, algo = validate_run(raysfl.config_from_kwargs(algo="psl", clients=2))
    from raysfl.runtime.fed_actor import ClientViews

    ds = load_dataset("digits")
    p = prepare(cfg, algo, ds)  # the run's context and planner, as the runtime builds them
    fed = FedActor()
    fed.setup("test", cfg, p.spec, p.ctx, p.planner.shared(), ds, ClientViews([], np.ones((2, 10))))
    before = {k: v.copy() for k, v in fed.role.global_state.items()}
    fed.role.own[0] = {k: v + 1.0 for k, v in before.items() if k.startswith("blocks.0.")}
    fed.role.last_clients = [0]
    fed.evaluate()
    assert all(np.array_equal(before[k], fed.role.global_state[k]) for k in before)


def test_unset_cpu_shares_fit_the_cluster_and_set_ones_are_kept():
    import raysfl
    from raysfl.runtime.placement import actor_demand, fit_resources

    cfg = raysfl.config_from_kwargs(algo="flex_sfl")  # 2 client actors, 3 edge servers, 1 fed server
    big = fit_resources(cfg, 2, 3, free_cpus=64.0).resources
    assert (big.client_cpus, big.server_cpus, big.fed_cpus) == (0.5, 1.0, 0.5)  # the defaults fit
    small = fit_resources(cfg, 2, 3, free_cpus=2.0)
    r = small.resources
    assert actor_demand(small, 2, 3)[0] <= 2.0 and actor_demand(small, 2, 3)[0] > 1.99
    assert r.server_cpus == pytest.approx(2 * r.client_cpus, abs=1e-4) and r.client_cpus == r.fed_cpus
    mixed = raysfl.config_from_kwargs(algo="flex_sfl", resources={"server_cpus": 0.2})
    r = fit_resources(mixed, 2, 3, free_cpus=2.2).resources
    assert r.server_cpus == 0.2 and r.client_cpus == r.fed_cpus == 0.5  # 3 x 0.2 + 1.5 of defaults: fits
    r = fit_resources(mixed, 2, 3, free_cpus=2.0).resources
    assert r.server_cpus == 0.2 and 3 * 0.2 + 3 * r.client_cpus <= 2.0 < 3 * 0.2 + 3 * r.client_cpus + 1e-3
    greedy = raysfl.config_from_kwargs(algo="flex_sfl", resources={"server_cpus": 1.0})
    r = fit_resources(greedy, 2, 3, free_cpus=2.0).resources
    assert r.server_cpus == 1.0 and r.client_cpus == 0.5  # nothing left to share: the capacity check speaks


def _with_batch_norm():
    """A small CNN whose server side (blocks 2..) holds BatchNorm."""
    import torch.nn as nn

    from raysfl.models.splittable import SplitModel

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU()),
              nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
              nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True)),
              nn.Sequential(nn.Flatten(), nn.Linear(16 * 4 * 4, 10))]
    return SplitModel("bn-cnn", blocks, (1, 8, 8), 10)


@pytest.mark.parametrize("which", ["cnn", "with BatchNorm"])
def test_stacked_per_client_copies_match_one_module_per_client(which):
    """SplitFed V1's copies stacked and stepped with vmap (raysfl.server_steps.StackedCopies)
    give what one module and one optimiser per client give, to float rounding: gradients at the
    cut, losses and every copy's weights (and BatchNorm's running statistics, each copy's own)
    after three steps agree within 1e-5 (absolute; the values are O(1)), including a client
    absent from a step (its row gets no gradient, so the optimiser leaves it and its momentum
    alone) and batches of two sizes."""
    import copy as copylib

    import torch

    from raysfl.models import build_model
    from raysfl.server_steps import StackedCopies, per_client_server_step, stackable

    model = build_model("cnn", (1, 8, 8), 10, seed=0) if which == "cnn" else _with_batch_norm()
    assert stackable(model, {0: 2, 1: 2}, "sgd")
    front = model.part(0, 2)
    g = torch.Generator().manual_seed(0)
    sizes = {0: 14, 1: 15, 2: 14, 3: 15, 4: 14}

    def batches(clients):
        with torch.no_grad():
            return [(c, 2, front(torch.randn(sizes[c], 1, 8, 8, generator=g)),
                     torch.randint(0, 10, (sizes[c],), generator=g)) for c in clients]

    steps = [batches([0, 1, 2, 3, 4]), batches([0, 1, 3, 4]), batches([0, 1, 2, 3, 4])]  # client 2 sits out step 2
    make = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-4)  # noqa: E731
    copies = {c: copylib.deepcopy(model) for c in sizes}
    opts = {c: make(m.parameters()) for c, m in copies.items()}
    stack = StackedCopies(model, 2, list(sizes), make)
    for step in steps:
        before = {k: v.clone() for k, v in stack.states()[2].items()}
        ref_g, ref_l = per_client_server_step(copies, opts, [(c, k, x.clone(), y) for c, k, x, y in step])
        got_g, got_l = stack.step([(c, k, x.clone(), y) for c, k, x, y in step])
        if 2 not in got_g:  # the absent copy is left exactly as it was (weight decay would move it by ~1e-6)
            assert all(torch.equal(v, before[k]) for k, v in stack.states()[2].items())
        assert set(got_g) == set(ref_g)
        for c in ref_g:
            assert torch.allclose(got_g[c], ref_g[c], atol=1e-5)
            assert abs(got_l[c] - ref_l[c]) < 1e-5
    for c, state in stack.states().items():
        ref = {k: v for k, v in copies[c].state_dict().items() if k in state}
        assert set(ref) == set(state)  # buffers included
        for k, v in state.items():
            assert torch.allclose(v, ref[k], atol=1e-5), (c, k)
    if which != "cnn":  # each copy's running mean is its own: client 2 (absent from step 2) differs
        means = {c: s["blocks.2.1.running_mean"] for c, s in stack.states().items()}
        assert not torch.allclose(means[2], means[0])
