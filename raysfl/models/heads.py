"""Lightweight client-side classifiers on smashed data (SuperSFL's h_phi_i, Sec. II-B;
BESplit's auxiliary head).

A client that holds the first d blocks of a model needs a classifier on the activations of
block d, whatever their shape. Feature maps (C, H, W) are either global-average-pooled (one
value per channel: the default, BESplit's head) or, with ``spatial=True`` (SuperSFL's head),
average-pooled to a grid of at most ``grid`` x ``grid`` and flattened, so the linear layer
sees *where* a feature fires -- on a shallow CNN prefix most of the class information is in
the layout, which one value per channel throws away. Token sequences (T, D) are
layer-normalised and mean-pooled over tokens, flat features (D,) go straight to the linear
layer, whatever ``spatial`` says. One linear layer on top keeps it cheap on small devices.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class _TokenMean(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x).mean(dim=1)


SPATIAL_GRID = 4  # the spatial head's largest pooled grid side: at most C x 16 inputs to its linear layer


def client_classifier(act_shape: tuple[int, ...], num_classes: int, spatial: bool = False,
                      grid: int = SPATIAL_GRID) -> nn.Module:
    """A pooling + linear classifier for activations of shape ``act_shape`` (no batch dim).

    ``spatial``: feature maps are pooled to min(H, grid) x min(W, grid) (the identity when the
    map is already that small) and flattened instead of being averaged to one value per
    channel. Token and flat activations get the same head either way."""
    if len(act_shape) == 3 and spatial:  # (C, H, W) feature maps, keeping their layout
        c, h, w = act_shape
        gh, gw = min(h, grid), min(w, grid)
        return nn.Sequential(nn.AdaptiveAvgPool2d((gh, gw)), nn.Flatten(), nn.Linear(c * gh * gw, num_classes))
    if len(act_shape) == 3:    # (C, H, W) feature maps, one value per channel
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(act_shape[0], num_classes))
    if len(act_shape) == 2:    # (tokens, dim)
        return nn.Sequential(_TokenMean(act_shape[1]), nn.Linear(act_shape[1], num_classes))
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(act_shape), num_classes))
