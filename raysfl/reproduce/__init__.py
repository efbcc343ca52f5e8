"""``raysfl reproduce``: each paper's tables declared in its package (``tables.py``), run on one
engine with every comparison checked to change one thing.

- :mod:`raysfl.paper_tables`: what a table is (rows, deltas, metric, claim, scales);
- :mod:`raysfl.reproduce.fairness`: a row's resolved config against its reference's;
- :mod:`raysfl.reproduce.engine`: the runs (cache by resolved config, the warm federation);
- :mod:`raysfl.reproduce.report`: mean ± std, paired differences, verdicts, table.md/.parquet;
- :mod:`raysfl.reproduce.command`: the command line.
"""

from __future__ import annotations

import importlib

from raysfl.algorithms import ALGORITHMS


def papers() -> dict[str, str]:
    """paper -> the module that declares its tables (``TABLES``): every registered algorithm that
    names one (:attr:`raysfl.algorithms.spec.Algorithm.tables`), in the order they registered;
    no torch on the way."""
    return {name: cls.tables for name, cls in ALGORITHMS.items() if cls.tables}


def tables_of(paper: str) -> list:
    """The tables ``paper``'s package declares."""
    return list(importlib.import_module(papers()[paper]).TABLES)
