"""A partition of your own: which client holds each training sample (ours).

Besides the seeded partitioners (:mod:`raysfl.data.partition`), ``Config.partition`` may be

* ``PATH.npy``: a file of one integer client id per training sample (``np.save(path, ids)``),
  usable from the command line and config files (``--partition split.npy``);
* ``custom-<name>``: an array of client ids, or a function ``fn(targets, num_clients, seed) ->
  client ids``, given to ``raysfl.run(cfg, partition=...)``; known by that name in this process
  while the run goes on (like your own data, :mod:`raysfl.data.custom`). An array is named by
  a digest of its ids, a function by its name.

Client ``i``'s training samples are then exactly those with id ``i`` (then ``--local-test-fraction``
holds out a share of them as usual); the seeded partitioners' settings (alpha,
classes-per-client, shards-per-client, quantity-skew) do not apply. Bad ids are refused in one
line before Ray starts (:func:`raysfl.data.partition.client_parts`; a function's once the data
are loaded, before the run directory is made).

A run keeps its ids in its run directory as ``partition.npy``: a resume and ``load_run`` read
that copy, not the file or the function again, so the run goes on with the partition it began
with even where the file has changed or the array is gone (one given again on resume must be
the same).
"""

from __future__ import annotations

import hashlib
import math
import re
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from raysfl.data.partition import client_parts
from raysfl.errors import ConfigError, excerpt
from raysfl.run_registry import RunRegistry

PREFIX = "custom-"
STORED = "partition.npy"  # in the run directory: the client id of each training sample
_RUNS = RunRegistry("partition", "raysfl.run(cfg, partition=...)", "a function of another name")


@dataclass(eq=False)
class OwnPartition:
    """Client ids (``ids``) or a function making them (``fn``), known as ``name``."""

    name: str
    ids: np.ndarray | None = None
    fn: object = None
    _made: dict = field(default_factory=dict, repr=False)  # (clients, seed, targets' digest) -> fn's ids

    def client_ids(self, targets: np.ndarray, num_clients: int, seed: int) -> np.ndarray:
        if self.fn is None:
            return self.ids
        key = (num_clients, seed, hashlib.sha1(np.ascontiguousarray(targets).tobytes()).hexdigest())
        if key not in self._made:  # called once per run, however often the run asks
            try:
                made = self.fn(targets, num_clients, seed)
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - the user's function: one line naming it
                raise ConfigError(f"partition function {self.name.removeprefix(PREFIX)!r} failed: "
                                  f"{type(e).__name__}: {e}") from None
            try:
                self._made[key] = np.asarray(made.numpy() if hasattr(made, "numpy") else made)
            except (TypeError, ValueError):
                raise ConfigError(f"partition function {self.name.removeprefix(PREFIX)!r} returned "
                                  f"{excerpt(made)}; it must return one client id per training sample") from None
        return self._made[key]


def is_own(name) -> bool:
    """Whether ``Config.partition`` names a partition of yours (a ``.npy`` file or ``custom-...``)."""
    return isinstance(name, str) and (name.startswith(PREFIX) or name.lower().endswith(".npy"))


def as_partition(obj) -> OwnPartition:
    """``raysfl.run(cfg, partition=obj)``'s array of client ids or function, named."""
    if callable(obj):
        name = re.sub(r"[^A-Za-z0-9_.]+", "_", getattr(obj, "__name__", "") or "").strip("_") or "function"
        return OwnPartition(PREFIX + name, fn=obj)
    if hasattr(obj, "numpy") and not isinstance(obj, np.ndarray):  # a torch tensor
        obj = obj.numpy()
    try:
        ids = np.asarray(obj)
    except (TypeError, ValueError):
        ids = None
    if ids is None or ids.dtype == object or ids.ndim != 1:
        raise ConfigError(f"partition must be a named partitioner, an array of client ids (one per training "
                          f"sample) or a function (targets, num_clients, seed) -> client ids; got {excerpt(obj)}")
    ids = ids.copy()
    digest = hashlib.sha1(ids.tobytes() + str(ids.dtype).encode()).hexdigest()[:10]
    return OwnPartition(PREFIX + digest, ids=ids)


def registered(own: OwnPartition):
    """Make ``own`` known by its name for the block (:class:`raysfl.run_registry.RunRegistry`)."""
    return _RUNS.registered(own)


def stored(run_dir, name: str):
    """For the block, the ids a finished run kept (``partition.npy``) known as ``name``, its
    config's partition (``load_run`` rebuilding the run's clients); nothing for a named one."""
    path = Path(run_dir) / STORED
    if not is_own(name) or not path.is_file():
        return nullcontext()
    return registered(OwnPartition(name, ids=_read(path)))


def _read(path: Path) -> np.ndarray:
    try:
        ids = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise ConfigError(f"partition file {excerpt(str(path))} cannot be read ({type(e).__name__}: {e}); "
                          f"give a .npy file of client ids, np.save(path, ids)") from None
    if not isinstance(ids, np.ndarray):
        raise ConfigError(f"partition file {excerpt(str(path))} holds several arrays; give one: np.save(path, ids)")
    return ids


def _given(cfg) -> OwnPartition:
    own = _RUNS.lookup(cfg.partition)
    if own is not None:
        return own
    if cfg.partition.startswith(PREFIX):
        raise _RUNS.missing(cfg.partition)
    path = Path(cfg.partition).expanduser()
    if not path.is_file():
        raise ConfigError(f"partition file {excerpt(cfg.partition)} does not exist; give a .npy file of client "
                          f"ids, one per training sample (np.save(path, ids))")
    return OwnPartition(cfg.partition, ids=_read(path))


def _where(cfg) -> str:
    return f" (after --validation {cfg.validation:g} held its share out)" if cfg.validation else ""


def check(cfg, num_train: int) -> None:
    """Before Ray starts: the partition is given (registered, a readable file, or kept by the
    run being resumed) and, where its ids are known without the data (an array, a file), they
    fit ``cfg.clients`` and the ``num_train`` training samples (less ``--validation``'s share,
    which :func:`raysfl.data.arrays.with_validation` holds out: ceil(share x N))."""
    if cfg.resume and (Path(cfg.resume) / STORED).is_file():
        return
    own = _given(cfg)
    if own.fn is None:
        n = num_train - (math.ceil(cfg.validation * num_train) if cfg.validation else 0)
        client_parts(own.ids, cfg.clients, n, _where(cfg))


def split(cfg, ds, run_dir=None) -> list[np.ndarray]:
    """Each client's training indices under the partition of yours ``cfg.partition``, on the data
    set ``ds``. With ``run_dir``: the ids it keeps when it has them (a resume: one given again
    must be the same), else the given ones, then kept there."""
    path = Path(run_dir) / STORED if run_dir is not None else None
    where = _where(cfg)
    if path is not None and path.is_file():
        ids = _read(path)
        again = _RUNS.lookup(cfg.partition)
        if again is not None and not np.array_equal(np.asarray(again.client_ids(ds.y_train, cfg.clients, cfg.seed)),
                                                    ids):
            raise ConfigError(f"cannot change the partition when resuming: the run's own is kept in "
                              f"{path}; leave partition= out (or give the same one)")
        return client_parts(ids, cfg.clients, ds.num_train, where)
    ids = _given(cfg).client_ids(ds.y_train, cfg.clients, cfg.seed)
    parts = client_parts(ids, cfg.clients, ds.num_train, where)
    if path is not None:
        np.save(path, np.asarray(ids).astype(np.int64))
    return parts


@contextmanager
def given(cfg, partition):
    """``raysfl.run(cfg, partition=...)``: a named partitioner is set as ``cfg.partition``; an
    array or function is registered for the block and ``cfg.partition`` names it (a run being
    resumed keeps the ``custom-...`` name its config has, so the one given is compared with the
    kept ids, :func:`split`)."""
    if partition is None:
        yield cfg
        return
    if isinstance(partition, str):
        if cfg.resume and partition != cfg.partition:
            raise ConfigError(f"cannot change the partition when resuming (it was {excerpt(cfg.partition)}, asked "
                              f"{excerpt(partition)}); leave partition= out")
        cfg.partition = partition
        yield cfg
        return
    own = as_partition(partition)
    if cfg.resume and is_own(cfg.partition):
        own.name = cfg.partition
    cfg.partition = own.name
    with registered(own):
        yield cfg
