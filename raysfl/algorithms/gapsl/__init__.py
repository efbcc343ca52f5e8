"""GAPSL (Lin et al., ``gapsl.txt``): the algorithm (``algorithm.py``) and its mathematics --
leader gradient identification (``lgi.py``, eqs. 1-4) and gradient direction alignment
(``gda.py``, eqs. 5-8)."""

from raysfl.algorithms.gapsl.algorithm import GAPSL, GAPSLParams

__all__ = ["GAPSL", "GAPSLParams"]
