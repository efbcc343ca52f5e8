"""The one place optimizers are built (client parts, client classifiers, servers, centralised).

``--optimizer sgd`` (default): SGD with ``--momentum`` and ``--weight-decay``.
``--optimizer adamw``: AdamW with ``--weight-decay`` (GAPSL's ViT setting, Sec. IV-4).

Both are torch's own, less one cost: torch.optim wraps ``step`` and the ``Optimizer`` methods
(``add_param_group``, ``zero_grad``, ``state_dict``, ``load_state_dict``) in helpers for
``torch.compile`` that import ``torch._dynamo`` on a process's first call -- 1.3 s of CPU in
every actor process, about 4 s of a cold start's wall time on 2 cores with six actors
(docs/performance.md, section 6). raysfl never compiles an optimizer, so its optimizers call
the methods those helpers wrap (``__wrapped__``), with the grad mode torch's ``step`` wrapper
sets (off: ``differentiable`` is never asked for). Same arithmetic, same state dicts.
"""

from __future__ import annotations

import torch

from raysfl.config import OPTIMIZERS  # noqa: F401 - the choices, defined with the settings


def _without_dynamo(base: type) -> type:
    """``base`` with its step and the Optimizer methods unwrapped from the torch.compile helpers."""
    wrapped_step = base.step.__wrapped__

    def step(self, closure=None):
        with torch.no_grad():  # what torch's wrapper of step does, less the import
            return wrapped_step(self, closure)

    plain = {name: getattr(torch.optim.Optimizer, name).__wrapped__
             for name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict")}
    return type(base.__name__, (base,), {"__module__": __name__, "__doc__": base.__doc__, "step": step, **plain})


SGD = _without_dynamo(torch.optim.SGD)
AdamW = _without_dynamo(torch.optim.AdamW)


def build_optimizer(params, cfg, lr: float) -> torch.optim.Optimizer:
    if cfg.optimizer == "adamw":
        return AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
    return SGD(params, lr=lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
