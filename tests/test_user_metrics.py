"""Metrics of your own (raysfl/user_metrics.py; ``raysfl.run(cfg, metrics=...)``, ``--metric``):
their values are right on the test set and on the clients' local splits, combined by sample
count or by your function, written to Parquet, TensorBoard, MLflow and callbacks; a local test
split works for a regression; and a bad metric is one line."""

from __future__ import annotations

import math
import re
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

import raysfl
from raysfl.errors import ConfigError
from raysfl.user_metrics import UserMetrics, parse


def regression(n: int = 600, dim: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(dim, 1))) + rng.normal(scale=0.1, size=(n, 1))
    return x, y.astype(np.float32)


def mlp(dim: int = 6) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(dim, 16), nn.ReLU(), nn.Linear(16, 1))


def mae(outputs, targets):  # module-level functions of a test module: they reach the actors by value
    return (outputs - targets).abs().mean()


def rows(outputs, targets):  # the pass's size: shows how passes are combined
    return len(targets)


def _events(path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


# ----------------------------------------------------------------------------- no Ray
def test_values_are_combined_by_samples_or_by_your_function_and_bad_ones_are_one_line():
    m = UserMetrics({"m": lambda o, t: float(o.sum()), "d": lambda o, t: {"a": 1, "b": np.float32(2)}})
    m.probe(torch.ones(2, 1), torch.zeros(2, 1))
    assert m.columns() == ["test_m", "test_d_a", "test_d_b"] and m.columns("_local")[0] == "test_m_local"
    assert m.compute(torch.ones(3, 1), torch.zeros(3, 1)) == {"m": 3.0, "d_a": 1.0, "d_b": 2.0}
    passes = [(10, {"m": 1.0}), (30, {"m": 3.0})]
    assert m.combine(passes)["test_m"] == pytest.approx(2.5)  # by sample count
    m.aggregate = lambda pairs: sum(v for _, v in pairs) / len(pairs)
    assert m.combine(passes)["test_m"] == pytest.approx(2.0)  # yours: every pass alike
    assert math.isnan(m.combine([])["test_m"])
    for fn, message in [(lambda o, t: 1 / 0, "metric 'bad' raised ZeroDivisionError: division by zero"),
                        (lambda o, t: float("nan"), "metric 'bad' returned nan; a metric returns a finite number"),
                        (lambda o, t: "x", r"metric 'bad' returned 'x' \(str\); a metric returns a number"),
                        (lambda o, t: o, r"metric 'bad' returned a Tensor of shape \(2, 1\); a metric returns a number")]:
        with pytest.raises(ConfigError, match=message):
            UserMetrics({"bad": fn}).probe(torch.ones(2, 1), torch.zeros(2, 1))
    assert parse("mae=my.mod:mae, my.mod:r2 ,own") == [("mae", "my.mod:mae"), ("r2", "my.mod:r2"), ("own", None)]
    for bad, message in [("a=b", "is not name=module:function"), ("m:", "is not name=module:function"),
                         ("1x=m:f", "names columns"), ("accuracy=m:f", "raysfl writes itself"),
                         ("m:f,f=m:g", "given twice")]:
        with pytest.raises(ConfigError, match=message):
            parse(bad)


# ----------------------------------------------------------------------------- through the actors
def test_a_regression_reports_your_metric_on_test_and_local_splits_in_every_sink(quick, tmp_path, monkeypatch):
    """MAE of a regression (a loss without an accuracy) with local test splits: its value is the
    trained model's on the test set, the local splits give a test loss and MAE of their own (no
    accuracy column), and the columns reach Parquet, TensorBoard, MLflow and callbacks."""
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'raysfl[mlflow]')")
    from raysfl.data import custom_dataset
    from raysfl.metrics import read_rows

    monkeypatch.chdir(tmp_path)
    x, y = regression()
    ds = custom_dataset(x, y, targets="values")  # what data=(x, y) makes: its test split
    seen = []
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = quick(algo="fedavg", rounds=2, local_test_fraction=0.25, quantity_skew=1.0, mlflow=uri)
    res = raysfl.run(cfg, model=mlp(), data=(x, y), loss="mse", metrics={"mae": mae, "rows": rows},
                     callbacks=[seen.append])
    parquet = read_rows(res.run_dir / "metrics.parquet")
    last = parquet[-1]
    assert "test_accuracy_local" not in last  # a regression has no accuracy, on its local splits neither
    assert all(math.isfinite(r[k]) for r in parquet for k in ("test_mae", "test_mae_local", "test_loss_local"))
    with torch.no_grad():
        out = res.model()(torch.from_numpy(ds.x_test))
    assert last["test_mae"] == pytest.approx(float((out - torch.from_numpy(ds.y_test)).abs().mean()), rel=1e-5)
    # rows: one pass over the test set; the local splits combined by their sample counts
    sizes = np.array([len(t) for t in res._prepared.local_tests], dtype=float)
    assert len(set(sizes)) > 1  # quantity skew: the two ways of combining them differ
    assert last["test_rows"] == len(ds.y_test)
    assert last["test_rows_local"] == pytest.approx((sizes ** 2).sum() / sizes.sum())
    assert [r["test_mae"] for r in seen] == [r["test_mae"] for r in parquet]  # callbacks
    tb = _events(res.run_dir / "tb")
    assert [e.value for e in tb.Scalars("test/test_mae")] == pytest.approx([r["test_mae"] for r in parquet])
    assert [e.value for e in tb.Scalars("loss/test_loss_local")] == pytest.approx(
        [r["test_loss_local"] for r in parquet])
    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("raysfl").experiment_id])
    history = client.get_metric_history(run.info.run_id, "test_mae_local")
    assert [(m.step, m.value) for m in history] == [(r["round"], pytest.approx(r["test_mae_local"])) for r in parquet]


METRICS_MODULE = '''
def acc(outputs, targets):
    return (outputs.argmax(1) == targets).float().mean()

def rows(outputs, targets):
    return len(targets)

def unweighted(pairs):
    return sum(v for _, v in pairs) / len(pairs)

def late(outputs, targets):
    if len(targets) > 64:  # fine on the 64 rows of the start's probe, not on the whole test set
        raise ValueError("too many rows")
    return 0.0

def broken(outputs, targets):
    return {"a": 1.0, "b-c": 2.0}
'''


@pytest.fixture
def metrics_module(tmp_path, monkeypatch):
    """``my_metrics.py`` in the current directory, as a user's module beside them."""
    (tmp_path / "my_metrics.py").write_text(textwrap.dedent(METRICS_MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("my_metrics", None)


def test_cli_metric_with_your_aggregation(metrics_module, ray_session):
    """``--metric module:fn`` on a classification: your accuracy equals the run's own on the test
    set, and with your aggregation (every client alike) equals test_accuracy_local too, which is
    the unweighted mean over the clients."""
    from raysfl.cli import main
    from raysfl.metrics import read_rows
    from raysfl.resolve import validate_run
    from raysfl.runtime.experiment import prepare

    out = metrics_module / "runs"
    rc = main(["run", "--algo", "fedavg", "--clients", "4", "--rounds", "1", "--local-steps", "2", "--batch-size",
               "16", "--client-actors", "2", "--local-test-fraction", "0.25", "--quantity-skew", "1",
               "--no-progress", "--out", str(out), "--name", "cli", "--metric", "my_metrics:acc",
               "--metric", "n=my_metrics:rows", "--metrics-aggregation", "my_metrics:unweighted"])
    assert rc == 0
    (row,) = read_rows(out / "cli" / "metrics.parquet")
    assert row["test_acc"] == pytest.approx(row["test_accuracy"], abs=1e-6)
    assert row["test_acc_local"] == pytest.approx(row["test_accuracy_local"], abs=1e-6)
    assert math.isfinite(row["test_loss_local"])
    cfg = raysfl.load_run(out / "cli").config
    assert cfg.metrics == "my_metrics:acc,n=my_metrics:rows"  # recorded: a resume imports them again
    sizes = [len(t) for t in prepare(*validate_run(cfg)).local_tests]
    assert len(set(sizes)) > 1 and row["test_n_local"] == pytest.approx(np.mean(sizes))  # every client alike


@pytest.mark.parametrize("metric, message", [
    ("x=y", r"metric 'x=y' is not name=module:function"),
    ("my_metrics:nope", r"metric 'my_metrics:nope': module my_metrics has no function nope"),
    ("no_such_module_xyz:f", r"cannot import no_such_module_xyz"),
    ("loss=my_metrics:acc", r"would make columns raysfl writes itself"),
])
def test_bad_metric_flags_are_one_line_before_ray_starts(metrics_module, capsys, metric, message):
    from raysfl.cli import main

    rc = main(["run", "--rounds", "1", "--no-progress", "--out", str(metrics_module / "runs"), "--metric", metric])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("raysfl: error: ") and re.search(message, err), err


@pytest.mark.parametrize("metric, message", [
    ("my_metrics:broken", r"metric 'broken' returned key 'b-c'; its keys name columns"),  # at the start
    ("my_metrics:late", r"metric 'late' raised ValueError: too many rows"),  # on the fed server, round 1
])
def test_a_metric_that_fails_in_the_run_is_one_line(metrics_module, ray_session, capsys, metric, message):
    from raysfl.cli import main

    rc = main(["run", "--algo", "fedavg", "--clients", "2", "--rounds", "1", "--local-steps", "1",
               "--client-actors", "1", "--no-progress", "--out", str(metrics_module / "runs"),
               "--metric", metric])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and re.search(message, err), err
