"""Data sets (in-memory numpy arrays) and seeded federated partitioning."""

from raysfl.data.catalog import DatasetInfo, dataset_info
from raysfl.data.datasets import DATASETS, DatasetArrays, check_dataset_args, load_dataset
from raysfl.data.partition import PARTITIONERS, hold_out, label_histograms, partition

__all__ = [
    "DATASETS",
    "DatasetArrays",
    "DatasetInfo",
    "PARTITIONERS",
    "check_dataset_args",
    "dataset_info",
    "hold_out",
    "label_histograms",
    "load_dataset",
    "partition",
]
