"""Seeded federated partitioning."""

from __future__ import annotations

import numpy as np
import pytest

from raysfl.data import PARTITIONERS, label_histograms, load_dataset, partition
from raysfl.errors import ConfigError


@pytest.fixture(scope="module")
def labels():
    return load_dataset("digits").y_train  # 1437 samples, 10 classes


def _check_valid(parts, n, k, *, cover=True, min_samples=1):
    assert isinstance(parts, list) and len(parts) == k
    for p in parts:
        assert isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1
        assert len(p) >= min_samples
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
        assert p.min() >= 0 and p.max() < n
    allidx = np.concatenate(parts)
    assert len(np.unique(allidx)) == len(allidx)  # disjoint
    if cover:
        np.testing.assert_array_equal(np.sort(allidx), np.arange(n))


def _mean_entropy(labels, parts, c=10):
    h = label_histograms(labels, parts, c).astype(float)
    p = h / h.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.nansum(np.where(p > 0, p * np.log(p), 0.0), axis=1)
    return float(ent.mean())


def test_partitioners_tuple():
    assert PARTITIONERS == ("iid", "dirichlet", "pathological", "shards")


@pytest.mark.parametrize("method", PARTITIONERS)
@pytest.mark.parametrize("skew", [None, 0.0, 1.5])
def test_valid_deterministic_and_seeded(labels, method, skew):
    k = 10
    a = partition(labels, k, method, quantity_skew=skew, seed=3)
    _check_valid(a, len(labels), k)  # every scheme, skewed or not, uses every sample
    b = partition(labels, k, method, quantity_skew=skew, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = partition(labels, k, method, quantity_skew=skew, seed=4)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("method", PARTITIONERS)
def test_many_clients_non_empty(labels, method):
    k = 200
    parts = partition(labels, k, method, alpha=0.1, classes_per_client=1, shards_per_client=2, seed=1)
    _check_valid(parts, len(labels), k)


def test_every_sample_its_own_client():
    y = np.array([0, 1, 1, 2, 2, 2])
    for m in PARTITIONERS:
        parts = partition(y, 6, m, classes_per_client=1, shards_per_client=1, alpha=0.05)
        _check_valid(parts, 6, 6)


def test_iid_equal_sizes(labels):
    sizes = [len(p) for p in partition(labels, 7, "iid")]
    assert max(sizes) - min(sizes) <= 1


def test_dirichlet_alpha_controls_skew(labels):
    low = np.mean([_mean_entropy(labels, partition(labels, 10, "dirichlet", alpha=0.1, seed=s)) for s in range(3)])
    high = np.mean([_mean_entropy(labels, partition(labels, 10, "dirichlet", alpha=100.0, seed=s)) for s in range(3)])
    assert high > np.log(10) - 0.05  # near-uniform label mix
    assert low < high - 0.8


def test_dirichlet_min_samples(labels):
    parts = partition(labels, 50, "dirichlet", alpha=0.05, min_samples=10, seed=0)
    _check_valid(parts, len(labels), 50, min_samples=10)


@pytest.mark.parametrize("k_cls", [1, 2, 3])
def test_pathological_at_most_k_classes(labels, k_cls):
    parts = partition(labels, 20, "pathological", classes_per_client=k_cls, seed=5)
    h = label_histograms(labels, parts, 10)
    assert np.all((h > 0).sum(axis=1) <= k_cls)
    assert np.all((h > 0).sum(axis=1) == k_cls)  # digits has plenty of samples per class
    assert np.all(h.sum(axis=0) == np.bincount(labels))  # every class used


def test_pathological_with_skew_keeps_classes(labels):
    parts = partition(labels, 20, "pathological", classes_per_client=2, quantity_skew=1.0, seed=5)
    _check_valid(parts, len(labels), 20)
    h = label_histograms(labels, parts, 10)
    assert np.all((h > 0).sum(axis=1) <= 2)


def test_shards_few_classes_per_client(labels):
    parts = partition(labels, 10, "shards", shards_per_client=2, seed=0)
    h = label_histograms(labels, parts, 10)
    # two label-sorted shards of ~72 samples touch at most 2 classes each
    assert np.all((h > 0).sum(axis=1) <= 4)
    assert _mean_entropy(labels, parts) < 1.0


def test_quantity_skew_sizes(labels):
    k = 20
    sizes = np.array([len(p) for p in partition(labels, k, "iid", quantity_skew=1.5, seed=0)])
    assert sizes.sum() == len(labels)
    assert sizes.max() / sizes.min() > 30
    # Zipf-like: sorted sizes follow rank**-1.5
    srt = np.sort(sizes)[::-1]
    assert abs(srt[0] / srt[1] - 2 ** 1.5) < 0.2
    flat = np.array([len(p) for p in partition(labels, k, "iid", quantity_skew=0.0, seed=0)])
    assert flat.max() - flat.min() <= 1


def test_quantity_skew_composes_with_dirichlet(labels):
    k = 10
    iid = np.array([len(p) for p in partition(labels, k, "iid", quantity_skew=1.0, seed=2)])
    parts = partition(labels, k, "dirichlet", alpha=0.3, quantity_skew=1.0, seed=2)
    _check_valid(parts, len(labels), k)
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() / sizes.min() > 5
    # same seed -> same power-law targets; dirichlet+IPF hits them up to rounding
    assert np.max(np.abs(sizes - iid)) <= 10
    # and the label skew is still there
    assert _mean_entropy(labels, parts) < _mean_entropy(labels, partition(labels, k, "iid", seed=2)) - 0.3


def test_quantity_skew_min_samples(labels):
    parts = partition(labels, 100, "iid", quantity_skew=3.0, min_samples=5, seed=0)
    _check_valid(parts, len(labels), 100, min_samples=5)


def test_label_histograms(labels):
    parts = partition(labels, 8, "dirichlet", alpha=0.5, seed=0)
    h = label_histograms(labels, parts, 10)
    assert h.shape == (8, 10) and h.dtype == np.int64
    np.testing.assert_array_equal(h.sum(axis=1), [len(p) for p in parts])
    np.testing.assert_array_equal(h.sum(axis=0), np.bincount(labels, minlength=10))
    with pytest.raises(ConfigError, match="num_classes is 5"):
        label_histograms(labels, parts, 5)


def test_labels_as_list_and_unused_classes():
    y = [0, 0, 3, 3, 3, 7, 7]  # class ids need not be contiguous
    parts = partition(y, 3, "pathological", classes_per_client=1)
    _check_valid(parts, 7, 3)
    h = label_histograms(y, parts, 8)
    assert np.all((h > 0).sum(axis=1) == 1)


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs,needle", [
    (dict(method="random"), "unknown partition method 'random'; allowed: iid, dirichlet, pathological, shards"),
    (dict(method="dirichlet", alpha=-1), "alpha must be > 0, got -1"),
    (dict(method="dirichlet", alpha=0.0), "alpha must be > 0, got 0"),
    (dict(method="dirichlet", alpha=float("nan")), "alpha must be a finite number > 0, got nan"),
    (dict(method="pathological", classes_per_client=0), "got 0"),
    (dict(method="pathological", classes_per_client=11), "between 1 and 10 (the number of classes), got 11"),
    (dict(method="shards", shards_per_client=0), "shards_per_client must be an integer >= 1, got 0"),
    (dict(quantity_skew=-0.5), "quantity_skew must be >= 0 (0 = off), got -0.5"),
    (dict(num_clients=0), "num_clients must be an integer >= 1, got 0"),
    (dict(num_clients=2.5), "num_clients must be an integer >= 1, got 2.5"),
    (dict(num_clients=2000), "dataset has 1437 training samples but 2000 clients were requested; "
                             "each client needs at least one sample"),
    (dict(min_samples=0), "min_samples must be an integer >= 1, got 0"),
    (dict(num_clients=200, min_samples=10), "1437 training samples but 200 clients x min_samples 10"),
])
def test_validation_errors(labels, kwargs, needle):
    kwargs = dict(kwargs)
    k = kwargs.pop("num_clients", 10)
    with pytest.raises(ConfigError) as e:
        partition(labels, k, **kwargs)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_pathological_too_few_slots(labels):
    with pytest.raises(ConfigError, match="cannot cover all 10 classes"):
        partition(labels, 3, "pathological", classes_per_client=2)


def test_shards_too_many(labels):
    with pytest.raises(ConfigError, match="1437 training samples"):
        partition(labels, 1000, "shards", shards_per_client=2)


def test_bad_labels():
    with pytest.raises(ConfigError, match="1-D"):
        partition(np.zeros((4, 2), dtype=int), 2)
    with pytest.raises(ConfigError, match="integer class ids"):
        partition(np.array([0.5, 1.0]), 2)
    with pytest.raises(ConfigError, match=">= 0, got -1"):
        partition(np.array([0, -1]), 2)


def test_hold_out_gives_each_client_a_disjoint_seeded_local_test_split():
    from raysfl.data import hold_out

    y = np.repeat(np.arange(10), 30)
    parts = partition(y, 7, "dirichlet", alpha=0.3, seed=1)
    train, test = hold_out(parts, 0.2, seed=3)
    again, _ = hold_out(parts, 0.2, seed=3)
    other, _ = hold_out(parts, 0.2, seed=4)
    for p, tr, te in zip(parts, train, test):
        assert len(tr) >= 1 and not set(tr) & set(te)
        assert sorted(np.concatenate([tr, te]).tolist()) == sorted(p.tolist())
        assert list(tr) == sorted(tr) and list(te) == sorted(te)
        if len(p) >= 5:
            assert len(te) == round(0.2 * len(p))
    assert all((a == b).all() for a, b in zip(train, again))
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(train, other))
    same, none = hold_out(parts, 0.0, seed=3)
    assert all((a == b).all() for a, b in zip(same, parts)) and all(len(t) == 0 for t in none)
    with pytest.raises(ConfigError, match="local test fraction"):
        hold_out(parts, 1.0, seed=0)
