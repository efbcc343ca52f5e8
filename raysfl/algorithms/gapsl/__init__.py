"""GAPSL (Lin et al., ``gapsl.txt``): the algorithm's spec (``spec.py``), its planner
(``planner.py``) and server (``algorithm.py``), and its mathematics -- leader gradient
identification (``lgi.py``, eqs. 1-4) and gradient direction alignment (``gda.py``, eqs. 5-8)."""

from raysfl.algorithms.gapsl.spec import GAPSL, GAPSLParams

__all__ = ["GAPSL", "GAPSLParams"]
