"""GAPSL as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:class:`~raysfl.algorithms.baselines.planner.EqualSteps`: every participant in every server step) and the
server (:mod:`~raysfl.algorithms.gapsl.algorithm`: LGI and GDA on the per-client gradients)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from raysfl.algorithms.spec import Algorithm, role
from raysfl.algorithms.baselines.spec import RoundStepsParams
from raysfl.errors import ConfigError

LGI_MODES = ("lgi", "none", "random")  # GAPSL | Non-LGI (all gradients) | Rand-LGI (random subset), Sec. V-C
GDA_MODES = ("gda", "none", "random")  # GAPSL | Non-GDA | Rand-GDA, Sec. V-C (gda.py)
REDUCTIONS = ("sum", "mean")           # L_g of eq. (8) over S^ (gda.loss_gradient)
REGULARIZERS = ("detached", "second_order")  # eq. (7)'s term: footnote 6 | differentiated (second_order.py)
CUT_GRADIENTS = ("eq8", "own")
ROUND_STEPS = ("equal", "epoch")


@dataclass
class GAPSLParams(RoundStepsParams):
    """GAPSL's knobs; defaults are the paper's (Sec. IV-4) where it gives one."""

    k_min: float = 0.2             # K_min of eq. (2)
    k_max: float = 0.8             # K_max of eq. (2)
    time_scaling: bool = True      # eq. (2)'s t/T factor (False: Algorithm 1, line 10, which omits it)
    gda_eta: float = 0.5           # eta of eq. (6): larger = stricter threshold (the paper gives no value)
    gda_lambda: float = 5e-4       # lambda of eq. (7): 5e-4 for VGG-16, 3e-5 for ViT (Sec. IV-4)
    gda_regularizer: str = "detached"  # detached: footnote 6 (lambda has no effect) | second_order
    gda_reduction: str = "sum"     # sum: eq. (8) as written | mean: the selected clients' average
    cut_gradients: str = "eq8"     # eq8: dL_g/da_i (zero outside S^) | own: every client its own loss's
    round_steps: str = "equal"     # equal: every client in every server step (Sec. III-A) | epoch: own epoch
    lgi: str = "lgi"               # lgi | none (Non-LGI) | random (Rand-LGI), Sec. V-C
    gda: str = "gda"               # gda | none (Non-GDA) | random (Rand-GDA), Sec. V-C


class GAPSL(Algorithm):
    name = "gapsl"
    tables = "raysfl.algorithms.gapsl.tables"
    summary = "GAPSL: parallel split learning with leader gradient identification and direction alignment"
    params_cls = GAPSLParams
    planner = role("raysfl.algorithms.baselines.planner:EqualSteps")
    client = role("raysfl.algorithms.baselines.splitfed:KeepsOwnModel")  # PSL: each keeps its client-side model
    server = role("raysfl.algorithms.gapsl.algorithm:GAPSLServer")
    aggregator = role("raysfl.algorithms.roles.aggregator:OwnModels")
    # Sec. IV-4: 10 clients, Dirichlet alpha = 0.1, SGD momentum 0.9, lr 0.005 client / 0.01 server (VGG-16).
    # cut 1: the CNN's first conv layer on the clients, ~1 % of its parameters (VGG-16's four conv
    # layers are 1.8 % of VGG-16; the CNN's cut 2 would put 60 % there).
    config_defaults = {"clients": 10, "partition": "dirichlet", "alpha": 0.1, "momentum": 0.9, "lr": 0.005,
                       "server_lr": 0.01, "cut": 1}

    @classmethod
    def facets(cls, cfg) -> dict[str, str]:
        p = cfg.algo_params
        return {**super().facets(cfg), "server_reduction": p.gda_reduction, "round_steps": p.round_steps}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if not 0 < p.k_min <= p.k_max <= 1:
            raise ConfigError(f"need 0 < k_min <= k_max <= 1, got k_min={p.k_min}, k_max={p.k_max}")
        if not (math.isfinite(p.gda_eta) and p.gda_eta >= 0):
            raise ConfigError(f"gda_eta must be a finite number >= 0, got {p.gda_eta}")
        if not (math.isfinite(p.gda_lambda) and p.gda_lambda >= 0):
            raise ConfigError(f"gda_lambda must be a finite number >= 0, got {p.gda_lambda}")
        for name, value, allowed in (("lgi", p.lgi, LGI_MODES), ("gda", p.gda, GDA_MODES),
                                     ("gda_reduction", p.gda_reduction, REDUCTIONS),
                                     ("gda_regularizer", p.gda_regularizer, REGULARIZERS),
                                     ("cut_gradients", p.cut_gradients, CUT_GRADIENTS),
                                     ("round_steps", p.round_steps, ROUND_STEPS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} '{value}'; allowed: {', '.join(allowed)}")
