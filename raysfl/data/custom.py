"""Your own data set: arrays or a torch ``Dataset`` as a :class:`DatasetArrays`.

``raysfl.run(cfg, data=...)`` accepts

* ``(x, y)``: one set of samples; a fixed, stratified 80/20 train/test split is made of it
  (seed 0, the rule of the embedded ``digits``), so every run tests on the same samples;
* ``(x_train, y_train, x_test, y_test)``;
* a ``torch.utils.data.Dataset`` of ``(x, y)`` pairs (split 80/20 likewise), or a pair of
  them ``(train, test)``;
* a :class:`DatasetArrays` (e.g. from :func:`custom_dataset`, which also names the data set
  and can normalise it);
* a map-style data set of dicts (``len(ds)``, ``ds[i]`` a dict of columns: a Hugging Face
  ``datasets.Dataset``, a torch Dataset of dicts), a ``(train, test)`` pair of them or a
  mapping with ``"train"`` (and ``"test"``) such as a ``datasets.DatasetDict``: the ``"label"``
  column is the label and the one other column the samples (:mod:`raysfl.data.dicts`;
  :func:`raysfl.from_dicts` names other columns);

Samples may have any shape (``(features,)`` rows for an MLP, ``(C, H, W)`` images, ...);
labels are integers ``0 .. num_classes - 1``, or, for a loss of real-valued targets
(``raysfl.run(..., loss="mse")``, :mod:`raysfl.objective`), numbers of shape ``(N,)`` or
``(N, k)`` (``targets="values"``: held as float32 ``(N, k)``, the model outputs k per sample).
Like every raysfl data set the samples are held whole in memory (a Dataset is read once, item
by item) and shipped to the actors once, as one object. Your data are used as given: no normalisation unless you ask
:func:`custom_dataset` for one.

While a run with your data is going on, its name (``custom-<name>``) is registered in this
process (:func:`registered`), so the driver's validation (``dataset_info``, the
algorithms' ``validate``) sees it like a built-in data set; the actors never look it up by
name, they receive the arrays.
"""

from __future__ import annotations

import math
import re
import numpy as np

from raysfl.data import dicts
from raysfl.data.arrays import DatasetArrays, stratified_test_indices
from raysfl.errors import ConfigError, excerpt
from raysfl.run_registry import RunRegistry

PREFIX = "custom-"
_TEST_FRACTION = 0.2
_SPLIT_SEED = 0
_RUNS = RunRegistry("dataset", "raysfl.run(cfg, data=...)", "raysfl.data.custom_dataset(..., name=...)")


def _finite(a: np.ndarray, what: str, kind: str = "samples") -> None:
    """Refuse an array holding NaN or inf with one line naming the array, the first bad sample
    and its position in the sample: left in, it makes the loss NaN and the run stops as
    "diverged", blaming the learning rate for the data. ``a`` is already float32, so a value
    beyond float32's range (about 3.4e38), which became inf, is caught too."""
    bad = ~np.isfinite(a)
    if not bad.any():
        return
    at = np.unravel_index(int(bad.argmax()), a.shape)  # the first non-finite value
    where = f"sample {at[0]}" + (f", column {at[1]}" if len(at) == 2 else
                                 f", position {tuple(int(i) for i in at[1:])}" if len(at) > 2 else "")
    n = int(bad.sum())
    raise ConfigError(f"{what} holds {a[at]} at {where} ({n:,} non-finite value{'s' if n > 1 else ''} in all); "
                      f"raysfl trains on finite {kind}, not NaN or infinite values: drop or fill them before the run"
                      + (" (a value beyond float32's range, about 3.4e38, becomes inf)" if np.isinf(a[at]) else ""))


def _labels(y, what: str) -> np.ndarray:
    y = np.asarray(y.numpy() if hasattr(y, "numpy") else y)
    if y.ndim != 1:
        raise ConfigError(f"{what} must be a 1-D array of integer class labels, got shape {y.shape}")
    if y.size and not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        raise ConfigError(f"{what} must hold integer class labels, got {y.dtype} values such as {excerpt(y[0].item())}; "
                          f"map them to 0, 1, 2, ... first")
    if y.size and np.issubdtype(y.dtype, np.floating):
        _finite(y.astype(np.float64), what, "labels")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ConfigError(f"{what} must hold integer class labels, got dtype {y.dtype} with fractions")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise ConfigError(f"{what} must hold class labels 0, 1, 2, ...; got {int(y.min())}")
    return y


def _values(y, what: str) -> np.ndarray:
    """Real-valued targets as float32 ``(N, k)``."""
    y = np.asarray(y.numpy() if hasattr(y, "numpy") else y)
    if y.ndim not in (1, 2):
        raise ConfigError(f"{what} must be targets of shape (N,) or (N, k) for this loss, got shape {y.shape}")
    if y.size and not (np.issubdtype(y.dtype, np.number) or y.dtype == bool):
        raise ConfigError(f"{what} must be numeric targets for this loss, got dtype {y.dtype}")
    with np.errstate(over="ignore"):
        y = np.ascontiguousarray(y, dtype=np.float32)
    _finite(y, what, "targets")
    return y.reshape(len(y), -1)


def _samples(x, what: str) -> np.ndarray:
    x = np.asarray(x.numpy() if hasattr(x, "numpy") else x)
    if x.ndim < 2:
        raise ConfigError(f"{what} must be an array of samples (N, ...), got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise ConfigError(f"{what} must be numeric, got dtype {x.dtype}")
    with np.errstate(over="ignore"):  # a value beyond float32's range becomes inf, which _finite names
        x = np.ascontiguousarray(x, dtype=np.float32)
    _finite(x, what)
    return x


def _name(name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.]+", "_", str(name)).strip("_") or "data"
    return clean if clean.startswith(PREFIX) else PREFIX + clean


def custom_dataset(x_train, y_train, x_test=None, y_test=None, *, name: str = "data",
                   num_classes: int | None = None, mean=None, std=None, scale: float = 1.0,
                   targets: str = "classes"):
    """Arrays as a raysfl data set named ``custom-<name>``.

    ``targets``: ``"classes"`` (integer labels, the default) or ``"values"`` (real-valued
    targets ``(N,)`` or ``(N, k)`` for a loss such as ``mse`` or ``bce``; ``num_classes`` is
    then k, the outputs per sample). Without ``x_test``/``y_test`` a fixed 20 % of the samples
    is the test set (stratified by class for class labels, at random for values).
    ``num_classes`` defaults to the largest label + 1. ``mean``/``std`` (one value per
    channel, i.e. per entry of the samples' first axis) and ``scale`` normalise every batch
    as ``(x / scale - mean) / std``, like the built-in image sets; by default samples are
    used as given.
    """

    if targets not in ("classes", "values"):
        raise ConfigError(f"targets must be 'classes' or 'values', got {targets!r}")
    read_y = _labels if targets == "classes" else _values
    x = _samples(x_train, "x_train" if x_test is not None else "x")
    y = read_y(y_train, "y_train" if x_test is not None else "y")
    if len(x) != len(y):
        raise ConfigError(f"data has {len(x)} samples but {len(y)} labels")
    if (x_test is None) != (y_test is None):
        raise ConfigError("give both x_test and y_test, or neither (then 20% of the samples are the test set)")
    if x_test is None:
        if len(y) < 2:
            raise ConfigError(f"data needs at least 2 samples to split into train and test, got {len(y)}")
        is_test = np.zeros(len(y), dtype=bool)
        if targets == "classes":
            is_test[stratified_test_indices(y, _TEST_FRACTION, _SPLIT_SEED)] = True
        else:
            n_test = min(len(y) - 1, int(np.ceil(_TEST_FRACTION * len(y))))
            is_test[np.random.default_rng(_SPLIT_SEED).permutation(len(y))[:n_test]] = True
        x, y, xt, yt = x[~is_test], y[~is_test], x[is_test], y[is_test]
    else:
        xt, yt = _samples(x_test, "x_test"), read_y(y_test, "y_test")
        if len(xt) != len(yt):
            raise ConfigError(f"test data has {len(xt)} samples but {len(yt)} labels")
        if xt.shape[1:] != x.shape[1:]:
            raise ConfigError(f"test samples have shape {xt.shape[1:]} but training samples {x.shape[1:]}")
    if not len(y) or not len(yt):
        raise ConfigError(f"data needs training and test samples, got {len(y)} and {len(yt)}")
    if targets == "values":
        if yt.shape[1] != y.shape[1]:
            raise ConfigError(f"test targets have {yt.shape[1]} values per sample but training targets {y.shape[1]}")
        if num_classes is not None and int(num_classes) != y.shape[1]:
            raise ConfigError(f"num_classes is {num_classes} but the targets have {y.shape[1]} values per sample "
                              f"(for real-valued targets it is the model's outputs per sample: leave it out)")
        classes = int(y.shape[1])
        return DatasetArrays(_name(name), x, y, xt, yt, classes, tuple(int(s) for s in x.shape[1:]),
                             *_normalisation(x, mean, std, scale), targets="values")
    top = int(max(y.max(), yt.max())) + 1
    classes = top if num_classes is None else int(num_classes)
    if classes < 2:
        raise ConfigError(f"data needs at least 2 classes, got {classes}")
    if top > classes:
        raise ConfigError(f"labels go up to {top - 1} but num_classes is {classes}")
    return DatasetArrays(_name(name), x, y, xt, yt, classes, tuple(int(s) for s in x.shape[1:]),
                         *_normalisation(x, mean, std, scale))


def _normalisation(x: np.ndarray, mean, std, scale) -> tuple[tuple, tuple, float]:
    """(mean, std, scale) of custom_dataset's normalisation, checked against the samples."""
    if (mean is None) != (std is None):
        raise ConfigError("give both mean and std (one value per channel), or neither")
    mean = tuple(float(v) for v in np.atleast_1d(mean)) if mean is not None else ()
    std = tuple(float(v) for v in np.atleast_1d(std)) if std is not None else ()
    if mean and (x.ndim < 3 or len(mean) != x.shape[1] or len(std) != len(mean)):
        raise ConfigError(f"mean/std need one value per channel of samples shaped (C, ...), got "
                          f"{len(mean)}/{len(std)} values for samples of shape {x.shape[1:]}")
    if not all(math.isfinite(v) for v in mean + std) or not all(v > 0 for v in std):
        raise ConfigError(f"mean/std must be finite numbers and std > 0 (each batch is divided by it), got "
                          f"mean {mean}, std {std}")
    if not scale > 0:
        raise ConfigError(f"scale must be > 0, got {scale}")
    return mean, std, float(scale)


def _from_torch(ds, what: str, targets: str = "classes") -> tuple[np.ndarray, np.ndarray]:
    """Every (x, y) item of a torch Dataset, stacked."""
    try:
        n = len(ds)
    except TypeError:
        raise ConfigError(f"{what} must be a map-style torch Dataset (with __len__)") from None
    xs, ys = [], []
    for i in range(n):
        item = ds[i]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ConfigError(f"{what}[{i}] must be an (x, y) pair, got {type(item).__name__}")
        x, y = item
        xs.append(np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float32))
        if targets == "classes":
            ys.append(int(y.item() if hasattr(y, "item") else y))
        else:
            ys.append(np.asarray(y.numpy() if hasattr(y, "numpy") else y, dtype=np.float32))
    if not xs:
        raise ConfigError(f"{what} is empty")
    try:
        return np.stack(xs), (np.asarray(ys, dtype=np.int64) if targets == "classes" else np.stack(ys))
    except ValueError as e:
        raise ConfigError(f"{what}'s samples do not all have the same shape ({e})") from None


def _is_torch_dataset(obj) -> bool:
    try:
        from torch.utils.data import Dataset
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(obj, Dataset)


def as_dataset(data, name: str = "data", targets: str = "classes"):
    """``data`` in any of the accepted forms (module docstring) as a DatasetArrays, its labels
    read as ``targets`` (the run's loss says which, :mod:`raysfl.objective`)."""

    if isinstance(data, DatasetArrays):
        if not data.name.startswith(PREFIX):
            raise ConfigError(f"data set '{data.name}' is built in: use dataset='{data.name}' instead of data=")
        return data
    own = dicts.named(data)  # a data set of dicts (Hugging Face), its columns named or not
    if own is not None:
        arrays, settings = own.read(targets)
        return custom_dataset(*arrays, name=own.name or name, targets=targets, **settings)
    if _is_torch_dataset(data):
        return custom_dataset(*_from_torch(data, "data", targets), name=name, targets=targets)
    if isinstance(data, (tuple, list)):
        if len(data) == 2 and all(_is_torch_dataset(d) for d in data):
            return custom_dataset(*_from_torch(data[0], "train dataset", targets),
                                  *_from_torch(data[1], "test dataset", targets), name=name, targets=targets)
        if len(data) in (2, 4):
            return custom_dataset(*data, name=name, targets=targets)
    raise ConfigError(f"data must be (x, y), (x_train, y_train, x_test, y_test), a torch Dataset, a pair of "
                      f"Datasets (train, test), a data set of dicts (a Hugging Face datasets.Dataset) or "
                      f"raysfl.data.custom_dataset(...); got {type(data).__name__}"
                      + (f" of {len(data)}" if isinstance(data, (tuple, list)) else ""))






def is_custom(name) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


registered, lookup, missing = _RUNS.registered, _RUNS.lookup, _RUNS.missing
