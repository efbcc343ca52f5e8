"""The one place optimizers are built (client parts, client classifiers, servers, centralised).

``--optimizer sgd`` (default): SGD with ``--momentum`` and ``--weight-decay``.
``--optimizer adamw``: AdamW with ``--weight-decay`` (GAPSL's ViT setting, Sec. IV-4).
"""

from __future__ import annotations

import torch

from raysfl.config import OPTIMIZERS  # noqa: F401 - the choices, defined with the settings


def build_optimizer(params, cfg, lr: float) -> torch.optim.Optimizer:
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
