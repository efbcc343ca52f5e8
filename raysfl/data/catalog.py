"""What each dataset looks like, known without loading it (for validation before Ray starts).

Light on purpose (no torch): the command line lists and checks data sets with it before
anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.errors import ConfigError, excerpt


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    num_train: int
    num_test: int
    targets: str = "classes"  # classes: class ids; values: real (N, num_classes) targets (raysfl.objective)


_CATALOG = {
    "digits": DatasetInfo("digits", (1, 8, 8), 10, 1437, 360),
    "mnist5k": DatasetInfo("mnist5k", (1, 28, 28), 10, 4000, 1000),
    "mnist": DatasetInfo("mnist", (1, 28, 28), 10, 60000, 10000),
    "fashion_mnist": DatasetInfo("fashion_mnist", (1, 28, 28), 10, 60000, 10000),
    "cifar10": DatasetInfo("cifar10", (3, 32, 32), 10, 50000, 10000),
    "cifar100": DatasetInfo("cifar100", (3, 32, 32), 100, 50000, 10000),
}
DATASETS: tuple[str, ...] = tuple(_CATALOG)  # the built-in data sets, in the order they are listed


def dataset_info(name: str) -> DatasetInfo:
    from raysfl.data import custom

    if custom.is_custom(name):  # your own data (raysfl.run(cfg, data=...)), registered for the run
        ds = custom.lookup(name)
        if ds is None:
            raise custom.missing(name)
        return DatasetInfo(name, ds.input_shape, ds.num_classes, ds.num_train, ds.num_test, ds.targets)
    if name not in _CATALOG:
        raise ConfigError(f"unknown dataset {excerpt(name)}; allowed: {', '.join(DATASETS)}")
    return _CATALOG[name]
