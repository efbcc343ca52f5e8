"""BESplit (``besplit.txt``): the algorithm's spec (``spec.py``) and roles (``algorithm.py``), and
its mathematics -- evidential learning (``evidential.py``, eqs. 3-5), client state records and
evidential aggregation (``evidential_aggregation.py``, eqs. 6-10), bias-compensated collaboration
(``bcc.py``, eqs. 11-14, 31-33, and the server step that lends samples, ``bcc_step.py``) and
dual-teacher distillation (``dtd.py``, eqs. 15-18)."""

from raysfl.algorithms.besplit.spec import BESplit, BESplitParams

__all__ = ["BESplit", "BESplitParams"]
