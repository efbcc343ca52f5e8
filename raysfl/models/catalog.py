"""What each zoo model looks like, known without building it (for validation and ``raysfl
list`` before anything heavy is imported; no torch here).

A zoo model's blocks do not depend on the data: the same number of blocks, and of leading
convolutional blocks, for every input shape and class count (``tests/test_models.py`` checks
this catalogue against :func:`raysfl.models.build_model` for every model and data set).
"""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.errors import ConfigError, excerpt


@dataclass(frozen=True)
class ModelInfo:
    name: str
    num_blocks: int          # L: cut k runs blocks [0, k) on the client
    conv_blocks: int         # leading convolutional blocks (SplitModel.leading_conv_blocks)
    cuts: tuple[int, ...]    # the valid cuts (SplitModel.valid_cuts)


def _zoo(name: str, num_blocks: int, conv_blocks: int) -> ModelInfo:
    return ModelInfo(name, num_blocks, conv_blocks, tuple(range(1, num_blocks)))  # every cut 1..L-1


# the zoo (raysfl/models/zoo.py), in the order it is listed
MODELS: dict[str, ModelInfo] = {m.name: m for m in (
    _zoo("cnn", 4, 2),        # conv, conv, fc, fc
    _zoo("vgg16", 14, 13),    # 13 conv layers, the classifier
    _zoo("vgg19", 17, 16),    # 16 conv layers, the classifier
    _zoo("resnet18", 10, 9),  # the stem, 8 residual blocks, the classifier
    _zoo("vit", 8, 1),        # the (convolutional) patch embedding, 6 encoder layers, the head
)}


def model_info(name: str) -> ModelInfo:
    """A zoo model's, or your own model's (``custom-<name>``, registered for the run by
    ``raysfl.run(cfg, model=...)``: :mod:`raysfl.models.custom`), blocks and valid cuts."""
    from raysfl.models import custom

    if custom.is_custom(name):
        model = custom.lookup(name)
        if model is None:
            raise custom.missing(name)
        return ModelInfo(name, model.num_blocks, model.leading_conv_blocks(), tuple(model.valid_cuts()))
    if name not in MODELS:
        raise ConfigError(f"unknown model {excerpt(name)}; allowed: {', '.join(MODELS)}")
    return MODELS[name]
