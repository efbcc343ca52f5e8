"""A data set as raysfl holds it: whole, in memory, as NumPy arrays (:class:`DatasetArrays`),
and the fixed stratified train/test split of the embedded sets and of yours."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from raysfl.errors import ConfigError


@dataclass(eq=False)
class DatasetArrays:
    """A whole data set in memory.

    ``x_train``/``x_test`` are NCHW numpy arrays of raw values (``uint8``); ``y_*`` are
    ``int64`` class ids, or with ``targets="values"`` (your own data for a loss of real-valued
    targets, :mod:`raysfl.objective`) float32 ``(N, k)`` with ``num_classes`` = k, the model's
    outputs per sample. ``to_tensor`` maps raw values to normalised float32: ``(x/scale - mean)/std``
    per channel.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: float
    targets: str = "classes"   # classes: y are class ids; values: y are (N, k) real targets

    @property
    def num_train(self) -> int:
        return int(len(self.y_train))

    @property
    def num_test(self) -> int:
        return int(len(self.y_test))

    def to_tensor(self, x_np) -> torch.Tensor:
        """Normalise a batch ``(N,C,H,W)`` (or one sample ``(C,H,W)``) to a float32 tensor."""
        import torch  # here, not above: the data catalogue and validation import this module without torch

        x = torch.from_numpy(np.asarray(x_np, dtype=np.float32).copy() if not np.asarray(x_np).flags.writeable
                             else np.asarray(x_np, dtype=np.float32))
        if not self.mean:  # your own data without normalisation (raysfl.data.custom_dataset): as given
            return x / float(self.scale) if self.scale != 1.0 else x
        c = len(self.mean)
        if x.ndim < 3 or x.shape[-3] != c:
            raise ConfigError(
                f"to_tensor expects NCHW or CHW input with {c} channel(s) for '{self.name}', got shape {tuple(x.shape)}")
        mean = torch.tensor(self.mean, dtype=torch.float32).view(c, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(c, 1, 1)
        return ((x / float(self.scale)) - mean) / std


def stratified_test_indices(y: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """Fixed stratified split: ``ceil(test_fraction*N)`` test samples (the scikit-learn
    convention), allotted to classes by largest remainder, chosen at random per class."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(y, return_counts=True)
    n_test = int(math.ceil(test_fraction * len(y)))
    quota = counts * n_test / len(y)
    alloc = np.floor(quota).astype(np.int64)
    rest = n_test - int(alloc.sum())
    order = np.argsort(-(quota - alloc), kind="stable")
    alloc[order[:rest]] += 1
    picks = [rng.permutation(np.flatnonzero(y == c))[:k] for c, k in zip(classes, alloc)]
    return np.sort(np.concatenate(picks)).astype(np.int64)


VALIDATION_SPLIT_SEED = 1  # fixed: every tuning run validates on the same samples, whatever its seed


def with_validation(ds: DatasetArrays, fraction: float) -> DatasetArrays:
    """``ds`` with ``fraction`` of its training split held out as a validation split that takes
    the test split's place: training on the rest, evaluation on the held-out samples, and the
    test split dropped, so nothing the run does can read it (``--validation``, ours; what
    ``raysfl tune`` and ``raysfl reproduce``'s tuning read). Stratified by class (at random for
    real-valued targets) with a fixed seed, like the embedded sets' test split."""
    import dataclasses

    if not fraction:
        return ds
    n = ds.num_train
    if ds.targets == "classes":
        held = stratified_test_indices(ds.y_train, fraction, VALIDATION_SPLIT_SEED)
    else:
        rng = np.random.default_rng(VALIDATION_SPLIT_SEED)
        held = np.sort(rng.permutation(n)[: int(math.ceil(fraction * n))])
    if len(held) == 0 or len(held) >= n:
        raise ConfigError(f"validation {fraction:g} of the {n} training samples of '{ds.name}' leaves "
                          f"{n - len(held)} to train on and {len(held)} to validate on; allowed: a share that "
                          f"leaves both non-empty")
    keep = np.ones(n, dtype=bool)
    keep[held] = False
    return dataclasses.replace(ds, x_train=ds.x_train[keep], y_train=ds.y_train[keep], x_test=ds.x_train[held],
                               y_test=ds.y_train[held])
