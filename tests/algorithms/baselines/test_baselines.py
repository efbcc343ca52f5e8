"""Every baseline runs on the Ray runtime and writes complete metrics."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

import raysfl
from raysfl.metrics import TIMING_COLUMNS

BASELINES = ["fedavg", "fedprox", "sl", "splitfed_v1", "splitfed_v2", "psl", "epsl", "centralized"]
REQUIRED = {"round", "test_accuracy", "test_loss", "bytes_up", "bytes_down", "sim_time_s", "wall_time_s"}


@pytest.mark.parametrize("algo", BASELINES)
def test_baseline_runs_and_logs_every_round(quick, algo):
    result = raysfl.run(quick(algo=algo))
    table = pq.read_table(result.run_dir / "metrics.parquet").to_pylist()
    assert [r["round"] for r in table] == [1, 2]
    assert REQUIRED <= set(table[0])
    for r in table:
        assert 0.0 <= r["test_accuracy"] <= 1.0
        assert math.isfinite(r["test_loss"]) and math.isfinite(r["train_loss"])
    assert (result.run_dir / "config.json").is_file()
    clients = pq.read_table(result.run_dir / "clients.parquet").to_pylist()
    if algo == "centralized":
        assert table[-1]["bytes_up"] == 0 and clients == []
        return
    assert {r["client"] for r in clients if r["round"] == 1} == {0, 1, 2, 3}
    assert all(r["bytes_up"] > 0 and r["bytes_down"] > 0 for r in table)
    split = algo not in ("fedavg", "fedprox")
    assert (table[0]["bytes_smashed_up"] > 0) == split
    assert (table[0]["bytes_params_up"] > 0) == (algo not in ("psl", "epsl"))
    assert table[0]["sim_time_s"] > 0


def test_splitfed_v1_equals_fedavg(quick):
    """Per-client server models averaged each round are FedAvg on the whole model: the split
    exchange (forward, smashed data, gradient back) must reproduce it to float precision."""
    fa = raysfl.run(quick(algo="fedavg", rounds=3)).metrics
    for cut in (1, 2):  # whatever the cut: raysfl reproduce counts such rows once (same_by_construction)
        v1 = raysfl.run(quick(algo="splitfed_v1", rounds=3, cut=cut)).metrics
        for a, b in zip(v1, fa):
            assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-9)
            assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-4)


@pytest.mark.slow  # sequential turns are slow; CI runs the slow tests
def test_sl_visits_clients_sequentially(quick):
    """Vanilla SL's simulated round is the sum of its clients' times, not the max."""
    result = raysfl.run(quick(algo="sl", rounds=1))
    clients = pq.read_table(result.run_dir / "clients.parquet").to_pylist()
    assert result.final["sim_time_s"] == pytest.approx(sum(c["sim_time_s"] for c in clients))
    v2 = raysfl.run(quick(algo="splitfed_v2", rounds=1))
    clients = pq.read_table(v2.run_dir / "clients.parquet").to_pylist()
    assert v2.final["sim_time_s"] == pytest.approx(max(c["sim_time_s"] for c in clients))


def test_partial_selection_is_seeded(quick):
    a = raysfl.run(quick(algo="splitfed_v2", clients=6, clients_per_round=3, rounds=3))
    rows = pq.read_table(a.run_dir / "clients.parquet").to_pylist()
    per_round = {r: sorted(x["client"] for x in rows if x["round"] == r) for r in (1, 2, 3)}
    assert all(len(v) == 3 for v in per_round.values())
    assert len({tuple(v) for v in per_round.values()}) > 1  # selection changes between rounds
    assert all(m["participants"] == 3 for m in a.metrics)


def test_timing_columns_exist(quick):
    result = raysfl.run(quick(algo="fedavg", rounds=1))
    assert set(TIMING_COLUMNS) <= set(result.final)


def _group(clients: int = 4, n: int = 6, seed: int = 0):
    import torch

    from raysfl.models import build_model

    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    gen = torch.Generator().manual_seed(seed)
    batches = []
    for c in range(clients):
        with torch.no_grad():
            a = model.part(0, 1)(torch.randn(n, 1, 8, 8, generator=gen))
        batches.append((c, 1, a, torch.randint(0, 10, (n,), generator=gen)))
    return model, batches


def test_psl_sum_steps_on_the_sum_of_the_clients_gradients_and_mean_is_unchanged():
    """``--server-reduction sum``: sum_i g_i (GAPSL's eq. 8 with every client kept); ``mean`` (the
    default) is the shared step on the concatenated group, as before."""
    import copy

    import torch

    from raysfl.algorithms.baselines.spec import ParallelSplitLearning
    from raysfl.resolve import validate
    from raysfl.server_steps import per_client_gradients, shared_server_step

    model, batches = _group()
    grads, act_ref, _, names, _ = per_client_gradients(copy.deepcopy(model), batches)
    outs = {}
    for red in ("mean", "sum"):
        m = copy.deepcopy(model)
        cfg = validate(raysfl.config_from_kwargs(algo="psl", momentum=0.0, psl={"server_reduction": red}))
        srv = ParallelSplitLearning.server(cfg, None, None, m, "cpu")
        srv.opt = torch.optim.SGD(m.parameters(), lr=0.1)
        outs[red] = (srv.step(batches), m)
    ref = copy.deepcopy(model)
    want = shared_server_step(ref, torch.optim.SGD(ref.parameters(), lr=0.1), batches)
    assert all(torch.equal(outs["mean"][0].grads[c], want[0][c]) for c in range(4))
    before = dict(model.part(1, 4).named_parameters())
    after = dict(outs["sum"][1].part(1, 4).named_parameters())
    delta = torch.cat([(after[n] - before[n]).detach().reshape(-1) for n in names])
    assert torch.allclose(delta, -0.1 * grads.sum(0), atol=1e-6)
    assert all(torch.allclose(outs["sum"][0].grads[c], act_ref[c]) for c in range(4))  # each its own gradient


def test_epsl_aggregates_the_last_layer_gradients_of_a_share_of_each_batch():
    """phi = 0 is PSL's step. With phi > 0 the logits' gradients at the first ceil(phi * b) row
    positions are averaged over the clients: two clients with the same smashed data but different
    labels then get the same cut gradient at those rows, and their own at the others."""
    import copy
    import math

    import torch

    from raysfl.algorithms.baselines.epsl import aggregated_last_layer_step
    from raysfl.server_steps import shared_server_step

    model, batches = _group()
    ref = copy.deepcopy(model)
    want = shared_server_step(ref, torch.optim.SGD(ref.parameters(), lr=0.1), batches)
    m0 = copy.deepcopy(model)
    got = aggregated_last_layer_step(m0, torch.optim.SGD(m0.parameters(), lr=0.1), batches, 0.0)
    assert all(torch.allclose(got[0][c], want[0][c], atol=1e-7) for c in range(4))
    assert got[1] == pytest.approx(want[1])
    assert all(torch.allclose(a, b, atol=1e-7) for a, b in zip(m0.parameters(), ref.parameters()))
    twin = [batches[0], (1, 1, batches[0][2].clone(), (batches[0][3] + 1) % 10)]
    m1 = copy.deepcopy(model)
    grads, _ = aggregated_last_layer_step(m1, torch.optim.SGD(m1.parameters(), lr=0.1), twin, 0.5)
    k = math.ceil(0.5 * 6)
    assert torch.allclose(grads[0][:k], grads[1][:k], atol=1e-7)
    assert not torch.allclose(grads[0][k:], grads[1][k:], atol=1e-4)


def test_evaluator_sees_a_model_from_each_clients_classes():
    """own_class_share and label-mix accuracy of a model that always answers 3, by hand."""
    import numpy as np
    import torch

    from raysfl.data import load_dataset
    from raysfl.runtime.fed_actor import ClientViews, Evaluator

    ds = load_dataset("digits")
    hist = np.zeros((2, 10))
    hist[0, [3, 5]] = [30, 10]  # client 0 holds class 3 (75 %) and 5
    hist[1, [1, 2]] = 5         # client 1 never sees a 3
    ev = Evaluator(None, ds, "cpu", ClientViews([], hist))

    class Three(torch.nn.Module):
        def forward(self, x):
            out = torch.zeros(len(x), 10)
            out[:, 3] = 1.0
            return out

    share3 = float(np.mean(ds.y_test == 3))
    r0, r1 = ev.for_client(Three(), 0), ev.for_client(Three(), 1)
    assert (r0["own_class_share"], r1["own_class_share"]) == (1.0, 0.0)
    assert r0["accuracy"] == pytest.approx(share3) and r0["label_mix"] == pytest.approx(0.75)
    assert r1["label_mix"] == 0.0 and ev.on_label_mix(Three(), 0) == pytest.approx(0.75)
    assert (r0["accuracy"], r0["loss"]) == pytest.approx(ev.module(Three()))


def test_psl_style_runs_report_the_evaluation_columns(quick):
    res = raysfl.run(quick(algo="epsl", partition="dirichlet", alpha=0.3))
    for r in res.metrics:
        for k in ("test_accuracy_avg_client", "test_accuracy_label_mix", "own_class_share"):
            assert 0.0 <= r[k] <= 1.0


@pytest.mark.slow
def test_epsl_learns(quick):
    res = raysfl.run(quick(algo="epsl", clients=5, rounds=8, local_steps=None, batch_size=32, cut=1))
    assert res.final["test_accuracy"] > 0.8


@pytest.mark.parametrize("algo,params,match", [
    ("psl", {"server_reduction": "max"}, "unknown server_reduction 'max'; allowed: mean, sum"),
    ("epsl", {"phi": 1.5}, r"phi must be a finite number in \[0, 1\], got 1.5"),
])
def test_bad_psl_and_epsl_settings_are_refused(algo, params, match):
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=match):
        validate(raysfl.config_from_kwargs(algo=algo, **{algo: params}))
