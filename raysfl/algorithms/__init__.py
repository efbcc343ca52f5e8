"""Algorithm registry: ``--algo NAME`` resolves here.

One package per paper (``flex_sfl/``, ``super_sfl/``, ``gapsl/``, ``fed_pairing/``,
``besplit/``: the algorithm class and its pure mathematics) and one for the baselines
(``baselines/``); :mod:`raysfl.algorithms.base` is the interface they implement.
"""

from __future__ import annotations

from raysfl.algorithms.base import Algorithm, ClientUpdate, FederationContext, NoParams
from raysfl.algorithms.baselines import (EPSL, Centralized, FedAvg, FedProx, ParallelSplitLearning, SplitFedV1,
                                         SplitFedV2, SplitLearning)
from raysfl.algorithms.besplit import BESplit
from raysfl.algorithms.fed_pairing import FedPairing
from raysfl.algorithms.flex_sfl import FlexSFL
from raysfl.algorithms.gapsl import GAPSL
from raysfl.algorithms.super_sfl import SuperSFL
from raysfl.errors import ConfigError

ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls
    for cls in (FedAvg, FedProx, SplitLearning, SplitFedV1, SplitFedV2, ParallelSplitLearning, EPSL, FlexSFL, SuperSFL,
                GAPSL, FedPairing, BESplit, Centralized)
}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Add an algorithm class to the registry (usable as a decorator)."""
    ALGORITHMS[cls.name] = cls
    return cls


def get_algorithm(name: str) -> type[Algorithm]:
    if name not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm '{name}'; allowed: {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


__all__ = ["ALGORITHMS", "Algorithm", "ClientUpdate", "FederationContext", "NoParams", "get_algorithm", "register"]
