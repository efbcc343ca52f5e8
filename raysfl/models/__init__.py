"""Splittable models and the model zoo (see ``splittable`` and ``zoo``)."""

from raysfl.models.custom import split_sequential
from raysfl.models.splittable import ModelPart, SplitModel, block_index
from raysfl.models.zoo import MODELS, build_model, initial_model

__all__ = ["MODELS", "ModelPart", "SplitModel", "block_index", "build_model", "initial_model", "split_sequential"]
