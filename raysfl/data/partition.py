"""Seeded partitioning of a training set among federated clients.

:func:`partition` returns one sorted ``int64`` array of training-set indices per client;
the arrays are disjoint and each holds at least ``min_samples`` indices. All randomness
comes from ``np.random.default_rng(seed)``: the same inputs and seed give the same
partition.

Label schemes (``method``):

``iid``
    Shuffle and split into near-equal parts.
``dirichlet``
    Per class, the class's samples are split among the clients with proportions drawn
    from ``Dir(alpha, ..., alpha)`` over clients (the scheme of Yurochkin et al. 2019 /
    Hsu et al. 2019 as implemented in FedLab's ``hetero_dir_partition`` and NIID-Bench,
    without NIID-Bench's size-capping trick). Small ``alpha`` -> few classes per client.
    The draw is repeated (at most 100 times) until every client has ``min_samples``;
    after that a deterministic fix-up moves samples from the largest client.
``pathological``
    McMahan-style label skew: the classes are put in a seeded random order and dealt
    round-robin, ``classes_per_client`` consecutive ones per client (so client ``i`` gets
    positions ``i*k .. i*k+k-1`` of the repeated order). This uses every class as long as
    ``num_clients * classes_per_client >= num_classes`` (required), and each class is held
    by ``floor`` or ``ceil`` of ``num_clients*k/num_classes`` clients. The samples of each
    class are split near-equally (at random) among the clients holding it.
``shards``
    McMahan et al. 2017: sort by label (random order within a label), cut into
    ``num_clients * shards_per_client`` near-equal shards, give each client
    ``shards_per_client`` random shards.

Quantity skew (``quantity_skew=a``, ``None`` or ``0`` = off): target client sizes follow a
Zipf-like power law. Client ranks ``1..K`` are assigned by a seeded permutation and

    n_k = min_samples + share_k * (N - K*min_samples),   share_k ∝ rank_k ** -a

(shares rounded by largest remainder so that sum n_k = N). The largest/smallest target
ratio is about ``K**a`` (a=1, 10 clients: ~10x). Composition with the label schemes:

* ``iid``: the shuffled indices are cut into pieces of exactly ``n_k``.
* ``dirichlet`` / ``pathological`` / ``shards``: the label scheme gives a client x class
  weight matrix ``W`` (dirichlet: the ``Dir(alpha)`` proportions; pathological: the 0/1
  matrix of which client holds which class; shards: the class counts of the unskewed shard
  assignment). ``W`` is rescaled by iterative proportional fitting (IPF, Sinkhorn) so its
  row sums become the target sizes ``n_k`` and its column sums the class counts. IPF keeps
  zeros at zero (a pathological client never gets a class it does not hold) and keeps
  ``W``'s cross-class odds ratios, i.e. the label skew. Each column is rounded to integers
  by largest remainder and the class's samples dealt out accordingly. Every sample is
  used; client sizes equal the targets up to rounding (a few samples) whenever the label
  scheme permits (always for dirichlet), otherwise as close as IPF gets (e.g. a huge
  pathological client holding two small classes just gets all of those two classes).

Real-valued targets (regression, ours): :func:`quantile_bins` cuts the target into ``B``
quantile bins (``--target-bins``, default 10) and the bin ids are the labels the schemes above
split by, so ``dirichlet`` gives each client a skewed share of low, middle and high targets,
``pathological`` a few target ranges each.

A partition of your own (ours): :func:`client_parts` turns a client id per training sample
into the same per-client index arrays, refusing ids that do not fit the run in one line
(:mod:`raysfl.data.own_partition` says where the ids come from).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from raysfl.errors import ConfigError

PARTITIONERS: tuple[str, ...] = ("iid", "dirichlet", "pathological", "shards")

_MAX_DIRICHLET_TRIES = 100
_IPF_MAX_ITERS = 1000
_IPF_TOL = 1e-6


# ----------------------------------------------------------------------------- validation

def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _check_real(name: str, value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ConfigError(f"{name} must be a finite number {what}, got {value!r}")
    return float(value)


def _as_labels(labels) -> np.ndarray:
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ConfigError(f"labels must be a 1-D array of class ids, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not (np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y))):
            raise ConfigError(f"labels must be integer class ids, got dtype {y.dtype}")
    y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise ConfigError(f"labels must be >= 0, got {int(y.min())}")
    return y


# ----------------------------------------------------------------------------- helpers

def _largest_remainder(total: int, weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Non-negative integers summing to ``total`` proportional to ``weights`` (ties random)."""
    w = np.asarray(weights, dtype=np.float64)
    s = w.sum()
    if total <= 0 or s <= 0:
        return np.zeros(len(w), dtype=np.int64)
    quota = w * (total / s)
    out = np.floor(quota).astype(np.int64)
    rest = int(total - out.sum())
    if rest > 0:
        frac = quota - out
        frac[w <= 0] = -1.0  # never give a remainder to a zero weight
        order = np.lexsort((rng.random(len(w)), -frac))
        out[order[:rest]] += 1
    return out


def _power_law_sizes(n: int, k: int, a: float, min_samples: int, rng: np.random.Generator) -> np.ndarray:
    ranks = rng.permutation(k) + 1
    share = ranks.astype(np.float64) ** -a
    return min_samples + _largest_remainder(n - k * min_samples, share, rng)


def _ipf(w: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Scale ``w`` (K x C, >= 0) to row sums ``rows`` and column sums ``cols`` (last step: columns)."""
    m = np.asarray(w, dtype=np.float64).copy()
    rows = rows.astype(np.float64)
    cols = cols.astype(np.float64)
    for _ in range(_IPF_MAX_ITERS):
        r = m.sum(axis=1)
        m *= np.divide(rows, r, out=np.zeros_like(r), where=r > 0)[:, None]
        c = m.sum(axis=0)
        m *= np.divide(cols, c, out=np.zeros_like(c), where=c > 0)[None, :]
        if np.max(np.abs(m.sum(axis=1) - rows)) < _IPF_TOL * max(1.0, rows.max()):
            break
    return m


def _column_counts(w: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integer K x C matrix whose column c sums to counts[c], proportional to w[:, c]."""
    out = np.zeros(w.shape, dtype=np.int64)
    for c in range(w.shape[1]):
        out[:, c] = _largest_remainder(int(counts[c]), w[:, c], rng)
    return out


def _deal(class_idx: list[np.ndarray], m: np.ndarray, owner: np.ndarray, rng: np.random.Generator) -> None:
    """Give client k ``m[k, c]`` random samples of class c (writes ``owner``)."""
    k = m.shape[0]
    for c, idx in enumerate(class_idx):
        owner[rng.permutation(idx)] = np.repeat(np.arange(k), m[:, c])


def _fix_min(owner: np.ndarray, k: int, min_samples: int, rng: np.random.Generator) -> None:
    """Move samples from the currently largest client to every client below ``min_samples``."""
    sizes = np.bincount(owner[owner >= 0], minlength=k)
    for needy in np.flatnonzero(sizes < min_samples):
        while sizes[needy] < min_samples:
            donor = int(np.argmax(sizes))
            take = min(min_samples - sizes[needy], sizes[donor] - min_samples)
            if take <= 0:  # cannot happen when N >= K*min_samples (validated)
                raise ConfigError(f"cannot give every client at least {min_samples} samples")
            cand = np.flatnonzero(owner == donor)
            moved = rng.choice(cand, size=take, replace=False)
            owner[moved] = needy
            sizes[donor] -= take
            sizes[needy] += take


def _parts_from_owner(owner: np.ndarray, k: int) -> list[np.ndarray]:
    order = np.argsort(owner, kind="stable")  # stable: indices ascending within a client
    sizes = np.bincount(owner[owner >= 0], minlength=k)
    n_unowned = int(np.sum(owner < 0))
    order = order[n_unowned:]
    return [p.astype(np.int64) for p in np.split(order, np.cumsum(sizes)[:-1])]


# ----------------------------------------------------------------------------- partition

def partition(labels, num_clients: int, method: str = "iid", *, alpha: float = 0.5,
              classes_per_client: int = 2, shards_per_client: int = 2, quantity_skew: float | None = None,
              seed: int = 0, min_samples: int = 1) -> list[np.ndarray]:
    """Split the indices ``0..len(labels)-1`` among ``num_clients`` clients.

    Returns a list of ``num_clients`` sorted, disjoint ``int64`` index arrays, each with at
    least ``min_samples`` entries, together covering all samples. See the module docstring
    for the schemes and for how ``quantity_skew`` composes with them. ``alpha`` is used by
    ``dirichlet``, ``classes_per_client`` by ``pathological`` and ``shards_per_client`` by
    ``shards``; each is validated only when its method uses it. Raises
    :class:`ConfigError` (one line) for bad arguments.
    """
    if not isinstance(method, str) or method not in PARTITIONERS:
        raise ConfigError(f"unknown partition method {method!r}; allowed: {', '.join(PARTITIONERS)}")
    y = _as_labels(labels)
    k = _check_int("num_clients", num_clients, 1)
    min_samples = _check_int("min_samples", min_samples, 1)
    n = len(y)
    if n < k:
        raise ConfigError(f"dataset has {n} training samples but {k} clients were requested; "
                          f"each client needs at least one sample")
    if n < k * min_samples:
        raise ConfigError(f"dataset has {n} training samples but {k} clients x min_samples {min_samples} "
                          f"= {k * min_samples} are needed")
    skew = 0.0
    if quantity_skew is not None:
        skew = _check_real("quantity_skew", quantity_skew, ">= 0 (0 = off)")
        if skew < 0:
            raise ConfigError(f"quantity_skew must be >= 0 (0 = off), got {quantity_skew!r}")

    classes, y_pos = np.unique(y, return_inverse=True)
    n_cls = len(classes)
    if method == "dirichlet":
        alpha = _check_real("alpha", alpha, "> 0")
        if alpha <= 0:
            raise ConfigError(f"alpha must be > 0, got {alpha:g}")
    elif method == "pathological":
        if (isinstance(classes_per_client, bool) or not isinstance(classes_per_client, numbers.Integral)
                or not 1 <= classes_per_client <= n_cls):
            raise ConfigError(f"classes_per_client must be an integer between 1 and {n_cls} "
                              f"(the number of classes), got {classes_per_client!r}")
        if k * classes_per_client < n_cls:
            raise ConfigError(f"pathological partition with {k} clients x classes_per_client {classes_per_client} "
                              f"= {k * classes_per_client} class slots cannot cover all {n_cls} classes; "
                              f"need num_clients * classes_per_client >= {n_cls}")
    elif method == "shards":
        s = _check_int("shards_per_client", shards_per_client, 1)
        if n < k * s:
            raise ConfigError(f"shards partition needs num_clients * shards_per_client = {k * s} shards "
                              f"but the dataset has only {n} training samples")

    rng = np.random.default_rng(seed)
    sizes = _power_law_sizes(n, k, skew, min_samples, rng) if skew > 0 else None
    owner = np.full(n, -1, dtype=np.int64)
    class_idx = [np.flatnonzero(y_pos == c) for c in range(n_cls)]
    counts = np.array([len(i) for i in class_idx], dtype=np.int64)

    if method == "iid":
        perm = rng.permutation(n)
        cuts = sizes if sizes is not None else np.full(k, n // k) + (np.arange(k) < n % k)
        owner[perm] = np.repeat(np.arange(k), cuts)
    elif method == "dirichlet":
        if sizes is None:
            for _ in range(_MAX_DIRICHLET_TRIES):
                w = rng.dirichlet(np.full(k, alpha), size=n_cls).T  # K x C, columns sum to 1
                m = _column_counts(w, counts, rng)
                if m.sum(axis=1).min() >= min_samples:
                    break
        else:
            w = rng.dirichlet(np.full(k, alpha), size=n_cls).T
            m = _column_counts(_ipf(w, sizes, counts), counts, rng)
        _deal(class_idx, m, owner, rng)
    elif method == "pathological":
        cpc = int(classes_per_client)
        order = np.resize(rng.permutation(n_cls), k * cpc).reshape(k, cpc)
        mask = np.zeros((k, n_cls), dtype=np.float64)
        mask[np.repeat(np.arange(k), cpc), order.ravel()] = 1.0
        w = mask if sizes is None else _ipf(mask, sizes, counts)
        _deal(class_idx, _column_counts(w, counts, rng), owner, rng)
    else:  # shards
        s = int(shards_per_client)
        perm = rng.permutation(n)
        by_label = perm[np.argsort(y_pos[perm], kind="stable")]
        shards = np.array_split(by_label, k * s)
        shard_order = rng.permutation(k * s)
        for client in range(k):
            for j in shard_order[client * s:(client + 1) * s]:
                owner[shards[j]] = client
        if sizes is not None:
            hist = np.zeros((k, n_cls), dtype=np.float64)
            np.add.at(hist, (owner, y_pos), 1.0)
            _deal(class_idx, _column_counts(_ipf(hist, sizes, counts), counts, rng), owner, rng)

    _fix_min(owner, k, min_samples, rng)
    return _parts_from_owner(owner, k)


def quantile_bins(targets, bins: int) -> np.ndarray:
    """The quantile bin of each real-valued target (ours): ``int64`` ids ``0 .. bins-1``, bin
    ``b`` holding the targets between the ``b/bins`` and ``(b+1)/bins`` quantiles, so the bins
    are near-equal in size. Targets of shape ``(N, k)`` are binned by their first value. Tied
    values share a bin (0/1 targets make two bins, however many are asked for), so a bin may
    stay empty; the partitioners work on the ids that occur."""
    t = np.asarray(targets, dtype=np.float64)
    if t.ndim == 2:
        t = t[:, 0]
    if t.ndim != 1:
        raise ConfigError(f"targets to bin must have shape (N,) or (N, k), got {t.shape}")
    b = _check_int("target_bins", bins, 2)
    if t.size and not np.all(np.isfinite(t)):
        raise ConfigError("targets to bin must be finite numbers, got NaN or inf")
    if not t.size:
        return np.zeros(0, dtype=np.int64)
    edges = np.quantile(t, np.arange(1, b) / b)
    return np.searchsorted(edges, t, side="right").astype(np.int64)


def client_parts(client_ids, num_clients: int, num_samples: int, where: str = "") -> list[np.ndarray]:
    """Per-client sorted index arrays (as :func:`partition` returns) of a partition given as one
    client id per training sample (``client_ids[i]`` is the client of sample ``i``). A wrong
    length, an id outside ``0 .. num_clients-1``, a fractional id or a client left without
    samples is refused in one line; ``where`` is added to the length's message (what the
    training set is)."""
    k = _check_int("clients", num_clients, 1)
    ids = np.asarray(client_ids)
    if ids.ndim != 1:
        raise ConfigError(f"partition must be a 1-D array of client ids, one per training sample; "
                          f"got shape {ids.shape}")
    if ids.size and (ids.dtype == bool or not np.issubdtype(ids.dtype, np.number)):
        raise ConfigError(f"partition must hold integer client ids 0..{k - 1}; got dtype {ids.dtype}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        with np.errstate(invalid="ignore"):
            frac = ~(np.isfinite(ids) & (ids == np.round(ids)))
        if frac.any():
            i = int(frac.argmax())
            raise ConfigError(f"partition must hold integer client ids 0..{k - 1}; sample {i} has {ids[i].item()}")
    if len(ids) != num_samples:
        raise ConfigError(f"partition gives {len(ids):,} client ids but the training set has {num_samples:,} "
                          f"samples{where}; give one client id per training sample")
    bad = (ids < 0) | (ids >= k)
    if bad.any():
        i = int(bad.argmax())
        n_bad = int(bad.sum())
        raise ConfigError(f"partition gives sample {i} client id {ids[i].item()}; allowed: 0..{k - 1} (clients={k})"
                          + (f", {n_bad:,} ids out of range in all" if n_bad > 1 else ""))
    owner = ids.astype(np.int64)
    sizes = np.bincount(owner, minlength=k)
    empty = np.flatnonzero(sizes == 0)
    if len(empty):
        top = int(owner.max()) + 1 if owner.size else 0
        fix = (f"set clients={top}" if empty.min() >= top else "give each client at least one sample")
        others = f" (and {len(empty) - 1} more of the {k} clients)" if len(empty) > 1 else ""
        raise ConfigError(f"partition gives client {int(empty[0])} no samples{others}; every client needs at least "
                          f"one: {fix}")
    return _parts_from_owner(owner, k)


def label_histograms(labels, parts, num_classes: int) -> np.ndarray:
    """``(K, num_classes)`` int64 matrix: how many samples of each class each client holds."""
    y = _as_labels(labels)
    c = _check_int("num_classes", num_classes, 1)
    if y.size and y.max() >= c:
        raise ConfigError(f"labels contain class {int(y.max())} but num_classes is {c}")
    out = np.zeros((len(parts), c), dtype=np.int64)
    for i, p in enumerate(parts):
        out[i] = np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=c)
    return out


def constant_accuracy(labels, splits: list[np.ndarray], per_split: bool = True) -> float:
    """The best mean accuracy over the non-empty ``splits`` that a constant prediction scores
    (NaN where every split is empty): ``per_split``, a constant of each split's own, its
    commonest label (a model of each client's own, stuck on its client's commonest class);
    else one constant for all, the label whose mean share over the splits is largest (one
    model shared by the clients). On the clients' local test splits (:func:`hold_out`) these
    are the floors ``raysfl reproduce`` reads their accuracies against (``chance_local``, ours)."""
    y = np.asarray(labels)
    splits = [np.asarray(t, dtype=np.int64) for t in splits if len(t)]
    if not splits:
        return float("nan")
    width = int(y.max()) + 1 if len(y) else 1
    shares = np.stack([np.bincount(y[t], minlength=width) / len(t) for t in splits])
    return float(shares.max(axis=1).mean() if per_split else shares.mean(axis=0).max())


def hold_out(parts: list[np.ndarray], fraction: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's local test split: a seeded ``fraction`` of its own samples, held out of
    training (BESplit, Sec. 3.1: every client has a training and a test set of its own).

    Returns (train parts, test parts), both sorted. A client keeps at least one training
    sample; with ``fraction`` 0 the parts are returned unchanged and the test parts are empty.
    """
    f = _check_real("local test fraction", fraction, "in [0, 1)")
    if not 0 <= f < 1:
        raise ConfigError(f"local test fraction must be in [0, 1), got {fraction}")
    if f == 0:
        return list(parts), [np.zeros(0, dtype=np.int64) for _ in parts]
    train, test = [], []
    for k, p in enumerate(parts):
        p = np.asarray(p, dtype=np.int64)
        n_test = min(len(p) - 1, max(1, int(round(f * len(p))))) if len(p) > 1 else 0
        order = np.random.default_rng([seed, k, 0x10CA1]).permutation(len(p))
        test.append(np.sort(p[order[:n_test]]))
        train.append(np.sort(p[order[n_test:]]))
    return train, test
