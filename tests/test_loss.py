"""Losses other than single-label cross-entropy (``raysfl.run(cfg, data=..., loss=...)``,
raysfl/objective.py): regression and multi-label tasks learn through the actors, a loss of
your own travels to them, the shared server step keeps each client's own mean loss, and
what cannot work is refused up front in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import raysfl
from raysfl.data import custom_dataset
from raysfl.errors import ConfigError
from raysfl.evaluation import evaluate
from raysfl.objective import BUILT_IN, Loss, as_loss
from raysfl.server_steps import per_client_gradients, shared_server_step
from raysfl.models import SplitModel


def regression(n: int = 800, dim: int = 8, outputs: int = 2, seed: int = 0):
    """y = a smooth function of x plus noise (std 0.1): learnable far below the targets' variance."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    w = rng.normal(size=(dim, outputs))
    y = np.tanh(x @ w) + 0.5 * (x[:, :outputs] ** 2) + rng.normal(scale=0.1, size=(n, outputs))
    return x, y.astype(np.float32)


def multilabel(n: int = 800, dim: int = 8, labels: int = 3, seed: int = 1):
    """Each of ``labels`` labels is on when its own linear score is positive (labels co-occur)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    w = rng.normal(size=(dim, labels))
    return x, (x @ w > 0).astype(np.float32)


def mlp(dim: int = 8, outputs: int = 2) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, outputs))


def huber(outputs, targets):  # a loss of your own: a plain function, sent to the actors by value
    return F.smooth_l1_loss(outputs, targets, beta=0.5)


# ----------------------------------------------------------------------------- no Ray
def test_a_loss_is_a_name_a_function_or_a_loss_object():
    assert as_loss("mse") is BUILT_IN["mse"] and as_loss("bce").has_accuracy and not as_loss("mse").has_accuracy
    own = as_loss(huber)
    assert (own.name, own.targets, own.has_accuracy) == ("custom-huber", "values", False)
    smooth = Loss(nn.CrossEntropyLoss(label_smoothing=0.1), targets="classes", name="smooth")
    assert smooth.has_accuracy  # class ids: accuracy is the argmax's
    with pytest.raises(ConfigError, match="unknown loss 'l2'; allowed: cross_entropy, mse, bce"):
        as_loss("l2")
    with pytest.raises(ConfigError, match="targets must be one of classes, values, got 'labels'"):
        Loss(huber, targets="labels")
    with pytest.raises(ConfigError, match="got int"):
        as_loss(3)


def test_values_targets_are_read_as_n_by_k_floats():
    x, y = regression(outputs=1)
    ds = custom_dataset(x, y[:, 0], targets="values")  # (N,) becomes (N, 1)
    assert ds.targets == "values" and ds.num_classes == 1
    assert ds.y_train.shape == (640, 1) and ds.y_train.dtype == np.float32 and ds.num_test == 160
    with pytest.raises(ConfigError, match="NaN or infinite"):
        custom_dataset(x, np.full(len(x), np.nan), targets="values")
    with pytest.raises(ConfigError, match="num_classes is 3 but the targets have 1 values"):
        custom_dataset(x, y, targets="values", num_classes=3)


@pytest.mark.parametrize("name", ["mse", "bce", "own"])
def test_the_shared_server_step_gives_each_client_its_own_mean_loss_for_any_loss(name):
    """One forward/backward on the concatenated group (rows or, for a loss of your own, client
    by client) equals each client's own loss and gradient, and the server's mean-loss step."""
    loss = huber_loss = as_loss(huber) if name == "own" else BUILT_IN[name]
    torch.manual_seed(0)
    model = SplitModel("m", [nn.Sequential(nn.Linear(4, 6), nn.ReLU()), nn.Linear(6, 3)], (4,), 3)
    ref = SplitModel("m", [nn.Sequential(nn.Linear(4, 6), nn.ReLU()), nn.Linear(6, 3)], (4,), 3)
    ref.load_state_dict(model.state_dict())
    sizes = [5, 3]
    xs = [torch.randn(n, 6) for n in sizes]
    ys = [(torch.rand(n, 3) > 0.5).float() if name == "bce" else torch.randn(n, 3) for n in sizes]
    batches = [(c, 1, xs[c].clone(), ys[c]) for c in range(2)]
    grads, losses = shared_server_step(model, torch.optim.SGD(model.parameters(), lr=0.1), batches, loss)
    for c in range(2):
        x = xs[c].clone().requires_grad_(True)
        own = huber_loss(ref.blocks[1](x), ys[c])
        own.backward()
        assert losses[c] == pytest.approx(own.item(), rel=1e-5)
        assert torch.allclose(grads[c], x.grad, atol=1e-6)
    # per-client gradients under vmap take the same loss
    _, act, vlosses, _, _ = per_client_gradients(ref, batches, loss)
    assert vlosses[0] == pytest.approx(losses[0], rel=1e-5)


def test_what_cannot_work_is_refused_in_one_line(tmp_path):
    x, y = regression()
    base = dict(rounds=1, clients=4, out=str(tmp_path), progress=False, partition="iid")
    with pytest.raises(ConfigError, match="loss 'mse' trains on real-valued targets but data set 'digits' has "
                                          "class labels; built-in data sets have class labels"):
        raysfl.run(raysfl.config_from_kwargs(algo="fedavg", loss="mse", **base))
    with pytest.raises(ConfigError, match="needs class labels"):
        raysfl.run(raysfl.config_from_kwargs(algo="flex_sfl", **base), data=(x, y), loss="mse", model=mlp())
    with pytest.raises(ConfigError, match="besplit trains with cross_entropy only"):
        raysfl.run(raysfl.config_from_kwargs(algo="besplit", **base), data=(x, y), loss="mse", model=mlp())
    with pytest.raises(ConfigError, match="epsl trains with cross_entropy only"):
        raysfl.run(raysfl.config_from_kwargs(algo="epsl", **base), data=(x, y), loss="mse", model=mlp())
    # GAPSL's paper partition (dirichlet) is no longer refused: it splits real-valued targets by their
    # quantile bins (ours; tests/test_partition.py checks the skew)
    from raysfl.api import custom_objects
    from raysfl.resolve import validate

    cfg = raysfl.config_from_kwargs(algo="gapsl", **{**base, "partition": None})
    with custom_objects(cfg, data=(x, y), loss="mse", model=mlp()):
        assert validate(cfg).partition == "dirichlet"
    with pytest.raises(ConfigError, match="must be a 1-D array of integer class labels"):
        raysfl.run(raysfl.config_from_kwargs(algo="fedavg", **base), data=(x, y), model=mlp())  # forgot loss=
    with pytest.raises(ConfigError, match=r"outputs shape \(3,\) per sample; these data's targets have 2 value\(s\) "
                                          r"per sample, so the model must output \(2,\) outputs"):
        raysfl.run(raysfl.config_from_kwargs(algo="fedavg", **base), data=(x, y), loss="mse", model=mlp(outputs=3))


# ----------------------------------------------------------------------------- through the actors
def test_a_regression_task_learns_with_splitfed(quick):
    """MSE through client and server actors: the test loss falls far below predicting the mean."""
    x, y = regression()
    ds = custom_dataset(x, y, targets="values")
    baseline = float(((ds.y_test - ds.y_train.mean(0)) ** 2).mean())  # the best constant prediction
    cfg = quick(algo="splitfed_v2", rounds=6, local_steps=10, lr=0.05, cut=1, batch_size=32)
    res = raysfl.run(cfg, model=mlp(), data=(x, y), loss="mse")
    losses = [r["test_loss"] for r in res.metrics]
    assert res.config.loss == "mse" and all(math.isnan(r["test_accuracy"]) for r in res.metrics)
    assert losses[-1] < 0.35 * baseline, (losses, baseline)
    m = res.model()  # your module back, scoring what the run reported
    assert evaluate(m, ds.x_test, ds.y_test, ds.to_tensor, loss=BUILT_IN["mse"])[1] == pytest.approx(losses[-1])


@pytest.mark.slow  # four whole runs; CI runs the slow tests
def test_multilabel_and_your_own_loss_learn_in_every_shape_of_algorithm(quick):
    """BCE (multi-label) on a whole-model, a per-client-server and a vmap-batched algorithm, and
    a function of your own on the paired one: each learns."""
    x, y = multilabel()
    ds = custom_dataset(x, y, targets="values")
    majority = float(np.mean(np.maximum(ds.y_test.mean(0), 1 - ds.y_test.mean(0))))
    for algo in ("fedavg", "splitfed_v1", "gapsl"):
        cfg = quick(algo=algo, rounds=6, local_steps=10, lr=0.2, server_lr=0.2, cut=1, batch_size=32,
                    partition="iid")
        res = raysfl.run(cfg, model=mlp(outputs=3), data=(x, y), loss="bce")
        acc = [r["test_accuracy"] for r in res.metrics]  # per-label accuracy (1 - Hamming loss)
        assert acc[-1] >= max(0.8, majority + 0.2), (algo, acc, majority)
    xr, yr = regression()
    dr = custom_dataset(xr, yr, targets="values")
    constant = float(huber(torch.tensor(dr.y_train.mean(0)).expand(dr.num_test, -1), torch.tensor(dr.y_test)))
    cfg = quick(algo="fed_pairing", rounds=6, local_steps=10, lr=0.2, cut=1, batch_size=32, partition="iid")
    res = raysfl.run(cfg, model=mlp(), data=(xr, yr), loss=huber)
    assert res.config.loss == "custom-huber"
    losses = [r["test_loss"] for r in res.metrics]  # your loss, on the test set
    assert losses[-1] < 0.5 * constant, (losses, constant)  # far below the best constant prediction


def test_a_regression_run_writes_no_column_that_is_always_nan(quick):
    """Issue 46: psl's own-model columns that need classes (label mix, own-class share) or an
    accuracy (the averaged client's) are not written for a regression run; what is written has
    values -- test_accuracy alone stays, NaN, the one column every run has."""
    x, y = regression()
    res = raysfl.run(quick(algo="psl", rounds=2, cut=1, partition="iid"), model=mlp(), data=(x, y), loss="mse")
    rows = res.metrics
    always_nan = {k for k in rows[0] if all(isinstance(r[k], float) and math.isnan(r[k]) for r in rows)}
    assert always_nan == {"test_accuracy"}, always_nan
    assert math.isfinite(rows[-1]["eval_test_share"])
