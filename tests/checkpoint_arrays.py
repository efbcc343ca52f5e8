"""A checkpoint's arrays, flattened by their path in its federation state: for tests that
compare two runs' checkpoints weight by weight. Imported by the tests that do."""

from __future__ import annotations

import numpy as np

from raysfl import checkpoint


def checkpoint_arrays(run_dir, rnd: int) -> dict[str, np.ndarray]:
    """Round ``rnd``'s checkpoint of the run in ``run_dir``: {"/fed/global/<key>": array, ...}."""
    flat = {}

    def walk(prefix, x):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(f"{prefix}/{i}", v)
        elif isinstance(x, np.ndarray):
            flat[prefix] = x
    walk("", checkpoint.load_round(run_dir, rnd)["federation"])
    return flat
