"""The baselines every paper compares with: FedAvg, FedProx, vanilla split learning, SplitFed V1
and V2, parallel split learning, EPSL (GAPSL's EPSSL baseline), and a centralised run of the same
model (the upper bound)."""

from raysfl.algorithms.baselines.centralized import Centralized
from raysfl.algorithms.baselines.epsl import EPSL
from raysfl.algorithms.baselines.fedavg import FedAvg, FedProx
from raysfl.algorithms.baselines.splitfed import ParallelSplitLearning, SplitFedV1, SplitFedV2, SplitLearning

__all__ = ["Centralized", "EPSL", "FedAvg", "FedProx", "ParallelSplitLearning", "SplitFedV1", "SplitFedV2", "SplitLearning"]
