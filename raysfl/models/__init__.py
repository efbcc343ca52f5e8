"""Splittable models and the model zoo (see ``splittable`` and ``zoo``).

The catalogue (``MODELS``, :func:`model_info`: names, blocks, valid cuts) is light; the rest
needs torch and is imported on first use, so that validation and the command line never
import torch."""

from __future__ import annotations

import importlib

from raysfl.models.catalog import MODELS, ModelInfo, model_info

_LAZY = {
    "ModelPart": "raysfl.models.splittable", "SplitModel": "raysfl.models.splittable",
    "block_index": "raysfl.models.splittable", "build_model": "raysfl.models.zoo",
    "initial_model": "raysfl.models.zoo", "split_sequential": "raysfl.models.custom",
}

__all__ = ["MODELS", "ModelInfo", "ModelPart", "SplitModel", "block_index", "build_model", "initial_model",
           "model_info", "split_sequential"]


def __getattr__(name: str):
    if name in _LAZY:
        value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
        return value
    raise AttributeError(f"module 'raysfl.models' has no attribute {name!r}")
