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
    (mlp, lambda x, y: HFLike({"x": list(x), "target": list(y)}), r"data has no label column 'label'; its columns: "
                                                                  r"x, target"),
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


class HFLike:
    """What raysfl reads of a Hugging Face ``datasets.Dataset`` (not installed here): ``len``,
    ``ds[i]`` a dict of the row's columns, ``ds["col"]`` a whole column, ``column_names`` and
    ``features[label].num_classes`` (a ClassLabel)."""

    def __init__(self, columns: dict, num_classes: int | None = None):
        self._cols = columns
        self.features = {"label": type("ClassLabel", (), {"num_classes": num_classes})()} if num_classes else {}
        self.column_reads = 0

    @property
    def column_names(self) -> list[str]:
        return list(self._cols)

    def __len__(self) -> int:
        return len(next(iter(self._cols.values())))

    def __getitem__(self, key):
        if isinstance(key, str):
            self.column_reads += 1
            return self._cols[key]
        return {c: v[key] for c, v in self._cols.items()}


def test_a_hugging_face_style_dataset_trains_on_the_partition_given(quick):
    """A data set of dicts (lists in one split, torch tensors in the other) learns, and the run's
    clients hold exactly the samples an array of client ids gives them."""
    x, y = blobs(800)
    train = HFLike({"features": [r.tolist() for r in x[:600]], "label": y[:600].tolist()}, num_classes=3)
    test = HFLike({"features": [torch.from_numpy(r) for r in x[600:]], "label": [torch.tensor(v) for v in y[600:]]})
    ids = (y[:600] + np.arange(600) % 2) % 4  # 4 clients, each of two or three classes
    cfg = quick(algo="splitfed_v2", clients=4, rounds=4, local_steps=5, lr=0.05, cut=1)
    res = raysfl.run(cfg, model=mlp(), data=(train, test), partition=ids)
    assert train.column_reads == 2  # read by column, once
    acc = [r["test_accuracy"] for r in res.metrics]
    assert acc[-1] >= 0.85, acc  # it learns (chance: 1/3)
    ds = res._prepared.ds
    assert np.array_equal(ds.x_train, x[:600]) and np.array_equal(ds.y_test, y[600:]) and ds.num_classes == 3
    # every client trained on exactly the samples given: the run's parts, its clients.json, its kept copy
    given = [np.flatnonzero(ids == c) for c in range(4)]
    assert [p.tolist() for p in res._prepared.parts] == [g.tolist() for g in given]
    import json

    clients = json.loads((res.run_dir / "clients.json").read_text())
    assert [c["label_histogram"] for c in clients] == [np.bincount(y[:600][g], minlength=3).tolist() for g in given]
    assert np.array_equal(np.load(res.run_dir / "partition.npy"), ids)
    assert json.loads((res.run_dir / "config.json").read_text())["partition"] == res.config.partition
    assert res.config.partition.startswith("custom-")


def test_a_partition_function_is_kept_in_the_run_and_resumed_with_it(quick):
    x, y = blobs(300)
    calls = []

    def by_label(targets, num_clients, seed):
        calls.append(seed)
        return targets % num_clients

    cfg = quick(algo="psl", clients=3, rounds=1, cut=1)
    res = raysfl.run(cfg, model=mlp(), data=(x, y), partition=by_label)
    assert calls == [0]  # once, with the run's seed
    ds = custom_dataset(x, y)  # the split raysfl.run makes of (x, y)
    ids = ds.y_train % 3
    assert np.array_equal(np.load(res.run_dir / "partition.npy"), ids)
    assert [p.tolist() for p in res._prepared.parts] == [np.flatnonzero(ids == c).tolist() for c in range(3)]
    assert res.config.partition == "custom-by_label"
    # a resume reads the kept copy: the function is not needed again
    again = raysfl.run(raysfl.resume_config(res.run_dir, {"rounds": 2}), model=mlp(), data=(x, y))
    assert len(again.metrics) == 2 and calls == [0]
    assert [p.tolist() for p in again._prepared.parts] == [p.tolist() for p in res._prepared.parts]
    # ... and refuses another partition in one line
    with pytest.raises(ConfigError, match="cannot change the partition when resuming") as e:
        raysfl.run(raysfl.resume_config(res.run_dir, {"rounds": 3}), model=mlp(), data=(x, y), partition=(ids + 1) % 3)
    assert "\n" not in str(e.value)
    # load_run rebuilds the clients (PSL's own models) from the kept copy too
    assert sorted(raysfl.load_run(res.run_dir, model=mlp(), data=(x, y)).client_models()) == [0, 1, 2]


@pytest.mark.parametrize("partition,message", [
    (lambda ids: ids[:-1], r"partition gives 479 client ids but the training set has 480 samples"),
    (lambda ids: ids + 1, r"partition gives sample \d+ client id 4; allowed: 0..3 \(clients=4\)"),
    (lambda ids: np.minimum(ids, 2), r"gives client 3 no samples; every client needs at least one: set clients=3"),
    (lambda ids: lambda t, k, s: t[:10], r"partition gives 10 client ids but the training set has 480"),
    (lambda ids: lambda t, k, s: 1 / 0, r"partition function 'lambda' failed: ZeroDivisionError: division by zero"),
    (lambda ids: "nope", r"unknown partition 'nope'; allowed: iid, dirichlet, pathological, shards, a .npy file"),
    (lambda ids: {"a": 1}, r"partition must be a named partitioner, an array of client ids"),
])
def test_a_bad_partition_is_one_line_before_ray_starts(partition, message, tmp_path, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("Ray started"))
    x, y = blobs()
    ids = np.arange(480) % 4
    cfg = raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=1, out=str(tmp_path / "runs"),
                                    progress=False)
    with pytest.raises(ConfigError, match=message) as e:
        raysfl.run(cfg, model=mlp(), data=(x, y), partition=partition(ids))
    assert "\n" not in str(e.value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run directory


def test_dict_values_become_arrays_and_bad_columns_are_one_line():
    """PIL images (grey and RGB) become (C, H, W), tensors their values; a data set without column
    access is read item by item; a missing column is named with the ones there are."""
    from PIL import Image

    from raysfl.data import from_dicts

    class Items:  # a torch-style Dataset of dicts: no column access
        def __init__(self, rows):
            self.rows = rows

        def __len__(self):
            return len(self.rows)

        def __getitem__(self, i):
            return self.rows[i]

    rng = np.random.default_rng(0)
    grey = (rng.random((10, 5, 6)) * 255).astype(np.uint8)
    rgb = (rng.random((10, 5, 6, 3)) * 255).astype(np.uint8)
    labels = np.arange(10) % 2
    rows = [{"img": Image.fromarray(grey[i]), "rgb": Image.fromarray(rgb[i]), "y": torch.tensor(labels[i]),
             "n": [float(i), 2.0 * i]} for i in range(10)]
    a = as_dataset(from_dicts(Items(rows), features="img", label="y"))
    b = custom_dataset(grey[:, None], labels)
    assert a.input_shape == (1, 5, 6) and np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    c = as_dataset(from_dicts(Items(rows), features="rgb", label="y"))
    assert np.array_equal(c.x_train, custom_dataset(rgb.transpose(0, 3, 1, 2), labels).x_train)
    d = as_dataset(from_dicts(Items(rows), features=["n"], label="y"), targets="classes")
    assert d.input_shape == (2,)
    hf = HFLike({"x": [[0.0, 1.0]] * 4, "y": [0, 1, 0, 1], "z": [1, 2, 3, 4]})
    for kw, message in (({"features": "img", "label": "y"}, "data has no feature column 'img'; its columns: x, y, z"),
                        ({}, r"data has no label column 'label'; its columns: x, y, z \(name it"),
                        ({"label": "y"}, r"data has columns x, y, z: name the feature column\(s\)"),
                        ({"features": ["x", "y"], "label": "y"}, "column 'y' of data is the label")):
        with pytest.raises(ConfigError, match=message) as e:
            from_dicts(hf, **kw)
        assert "\n" not in str(e.value)
    text = HFLike({"text": ["a b", "c d"], "label": [0, 1]})
    with pytest.raises(ConfigError, match=r"column 'text' of data holds <U3 values such as 'a b', not numbers"):
        as_dataset(text)
    words = HFLike({"x": [[0.0], [1.0]], "label": ["cat", "dog"]})
    with pytest.raises(ConfigError, match=r"column 'label' of data holds <U3 .* map the classes to 0, 1, 2, ... "
                                          r"\(a Hugging Face data set: ds.class_encode_column\('label'\)\)"):
        as_dataset(words)
    with pytest.raises(ConfigError, match="y must hold integer class labels, got <U3 values such as 'cat'"):
        as_dataset((np.zeros((4, 2)), np.array(["cat", "dog"] * 2)))


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
