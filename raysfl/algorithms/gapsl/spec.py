"""GAPSL as an algorithm: its knobs, their choices, its paper setting and its checks -- no
torch, so listing and validating it imports none. Its roles: the planner
(:class:`~raysfl.algorithms.baselines.planner.EqualSteps`: every participant in every server step) and the
server (:mod:`~raysfl.algorithms.gapsl.algorithm`: LGI and GDA on the per-client gradients)."""

from __future__ import annotations

from dataclasses import dataclass

from raysfl.algorithms.baselines.spec import ROUND_STEPS, ROUND_STEPS_HELP, RoundStepsParams
from raysfl.algorithms.knobs import knob
from raysfl.algorithms.spec import Algorithm, role
from raysfl.errors import ConfigError

LGI_MODES = ("lgi", "none", "random")  # GAPSL | Non-LGI (all gradients) | Rand-LGI (random subset), Sec. V-C
GDA_MODES = ("gda", "none", "random")  # GAPSL | Non-GDA | Rand-GDA, Sec. V-C (gda.py)
REDUCTIONS = ("sum", "mean")           # L_g of eq. (8) over S^ (gda.loss_gradient)
REGULARIZERS = ("detached", "second_order")  # eq. (7)'s term: footnote 6 | differentiated (second_order.py)
CUT_GRADIENTS = ("eq8", "own")


@dataclass
class GAPSLParams(RoundStepsParams):
    """GAPSL's knobs; defaults are the paper's (Sec. IV-4) where it gives one."""

    k_min: float = knob(0.2, "GAPSL eq. 2: lowest share of clients in the leader gradient (K_min)", above=0,
                        at_most=1)
    k_max: float = knob(0.8, "GAPSL eq. 2: highest share of clients in the leader gradient (K_max)", above=0,
                        at_most=1)
    time_scaling: bool = knob(True, "GAPSL eq. 2's t/T factor (--no-time-scaling: Algorithm 1, line 10, as "
                                    "printed)")
    gda_eta: float = knob(0.5, "GAPSL eq. 6: threshold = mean - eta x std of the angles to the leader (larger: "
                               "stricter; the paper gives no value)", at_least=0)
    gda_lambda: float = knob(5e-4, "GAPSL eq. 7: regularisation weight (5e-4 for VGG-16, 3e-5 for ViT, Sec. IV-4; "
                                   "no effect with --gda-regularizer detached, footnote 6)", at_least=0)
    gda_regularizer: str = knob("detached", "GAPSL eq. 7: detached (footnote 6: g_i and g_lead constants, lambda "
                                            "has no effect) | second_order (double back-propagation)",
                                choices=REGULARIZERS)
    gda_reduction: str = knob("sum", "GAPSL eq. 8 over the selected clients: sum (as written) | mean",
                              choices=REDUCTIONS)
    cut_gradients: str = knob("eq8", "GAPSL eq. 8: eq8 (dL_g/da_i, zero for clients outside S^) | own (every "
                                     "client its own loss's)", choices=CUT_GRADIENTS)
    round_steps: str = knob("equal", ROUND_STEPS_HELP, choices=ROUND_STEPS)
    lgi: str = knob("lgi", "GAPSL leader gradient: lgi | none (Non-LGI) | random (Rand-LGI), Sec. V-C",
                    choices=LGI_MODES)
    gda: str = knob("gda", "GAPSL alignment: gda | none (Non-GDA) | random (Rand-GDA), Sec. V-C",
                    choices=GDA_MODES)


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
