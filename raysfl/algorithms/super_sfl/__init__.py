"""SuperSFL (Al Asif et al., ``supersfl.txt``): the algorithm's spec (``spec.py``), its planner
(``planner.py``) and other roles (``algorithm.py``), and its mathematics -- depth allocation
(``allocation.py``, eq. 1), Three-Phase Gradient Fusion (``tpgf.py``, eqs. 2-4) and collaborative
aggregation (``collaborative_aggregation.py``, eqs. 6-8)."""

from raysfl.algorithms.super_sfl.spec import SuperSFL, SuperSFLParams

__all__ = ["SuperSFL", "SuperSFLParams"]
