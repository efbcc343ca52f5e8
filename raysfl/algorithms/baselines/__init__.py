"""The baselines every paper compares with: FedAvg, FedProx, vanilla split learning, SplitFed V1
and V2, parallel split learning, EPSL (GAPSL's EPSSL baseline), and a centralised run of the same
model (the upper bound). Their specs are in ``spec.py`` (no torch); their roles in ``planner.py``,
``fedavg.py``, ``splitfed.py`` and ``epsl.py``."""

from raysfl.algorithms.baselines.spec import (EPSL, Centralized, EPSLParams, FedAvg, FedProx, FedProxParams,
                                              ParallelSplitLearning, PSLParams, SplitFedV1, SplitFedV2, SplitLearning)

__all__ = ["Centralized", "EPSL", "EPSLParams", "FedAvg", "FedProx", "FedProxParams", "ParallelSplitLearning",
           "PSLParams", "SplitFedV1", "SplitFedV2", "SplitLearning"]
