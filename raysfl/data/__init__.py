"""Data sets (in-memory numpy arrays) and seeded federated partitioning."""

from raysfl.data.catalog import DatasetInfo, dataset_info
from raysfl.data.custom import as_dataset, custom_dataset
from raysfl.data.datasets import DATASETS, DatasetArrays, check_dataset_args, load_dataset
from raysfl.data.partition import PARTITIONERS, hold_out, label_histograms, partition

__all__ = [
    "DATASETS",
    "DatasetArrays",
    "DatasetInfo",
    "PARTITIONERS",
    "as_dataset",
    "check_dataset_args",
    "custom_dataset",
    "dataset_info",
    "hold_out",
    "label_histograms",
    "load_dataset",
    "partition",
]
