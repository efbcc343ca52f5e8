"""Data sets of dicts, as Flower users bring them (ours): a Hugging Face ``datasets.Dataset``
(what ``flwr-datasets`` partitions), or any map-style data set whose items are dicts of columns
(``len(ds)``, ``ds[i] == {"image": ..., "label": ...}``), read once into arrays.

``raysfl.run(cfg, data=ds)`` takes such a data set, a ``(train, test)`` pair of them, or a
mapping with ``"train"`` (and ``"test"``) such as a ``datasets.DatasetDict``: the ``"label"``
column is the label and the one other column the samples. :func:`from_dicts` names other
columns (``features="img"``, or a list of columns whose values are concatenated per sample;
``label="fine_label"``). Values may be numbers, lists, NumPy arrays, torch tensors or PIL
images (an image becomes a ``(C, H, W)`` array; PIL is recognised by type, never imported).
Column access (``ds["label"]``, as Hugging Face data sets have it) is used where the data set
has ``column_names``, else the items are read one by one. raysfl does not depend on
``datasets``: anything shaped like it works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from raysfl.errors import ConfigError, excerpt


def is_dicts(obj) -> bool:
    """Whether ``obj`` is a map-style data set whose items are dicts (a Hugging Face
    ``datasets.Dataset``, a torch Dataset of dicts): ``len`` and ``obj[0]`` a mapping."""
    if isinstance(obj, (tuple, list, str, bytes, Mapping, np.ndarray)) or not hasattr(obj, "__getitem__"):
        return False
    try:
        return len(obj) > 0 and isinstance(obj[0], Mapping)
    except Exception:  # noqa: BLE001 - an object that is no data set of dicts, whatever it raises
        return False


def _column_names(ds) -> list[str]:
    names = getattr(ds, "column_names", None)
    if isinstance(names, (list, tuple)) and names and all(isinstance(n, str) for n in names):
        return list(names)
    return [str(k) for k in ds[0]]


def _pick(ds, features, label, what: str) -> tuple[list[str], str]:
    """The feature columns and the label column of ``ds``: ``label`` (default ``"label"``) and
    ``features`` (a column or a list of them; default the one other column), each checked
    to be there; one line naming the column and the ones there are otherwise."""
    cols = _column_names(ds)
    label = "label" if label is None else label
    if not isinstance(label, str) or label not in cols:
        raise ConfigError(f"{what} has no label column {excerpt(label)}; its columns: {', '.join(cols)} "
                          f"(name it: raysfl.from_dicts(ds, label=...))")
    if features is None:
        rest = [c for c in cols if c != label]
        if len(rest) != 1:
            raise ConfigError(f"{what} has columns {', '.join(cols)}: name the feature column(s), "
                              f"raysfl.from_dicts(ds, features='...' or [...], label={label!r})")
        features = rest
    feats = [features] if isinstance(features, str) else list(features) if isinstance(features, (list, tuple)) else None
    if not feats or not all(isinstance(f, str) for f in feats):
        raise ConfigError(f"features must name a column of {what} or a list of them; got {excerpt(features)}")
    for f in feats:
        if f not in cols:
            raise ConfigError(f"{what} has no feature column {f!r}; its columns: {', '.join(cols)}")
        if f == label:
            raise ConfigError(f"column {f!r} of {what} is the label; the features must be other columns")
    return feats, label


def _value(v) -> np.ndarray:
    """One value of a column as an array: a torch tensor's values, a PIL image as ``(C, H, W)``
    (a grey one as ``(1, H, W)``), anything else through ``np.asarray``. PIL is recognised by
    the value's type, not imported."""
    if hasattr(v, "detach"):  # a torch tensor
        return v.detach().cpu().numpy()
    if type(v).__module__.startswith("PIL."):
        a = np.asarray(v)
        return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
    return np.asarray(v)


def _column(values, col: str, what: str, fix: str = "turn them into numbers first (e.g. tokenise text)") -> np.ndarray:
    """A column's values, stacked into one array (a NumPy column as it is)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return values
    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    arrays = [_value(v) for v in values]
    try:
        out = np.stack(arrays) if arrays else np.zeros(0)
    except ValueError:
        shapes = sorted({a.shape for a in arrays}, key=str)
        raise ConfigError(f"column {col!r} of {what} holds values of different shapes ({shapes[0]}, {shapes[1]}, "
                          f"...); every sample must have the same shape") from None
    if out.size and not (np.issubdtype(out.dtype, np.number) or out.dtype == bool):
        raise ConfigError(f"column {col!r} of {what} holds {out.dtype} values such as "
                          f"{excerpt(out.flat[0].item())}, not numbers; {fix}")
    return out


def _read_dicts(ds, features: list[str], label: str, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(samples, labels) of a data set of dicts: by column where it has ``column_names`` (a
    Hugging Face data set: ``ds[col]``), else item by item in one pass."""
    n = len(ds)
    wanted = [*features, label]
    got = None
    if getattr(ds, "column_names", None):
        try:
            got = {c: ds[c] for c in wanted}
            if any(len(v) != n for v in got.values()):
                got = None
        except Exception:  # noqa: BLE001 - no column access after all: read the items
            got = None
    if got is None:
        got = {c: [] for c in wanted}
        for i in range(n):
            item = ds[i]
            if not isinstance(item, Mapping):
                raise ConfigError(f"{what}[{i}] must be a dict of columns like {what}[0], got {type(item).__name__}")
            for c in wanted:
                if c not in item:
                    raise ConfigError(f"{what}[{i}] has no column {c!r}; its columns: {', '.join(map(str, item))}")
                got[c].append(item[c])
    xs = [_column(got[c], c, what) for c in features]
    xs = [x.reshape(n, 1) if x.ndim == 1 else x for x in xs]
    x = xs[0] if len(xs) == 1 else np.concatenate([x.reshape(n, -1) for x in xs], axis=1)
    return x, _column(got[label], label, what, "map the classes to 0, 1, 2, ... (a Hugging Face data set: "
                                               f"ds.class_encode_column({label!r}))")


def _class_count(ds, label: str) -> int | None:
    """The label column's number of classes where the data set declares it (a Hugging Face
    ``ClassLabel``: ``ds.features[label].num_classes``), else None."""
    feats = getattr(ds, "features", None)
    try:
        n = getattr(feats[label], "num_classes", None) if feats is not None else None
    except Exception:  # noqa: BLE001 - features of another kind
        return None
    return int(n) if isinstance(n, int) and n >= 2 else None


@dataclass(frozen=True, eq=False)
class DictData:
    """A data set of dicts with its columns named (:func:`from_dicts`); read into a
    :class:`raysfl.data.arrays.DatasetArrays` once the run's loss says how its labels are read."""

    train: object
    test: object = None
    features: tuple = ()
    label: str = "label"
    name: str | None = None
    num_classes: int | None = None
    mean: object = None
    std: object = None
    scale: float = 1.0

    def read(self, targets: str = "classes") -> tuple[tuple, dict]:
        """The columns read into arrays, ``(x, y)`` or ``(x, y, x_test, y_test)``, and the
        keywords :func:`raysfl.data.custom.custom_dataset` builds the data set with."""
        x, y = _read_dicts(self.train, list(self.features), self.label, "train dataset" if self.test is not None
                           else "data")
        rest = _read_dicts(self.test, list(self.features), self.label, "test dataset") if self.test is not None else ()
        classes = self.num_classes
        if classes is None and targets == "classes":
            classes = _class_count(self.train, self.label)
        return (x, y, *rest), {"num_classes": classes, "mean": self.mean, "std": self.std, "scale": self.scale}


def from_dicts(train, test=None, *, features=None, label=None, name: str | None = None,
               num_classes: int | None = None, mean=None, std=None, scale: float = 1.0) -> DictData:
    """A map-style data set of dicts (a Hugging Face ``datasets.Dataset``; ``len(ds)`` and
    ``ds[i]`` a dict of columns) for ``raysfl.run(cfg, data=...)``, with its columns named:
    ``label`` (default ``"label"``) and ``features`` (a column, or a list of columns whose values
    are concatenated per sample; default the one column that is not the label). ``test``: a
    test set of the same columns (without it a fixed 20 % of ``train`` is, as for ``(x, y)``).
    ``num_classes`` defaults to the label column's ``ClassLabel`` where the data set has one,
    else to the largest label + 1; ``name``, ``mean``, ``std`` and ``scale`` as
    :func:`custom_dataset`. A column that is not there is refused here, in one line naming it
    and the columns there are; the values are read when the run starts."""
    if not is_dicts(train):
        raise ConfigError(f"from_dicts takes a data set of dicts (len(ds) and ds[i] a dict of columns, e.g. a Hugging "
                          f"Face datasets.Dataset); got {type(train).__name__}")
    feats, label = _pick(train, features, label, "train dataset" if test is not None else "data")
    if test is not None:
        if not is_dicts(test):
            raise ConfigError(f"from_dicts's test set must be a data set of dicts like the train set; "
                              f"got {type(test).__name__}")
        _pick(test, feats, label, "test dataset")
    return DictData(train, test, tuple(feats), label, name, num_classes, mean, std, scale)


def named(data) -> DictData | None:
    """``data`` as a :class:`DictData` where it is a data set of dicts in one of the accepted
    forms (module docstring), else None."""
    if isinstance(data, DictData):
        return data
    if is_dicts(data):
        return from_dicts(data)
    if isinstance(data, Mapping) and is_dicts(data.get("train")):  # a datasets.DatasetDict
        return from_dicts(data["train"], data.get("test"))
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(is_dicts(d) for d in data):
        return from_dicts(*data)
    return None
