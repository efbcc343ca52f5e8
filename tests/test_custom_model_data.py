"""Your own model and data (``raysfl.run(cfg, model=..., data=...)``): two algorithms learn on
an MLP over NumPy arrays, the models come back, and mistakes are one-line ConfigErrors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import raysfl
from raysfl.data import as_dataset, custom_dataset
from raysfl.errors import ConfigError
from raysfl.evaluation import evaluate
from raysfl.models import SplitModel, split_sequential


def blobs(n: int = 600, dim: int = 12, classes: int = 3, seed: int = 0):
    """Gaussian blobs: one centre per class, unit noise (separable, but not trivially)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=1.5, size=(classes, dim))
    y = rng.integers(0, classes, n)
    return (centres[y] + rng.normal(size=(n, dim))).astype(np.float32), y


def mlp(dim: int = 12, classes: int = 3) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, classes))


@pytest.mark.slow  # two whole runs; CI runs the slow tests (`make test` stays near 10 minutes)
def test_two_algorithms_learn_on_your_mlp_and_arrays_and_the_models_come_back(quick):
    x, y = blobs()
    net = mlp()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    ds = custom_dataset(x, y, name="blobs")  # the same 80/20 split raysfl.run makes of (x, y)
    results = {}
    for algo in ("splitfed_v2", "psl"):
        cfg = quick(algo=algo, clients=4, rounds=4, local_steps=5, lr=0.05, cut=1)
        res = raysfl.run(cfg, model=net, data=(x, y))
        assert (res.config.model, res.config.dataset) == ("custom-model", "custom-data")
        results[algo] = res
        acc = [r["test_accuracy"] for r in res.metrics]
        assert acc[-1] >= 0.85, (algo, acc)  # it learns (chance: 1/3)
    # the user's object is never trained itself
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    # splitfed_v2: one global model, the one the run evaluated last
    m = results["splitfed_v2"].model()
    assert type(m) is nn.Sequential and m.state_dict().keys() == net.state_dict().keys()  # your module back
    assert evaluate(m, ds.x_test, ds.y_test, ds.to_tensor)[0] == pytest.approx(
        results["splitfed_v2"].final["test_accuracy"])
    assert results["splitfed_v2"].client_models() == {}
    # psl: no single global model; each client's own client side + the shared server side,
    # whose mean accuracy is what the run reports (every client took part in the last round)
    with pytest.raises(ConfigError, match="keeps no single global model"):
        results["psl"].model()
    own = results["psl"].client_models()
    assert sorted(own) == [0, 1, 2, 3]
    accs = [evaluate(own[c], ds.x_test, ds.y_test, ds.to_tensor)[0] for c in own]
    assert np.mean(accs) == pytest.approx(results["psl"].final["test_accuracy"])
    # the same from the run directory, given the model again (it is not stored there)
    again = raysfl.load_run(results["splitfed_v2"].run_dir, model=net, data=(x, y))
    assert all(torch.equal(a, b) for a, b in zip(again.model().state_dict().values(), m.state_dict().values()))
    # raysfl export needs neither: the weights are in the checkpoint
    from raysfl.cli import main

    assert main(["export", str(again.run_dir), "--out", str(again.run_dir / "net.pt")]) == 0
    exported = torch.load(again.run_dir / "net.pt", weights_only=True)
    assert all(torch.equal(exported[k], v) for k, v in m.state_dict().items())
    # resuming needs them again, and says so
    with pytest.raises(ConfigError, match=r"model 'custom-model' is your own model: pass it again"):
        raysfl.run(raysfl.resume_config(results["splitfed_v2"].run_dir, {"rounds": 5}), data=(x, y))


def test_your_model_comes_back_as_your_module_in_your_keys(quick, tmp_path):
    x, y = blobs(300)
    net = mlp()
    res = raysfl.run(quick(algo="splitfed_v2", clients=2, rounds=1, cut=1), model=net, data=(x, y))
    trained = res.model()
    assert type(trained) is nn.Sequential and list(trained.state_dict()) == list(net.state_dict())
    assert list(res.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    # raysfl export: a state_dict your own nn.Sequential loads as it is
    from raysfl.cli import main

    assert main(["export", str(res.run_dir), "--out", str(tmp_path / "net.pt")]) == 0
    mine = mlp()
    mine.load_state_dict(torch.load(tmp_path / "net.pt", weights_only=True))
    assert all(torch.equal(mine.state_dict()[k], v) for k, v in trained.state_dict().items())
    # from the run directory: the module needs your model again, and says how to pass it
    with pytest.raises(ConfigError, match=r"pass it to load_run.*raysfl.load_run\(run_dir, model=my_model\).model\(\)"):
        raysfl.load_run(res.run_dir).model()
    assert raysfl.load_run(res.run_dir).state_dict().keys() == net.state_dict().keys()
    again = raysfl.load_run(res.run_dir, model=mlp()).model()
    assert all(torch.equal(again.state_dict()[k], v) for k, v in trained.state_dict().items())
    # a list of blocks comes back as nn.Sequential(*blocks)
    blocks = [nn.Sequential(nn.Linear(12, 16), nn.ReLU()), nn.Linear(16, 3)]
    listed = raysfl.run(quick(algo="fedavg", clients=2, rounds=1, cut=1), model=blocks, data=(x, y)).model()
    assert type(listed) is nn.Sequential and list(listed.state_dict()) == ["0.0.weight", "0.0.bias", "1.weight",
                                                                          "1.bias"]


def test_data_forms_give_the_same_data_set():
    x, y = blobs(200)
    a = as_dataset((x, y))
    b = as_dataset(torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)))
    c = as_dataset((a.x_train, a.y_train, a.x_test, a.y_test))
    tr = torch.utils.data.TensorDataset(torch.from_numpy(a.x_train), torch.from_numpy(a.y_train))
    te = torch.utils.data.TensorDataset(torch.from_numpy(a.x_test), torch.from_numpy(a.y_test))
    d = as_dataset((tr, te))
    for other in (b, c, d):
        assert np.array_equal(other.x_train, a.x_train) and np.array_equal(other.y_test, a.y_test)
    assert (a.num_train, a.num_test, a.num_classes, a.input_shape) == (160, 40, 3, (12,))
    # the test split is stratified: every class in both
    assert set(a.y_test) == set(a.y_train) == {0, 1, 2}
    # samples are used as given unless normalisation is asked for
    assert torch.equal(a.to_tensor(a.x_test[:3]), torch.from_numpy(a.x_test[:3]))
    img = custom_dataset(np.full((10, 1, 2, 2), 255, np.uint8), np.arange(10) % 2, mean=0.5, std=0.25, scale=255)
    assert torch.allclose(img.to_tensor(img.x_train[:1]), torch.full((1, 1, 2, 2), 2.0))


def test_split_sequential_groups_parameter_free_layers_with_the_layer_before():
    seq = nn.Sequential(nn.Flatten(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Dropout(),
                        nn.Linear(8, 2))
    blocks = split_sequential(seq)
    assert [[type(m).__name__ for m in b] for b in blocks] == [
        ["Flatten", "Linear", "ReLU"], ["Linear", "ReLU", "Dropout"], ["Linear"]]
    assert blocks[0][1] is seq[1]  # the same modules, not copies
    assert [len(b) for b in split_sequential(seq, at=[3])] == [3, 4]
    with pytest.raises(ConfigError, match="at least 2"):
        split_sequential(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(ConfigError, match="outside the 7 children"):
        split_sequential(seq, at=[9])


@pytest.mark.parametrize("model,data,message", [
    (lambda: mlp(dim=5), None, r"block 0 \(Sequential\) fails on input of shape \(12,\)"),
    (lambda: mlp(classes=4), None, r"outputs shape \(4,\) per sample; .* must output \(3,\) logits"),
    (lambda: nn.Linear(12, 3), None, "model must be a raysfl SplitModel, a list of nn.Module blocks or an nn.Sequential"),
    (lambda: SplitModel("m", list(mlp()), (5,), 3), None, r"built for inputs \(5,\) and 3 classes, but the data have \(12,\)"),
    (mlp, lambda x, y: (x, y.astype(float) + 0.5), "must hold integer class labels"),
    (mlp, lambda x, y: (x, y[:-1]), "600 samples but 599 labels"),
    (mlp, lambda x, y: [x], "data must be .* got list of 1"),
    (mlp, lambda x, y: (x, y, x[:, :3], y), r"test samples have shape \(3,\) but training samples \(12,\)"),
])
def test_bad_model_or_data_is_one_line_before_ray_starts(model, data, message, tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started"))
    x, y = blobs()
    cfg = raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=1, out=str(tmp_path), progress=False)
    with pytest.raises(ConfigError, match=message) as e:
        raysfl.run(cfg, model=model(), data=data(x, y) if data else (x, y))
    assert "\n" not in str(e.value)


def test_your_model_on_a_built_in_data_set_validates_its_cuts():
    from raysfl.api import custom_objects
    from raysfl.resolve import validate

    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))  # digits: 1x8x8
    cfg = raysfl.config_from_kwargs(algo="splitfed_v2", dataset="digits", cut=2, progress=False)
    with custom_objects(cfg, model=net):
        with pytest.raises(ConfigError, match="cut 2 is not valid for model 'custom-model'; valid cuts: 1..1"):
            validate(cfg)
        cfg.cut = 1
        assert validate(cfg).model == "custom-model"
    with pytest.raises(ConfigError, match="is your own model: pass it again"):
        validate(cfg)  # outside the run, the name means nothing


@pytest.mark.slow
def test_the_example_runs_as_written(ray_session, tmp_path):
    """examples/custom_model_data.py (synthetic data, nothing downloaded), shortened."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "custom_model_data.py"
    spec = importlib.util.spec_from_file_location("custom_model_data_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    accs = example.main(["--rounds", "3", "--out", str(tmp_path)])
    assert accs["splitfed_v2"] > 0.6 and accs["psl"] > 0.5  # 4 classes: chance 0.25
