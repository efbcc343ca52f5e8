"""A file-backed data set on a cluster run is read where it lands (issue 47,
raysfl/data/landing.py): the driver holds the training labels and the test split, never the
training images; each actor reads the set from --data-root on its node and refuses a copy whose
labels are not the driver's. Files here are a small MNIST in torchvision's own raw layout."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from raysfl.data import landing, load_dataset
from raysfl.data.arrays import with_validation
from raysfl.errors import ConfigError


def write_mnist(root, n_train: int = 60, n_test: int = 20, seed: int = 0, flip_label: bool = False):
    """MNIST's four idx files (uncompressed, as torchvision leaves them after a download) under
    ``root/MNIST/raw``: random pixels, labels 0..9 in turn."""
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        if flip_label and split == "train":
            labels[0] = (labels[0] + 1) % 10
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, n) + labels.tobytes())
    return root


def test_the_driver_holds_the_labels_and_the_test_split_but_no_training_image(tmp_path):
    root = write_mnist(tmp_path / "data")
    whole = load_dataset("mnist", str(root))
    driver = landing.labels_only("mnist", str(root))
    assert isinstance(driver.x_train, landing.NotOnTheDriver) and driver.x_train.shape == (60, 1, 28, 28)
    np.testing.assert_array_equal(driver.y_train, whole.y_train)
    np.testing.assert_array_equal(driver.x_test, whole.x_test)
    with pytest.raises(RuntimeError, match="holds no training images"):
        np.asarray(driver.x_train)


def test_an_actor_reads_on_its_node_the_same_samples_the_driver_partitioned(tmp_path):
    root = write_mnist(tmp_path / "data")
    driver = landing.labels_only("mnist", str(root), validation=0.2)
    given = landing.for_actors(driver, str(root), 0.2)
    assert isinstance(given, landing.OnEachNode)  # a descriptor, not the arrays
    here = landing.on_this_node(given)
    expected = with_validation(load_dataset("mnist", str(root)), 0.2)
    np.testing.assert_array_equal(here.x_train, expected.x_train)
    np.testing.assert_array_equal(here.y_train, driver.y_train)
    np.testing.assert_array_equal(here.y_test, driver.y_test)  # the validation split, the same rows
    assert len(driver.x_train) == len(here.x_train)


def test_a_node_with_another_copy_or_none_is_one_line(tmp_path):
    root = write_mnist(tmp_path / "data")
    driver = landing.labels_only("mnist", str(root))
    given = landing.for_actors(driver, str(root), 0.0)
    other = write_mnist(tmp_path / "other", flip_label=True)
    with pytest.raises(ConfigError, match=r"is not the copy the driver read \(its labels differ\)") as e:
        landing.on_this_node(landing.OnEachNode(**{**given.__dict__, "data_root": str(other)}))
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="must be the same path on every node") as e:
        landing.on_this_node(landing.OnEachNode(**{**given.__dict__, "data_root": str(tmp_path / "none")}))
    assert "\n" not in str(e.value)


def test_embedded_sets_and_runs_on_one_machine_keep_the_arrays(tmp_path, monkeypatch):
    digits = load_dataset("digits")
    assert landing.for_actors(digits, None, 0.0) is digits  # embedded: one copy through the object store
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not landing.joins_a_cluster()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert landing.joins_a_cluster()
