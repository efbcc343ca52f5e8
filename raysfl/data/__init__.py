"""Data sets (in-memory numpy arrays) and seeded federated partitioning.

Nothing here imports torch at import time (a batch becomes a tensor in
:meth:`DatasetArrays.to_tensor`), so the command line lists and checks data sets quickly."""

from raysfl.data.arrays import DatasetArrays
from raysfl.data.catalog import DATASETS, DatasetInfo, dataset_info
from raysfl.data.custom import as_dataset, custom_dataset
from raysfl.data.dicts import from_dicts
from raysfl.data.datasets import check_dataset_args, load_dataset
from raysfl.data.partition import (PARTITIONERS, client_parts, constant_accuracy, hold_out, label_histograms, partition,
                                   quantile_bins)

__all__ = [
    "DATASETS",
    "DatasetArrays",
    "DatasetInfo",
    "PARTITIONERS",
    "as_dataset",
    "check_dataset_args",
    "client_parts",
    "constant_accuracy",
    "custom_dataset",
    "dataset_info",
    "from_dicts",
    "hold_out",
    "label_histograms",
    "load_dataset",
    "partition",
    "quantile_bins",
]
