"""FLEX-SFL (Yu et al., Sensors 2025, ``flex-sfl.txt``): the algorithm's spec (``spec.py``: knobs,
paper setting, checks), its planner (``planner.py``) and its other roles (``algorithm.py``), and
its mathematics -- device-aware segmentation (``das.py``, eqs. 5-10), entropy-driven client
selection (``edcs.py``, eqs. 14-19) and the HiLo-Agg schedule (``hilo.py``, eqs. 22-28)."""

from raysfl.algorithms.flex_sfl.spec import FlexSFL, FlexSFLParams

__all__ = ["FlexSFL", "FlexSFLParams"]
