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

# paper -> the module that declares its tables (``TABLES``); no torch on the way
PAPERS = {
    "gapsl": "raysfl.algorithms.gapsl.tables",
    "fed_pairing": "raysfl.algorithms.fed_pairing.tables",
    "besplit": "raysfl.algorithms.besplit.tables",
    "flex_sfl": "raysfl.algorithms.flex_sfl.tables",
    "super_sfl": "raysfl.algorithms.super_sfl.tables",
}


def tables_of(paper: str) -> list:
    """The tables ``paper``'s package declares."""
    return list(importlib.import_module(PAPERS[paper]).TABLES)
