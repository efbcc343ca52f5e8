"""Where a run's data set is read (issue 47; ours).

On one machine the driver loads the data set once and puts it in Ray's object store; every
actor maps the same copy. On a cluster that copy would start on the driver's node and be
pulled over the network by every other node, and the driver would hold the whole training
set. So a run that joins a cluster (:func:`joins_a_cluster`) with a file-backed data set (the
torchvision sets under ``--data-root``) splits the work:

* the driver reads only the **labels** of the training split (what partitioning, the label
  histograms and the planners need) and the test split; the training images are a
  :class:`NotOnTheDriver` stand-in that has their shape and no pixels;
* each actor gets a :class:`OnEachNode` descriptor instead of the arrays and reads the set
  from ``--data-root`` **on its own node** (:func:`on_this_node`, once per process), checking
  that its copy's labels are the driver's (a digest): the partition's indices must mean the
  same samples everywhere.

``--data-root`` on a cluster must therefore be the same path on every node that holds an
actor, and on the driver's: a shared file system, or the same files copied to each node.
The embedded sets (digits, mnist5k) and data handed to ``raysfl.run`` are small and have no
files on the other nodes: they still go once through the object store (one transfer per node).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from dataclasses import dataclass

import numpy as np

from raysfl.data.arrays import DatasetArrays, with_validation
from raysfl.errors import ConfigError


def joins_a_cluster() -> bool:
    """Whether this run joins a Ray cluster it does not start: ``RAY_ADDRESS`` set (``ray job
    submit`` sets it too), or Ray already connected to more than one node (``ray.init(address=...)``
    before ``raysfl.run``). Ray is never imported here."""
    address = os.environ.get("RAY_ADDRESS", "").strip()
    if address and address != "local":
        return True
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    return sum(1 for n in ray.nodes() if n.get("Alive")) > 1


class NotOnTheDriver:
    """The training images of a file-backed set on a cluster run, as the driver holds them: their
    shape, and no pixels. Indexing gives the stand-in of the rows picked (a validation split);
    asking for the values is a bug of ours, and says so."""

    dtype = np.dtype(np.uint8)

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(int(s) for s in shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> NotOnTheDriver:
        return NotOnTheDriver((len(np.arange(self.shape[0])[rows]), *self.shape[1:]))

    def __array__(self, *args, **kwargs):
        raise RuntimeError("raysfl: the driver holds no training images of a file-backed data set on a cluster run "
                           "(each actor reads them on its node: raysfl/data/landing.py); this read is a bug")


@dataclass(frozen=True)
class OnEachNode:
    """What an actor gets instead of the arrays: the set to read on its own node, and the digest
    of the labels the driver partitioned (:func:`labels_digest`)."""

    name: str
    data_root: str
    validation: float
    digest: str
    input_shape: tuple[int, int, int]
    num_classes: int


def labels_digest(ds: DatasetArrays) -> str:
    """SHA-256 of the training and test labels, in order: equal digests, the same samples."""
    h = hashlib.sha256()
    for y in (ds.y_train, ds.y_test):
        h.update(np.ascontiguousarray(y).tobytes())
    return h.hexdigest()


def labels_only(name: str, data_root: str, validation: float = 0.0) -> DatasetArrays:
    """The driver's view of file-backed set ``name`` on a cluster run: its training labels (read
    without the images), its test split, and :class:`NotOnTheDriver` for the training images;
    ``validation``: the same held-out split as :func:`~raysfl.data.arrays.with_validation`."""
    from raysfl.data.datasets import _TORCHVISION, check_dataset_args, torchvision_split, torchvision_train_labels

    check_dataset_args(name, data_root, False)
    root = os.path.abspath(os.path.expanduser(str(data_root)))
    _, num_classes, shape, mean, std = _TORCHVISION[name]
    y_train = torchvision_train_labels(name, root)
    x_test, y_test = torchvision_split(name, root, False, train=False)
    ds = DatasetArrays(name, NotOnTheDriver((len(y_train), *shape)), y_train, x_test, y_test, num_classes, shape,
                       mean, std, 255.0)
    return with_validation(ds, validation)


def for_actors(ds: DatasetArrays, data_root, validation: float) -> DatasetArrays | OnEachNode:
    """What the actors are given: the arrays themselves, or -- where the driver holds no training
    images (:func:`labels_only`) -- the set to read on each node."""
    if not isinstance(ds.x_train, NotOnTheDriver):
        return ds
    return OnEachNode(ds.name, os.path.abspath(os.path.expanduser(str(data_root))), float(validation or 0.0),
                      labels_digest(ds), tuple(ds.input_shape), int(ds.num_classes))


def on_this_node(given: DatasetArrays | OnEachNode) -> DatasetArrays:
    """In an actor: the data set it was given, read from this node's ``--data-root`` where it was
    given an :class:`OnEachNode` (once per process; every run of a warm pool reuses it). A
    missing or different copy is one line naming the node and the path."""
    if isinstance(given, DatasetArrays):
        return given
    return _read_here(given)


@functools.lru_cache(maxsize=2)
def _read_here(src: OnEachNode) -> DatasetArrays:
    from raysfl.data.datasets import load_dataset

    where = f"on node {_node_ip()}"
    try:
        ds = with_validation(load_dataset(src.name, src.data_root, False), src.validation)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}; on a cluster --data-root must be the same path on every node (a shared "
                          f"file system, or the same files on each)") from None
    if labels_digest(ds) != src.digest:
        raise ConfigError(f"{where}: dataset '{src.name}' under data root '{src.data_root}' is not the copy the "
                          f"driver read (its labels differ); on a cluster --data-root must hold the same files on "
                          f"every node")
    return ds


def _node_ip() -> str:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return ray.util.get_node_ip_address()
    return "(no Ray: this process)"

