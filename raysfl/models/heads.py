"""Lightweight client-side classifiers on smashed data (SuperSFL's h_phi_i, Sec. II-B).

A client that holds the first d blocks of a model needs a classifier on the activations of
block d, whatever their shape: feature maps (C, H, W) are global-average-pooled, token
sequences (T, D) are layer-normalised and mean-pooled over tokens, flat features (D,) go
straight to the linear layer. One linear layer on top keeps it cheap on small devices.
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


def client_classifier(act_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A pooling + linear classifier for activations of shape ``act_shape`` (no batch dim)."""
    if len(act_shape) == 3:    # (C, H, W) feature maps
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(act_shape[0], num_classes))
    if len(act_shape) == 2:    # (tokens, dim)
        return nn.Sequential(_TokenMean(act_shape[1]), nn.Linear(act_shape[1], num_classes))
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(act_shape), num_classes))
