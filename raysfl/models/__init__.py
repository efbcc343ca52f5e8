"""Splittable models and the model zoo (see ``splittable`` and ``zoo``)."""

from raysfl.models.splittable import ModelPart, SplitModel, block_index
from raysfl.models.zoo import MODELS, build_model

__all__ = ["MODELS", "ModelPart", "SplitModel", "block_index", "build_model"]
