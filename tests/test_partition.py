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


# ----------------------------------------------------------------------------- regression and your own partition

def _regression(n: int = 1000, seed: int = 0):
    """Real-valued targets of your own data (loss mse): y = a noisy sum of the features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, x.sum(axis=1) + 0.1 * rng.normal(size=n).astype(np.float32)


def test_quantile_bins_are_near_equal_and_ties_share_a_bin():
    from raysfl.data import quantile_bins

    t = np.random.default_rng(0).normal(size=1000)
    assert np.bincount(quantile_bins(t, 10)).tolist() == [100] * 10
    assert np.all(np.diff(quantile_bins(np.sort(t), 10)) >= 0)  # bins follow the target's order
    assert np.unique(quantile_bins(np.arange(100) % 2, 10)).size == 2  # 0/1 targets: two bins
    assert np.array_equal(quantile_bins(np.stack([t, -t], 1), 4), quantile_bins(t, 4))  # (N, k): the first value
    with pytest.raises(ConfigError, match="target_bins must be an integer >= 2, got 1"):
        quantile_bins(t, 1)


def test_regression_partitions_by_target_quantile_skew_each_clients_targets_and_are_seeded(tmp_path):
    """--partition dirichlet / pathological on real-valued targets split by quantile bins (ours):
    the clients' target means spread far wider than iid's, and the same seed gives the same split."""
    import raysfl
    from raysfl.api import custom_objects
    from raysfl.data import custom
    from raysfl.resolve import validate
    from raysfl.runtime.experiment import split_clients

    x, y = _regression(4000)
    spread = {}
    for method, kw in (("iid", {}), ("dirichlet", {"alpha": 0.1}), ("pathological", {"classes_per_client": 2})):
        cfg = raysfl.config_from_kwargs(algo="splitfed_v2", clients=8, partition=method, out=str(tmp_path),
                                        progress=False, **kw)
        with custom_objects(cfg, data=(x, y), loss="mse"):
            validate(cfg)  # refused on main: "partition dirichlet splits by class label ..."
            ds = custom.lookup(cfg.dataset)
            parts = split_clients(cfg, ds)
            again = split_clients(cfg, ds)
            cfg.seed = 1
            other = split_clients(cfg, ds)
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # seeded
        assert sorted(np.concatenate(parts).tolist()) == list(range(ds.num_train))  # every sample, once
        if method != "iid":
            assert not all(np.array_equal(a, b) for a, b in zip(parts, other))
        t = ds.y_train[:, 0]
        means = [float(t[p].mean()) for p in parts]
        # how far each client's targets lie from the whole set's, over the set's deciles (total variation)
        deciles = np.searchsorted(np.quantile(t, np.arange(1, 10) / 10), t, side="right")
        tv = [0.5 * np.abs(np.bincount(deciles[p], minlength=10) / len(p) - 0.1).sum() for p in parts]
        spread[method] = (float(np.std(means)) / float(t.std()), float(np.mean(tv)))
    assert spread["iid"][0] < 0.15 and spread["iid"][1] < 0.15, spread
    assert spread["dirichlet"][0] > 0.3, spread  # client target means far apart (in the targets' std)
    for method in ("dirichlet", "pathological"):
        assert spread[method][1] > 0.5, spread  # each client's targets: a few ranges of the whole


def test_pathological_on_targets_counts_the_target_bins(tmp_path):
    import raysfl
    from raysfl.api import custom_objects
    from raysfl.resolve import validate

    x, y = _regression(200)
    cfg = raysfl.config_from_kwargs(algo="splitfed_v2", clients=2, partition="pathological", classes_per_client=2,
                                    target_bins=6, out=str(tmp_path), progress=False)
    with custom_objects(cfg, data=(x, y), loss="mse"), pytest.raises(
            ConfigError, match=r"needs clients x classes-per-client >= 6 target bins \(--target-bins\), got 2 x 2"):
        validate(cfg)


@pytest.mark.parametrize("ids,clients,message", [
    (np.zeros(5, int), 1, r"partition gives 5 client ids but the training set has 6 samples"),
    ([0, 1, 2, 0, 1, 7], 3, r"partition gives sample 5 client id 7; allowed: 0..2 \(clients=3\)"),
    ([0, 1, -1, 0, 1, 1], 2, r"sample 2 client id -1; allowed: 0..1"),
    ([0, 1, 0.5, 0, 1, 1], 2, r"integer client ids 0..1; sample 2 has 0.5"),
    ([0, 1, 0, 0, 1, 1], 3, r"partition gives client 2 no samples; every client needs at least one: set clients=2"),
    ([0, 2, 0, 0, 2, 2], 3, r"gives client 1 no samples; every client needs at least one: give each client"),
    (np.zeros((6, 1), int), 1, r"must be a 1-D array of client ids, one per training sample; got shape \(6, 1\)"),
    (["a"] * 6, 1, r"integer client ids 0..0; got dtype <U1"),
])
def test_client_parts_refuses_bad_ids_in_one_line(ids, clients, message):
    from raysfl.data import client_parts

    with pytest.raises(ConfigError, match=message) as e:
        client_parts(ids, clients, 6)
    assert "\n" not in str(e.value)


def test_client_parts_gives_each_client_exactly_its_samples():
    from raysfl.data import client_parts

    ids = np.array([2, 0, 1, 2, 2, 0])
    parts = client_parts(ids, 3, 6)
    assert [p.tolist() for p in parts] == [[1, 5], [2], [0, 3, 4]]
    assert all(p.dtype == np.int64 for p in parts)


def test_a_partition_file_from_the_command_line_is_honoured_and_a_bad_one_refused(tmp_path, capsys):
    """--partition PATH.npy: one client id per training sample of digits (1,437)."""
    from raysfl.cli import build_parser, config_from_args, main
    from raysfl.resolve import validate
    from raysfl.runtime.experiment import split_clients

    y = load_dataset("digits").y_train
    ids = y % 3  # client c: the digits c, c+3, c+6, c+9
    np.save(tmp_path / "split.npy", ids)
    argv = ["run", "--algo", "fedavg", "--clients", "3", "--partition", str(tmp_path / "split.npy"),
            "--out", str(tmp_path / "runs")]
    cfg = validate(config_from_args(build_parser().parse_args(argv)))
    parts = split_clients(cfg, load_dataset("digits"))
    assert [p.tolist() for p in parts] == [np.flatnonzero(ids == c).tolist() for c in range(3)]
    np.save(tmp_path / "short.npy", ids[:100])
    bad = [*argv[:-4], "--partition", str(tmp_path / "short.npy"), "--out", str(tmp_path / "runs")]
    assert main(bad) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "partition gives 100 client ids but the training set has 1,437 samples" in err
    assert main([*argv[:-4], "--partition", "nowhere.npy", "--out", str(tmp_path / "runs")]) == 2
    assert "partition file 'nowhere.npy' does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_resume_cannot_swap_its_own_partition_for_a_named_one(tmp_path):
    import raysfl
    from raysfl.data import own_partition

    cfg = raysfl.config_from_kwargs(partition="custom-by_label", resume=str(tmp_path))
    with pytest.raises(ConfigError, match=r"cannot change the partition when resuming \(it was 'custom-by_label', "
                                          r"asked 'dirichlet'\)"):
        with own_partition.given(cfg, "dirichlet"):
            pass
