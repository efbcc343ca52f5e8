"""GAPSL (Lin, Aouedi, Ni, Chatzinotas, Chen): parallel split learning with leader gradient
identification and gradient direction alignment.

PSL's shape -- many clients, one shared server-side model, no client-side aggregation --
with a server step that looks at each client's gradient of the server-side model.

**A round** (Sec. III-A: "i) each client device executes FP ... and transmits the resulting
activations to the server; ii) the server employs LGI to construct a leader gradient and
then utilizes GDA ..., followed by BP on the server-side model; iii) the server sends all
generated gradients to the client device"): every server step holds one batch of *every*
participant, so every participant takes the same number of steps in a round
(:meth:`EqualSteps.plan_steps`: ``ceil(local_epochs x mean client size / batch)``, or
``--local-steps``; ``round_steps="epoch"`` gives each client its own epoch instead).

**A server step:**

1. per-client gradients g_i of the server-side model for the whole group at once
   (:func:`raysfl.server_steps.per_client_gradients`: ``torch.func.grad`` under ``vmap``);
2. LGI (Sec. III-B, eqs. 1-4, Alg. 1, :mod:`raysfl.algorithms.gapsl.lgi`): consistency scores,
   the adaptive ratio K^t, and the leader gradient from the most consistent clients;
3. GDA (Sec. III-C, eqs. 5-8, Alg. 2, :mod:`raysfl.algorithms.gapsl.gda`): the adaptive angular
   threshold selects S^; the server-side model steps on dL_g/dw of eq. 8, and each client
   gets dL_g/da_i at its cut -- zero outside S^ (``cut_gradients="eq8"``; ``"own"`` sends
   every client the gradient of its own loss). Eq. 7's term is detached as footnote 6 says
   (lambda has no effect) unless ``gda_regularizer="second_order"``.

A group of fewer than 3 clients skips LGI and GDA (with 2 clients the two consistency
scores are equal, their spread is 0 and the lower index always leads): it takes PSL's step
with GAPSL's reduction, and its spread does not enter eq. 2's running range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from raysfl.algorithms.baselines.splitfed import KeepsOwnModel
from raysfl.algorithms.gapsl import gda
from raysfl.algorithms.gapsl.lgi import LGI_MODES, leader_gradient
from raysfl.algorithms.gapsl.second_order import regularizer_gradients
from raysfl.algorithms.roles import OwnModels, Planner, ServerSide, StepResult, record_gradient_angle
from raysfl.algorithms.spec import Algorithm
from raysfl.errors import ConfigError
from raysfl.server_steps import apply_flat_gradient, per_client_gradients, refresh_batch_norm_stats

MIN_GROUP = 3  # smallest group LGI/GDA run on
CUT_GRADIENTS = ("eq8", "own")
ROUND_STEPS = ("equal", "epoch")


@dataclass
class GAPSLParams:
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


class EqualSteps(Planner):
    """GAPSL's planning: every server step holds one batch of every participant."""

    def plan_steps(self, rnd: int, clients: list[int], ctx) -> dict[int, tuple[int, int]] | None:
        """``equal``: one step count for every client, so that each server step holds one batch
        of every participant: ``--local-steps``, or one epoch of the mean client,
        ``ceil(local_epochs x mean(n_k) / batch)`` (about one pass over the federation's data
        per round, as the runtime's own rule gives in total). ``epoch``: the runtime's rule."""
        if self.params.round_steps == "epoch":
            return None
        cfg = self.cfg
        steps = cfg.local_steps or max(1, math.ceil(cfg.local_epochs * float(np.mean(ctx.sizes)) / cfg.batch_size))
        return {c: (steps, min(cfg.batch_size, int(ctx.sizes[c]))) for c in clients}


@dataclass
class LGIState:
    """The server's LGI state across steps and rounds (checkpointed)."""

    calls: int = 0                            # server steps taken (seeds Rand-LGI / Rand-GDA)
    nu_range: tuple[float, float] | None = None  # running (min, max) of the dispersion nu (eq. 2)


class GAPSLServer(ServerSide):
    """LGI + GDA on the group's per-client gradients, one optimizer step of the shared
    server-side model on dL_g/dw (eq. 8); each client gets dL_g/da_i at its cut."""

    state_cls = LGIState

    @classmethod
    def columns(cls, cfg) -> list[str]:
        names = ["grad_angle_deg", "group_clients", "lgi_k", "gda_kept", "gda_threshold_deg", "lgi_skipped"]
        return names + (["gda_reg_rel"] if cfg.algo_params.gda_regularizer == "second_order" else [])

    def step(self, batches):
        st, prm = self.state, self.params
        grads, act_grads, losses, names, has_bn = per_client_gradients(self.model, batches)
        calls = st.calls
        st.calls = calls + 1
        everyone = list(range(len(batches)))
        record_gradient_angle(self, grads)
        self.record("group_clients", len(batches))
        if len(batches) < MIN_GROUP:
            selected, coeffs = everyone, None
            self.record("lgi_skipped", 1.0)
        else:
            rng = np.random.default_rng([self.cfg.seed, self.round, calls, 0x6A95])
            lead, leaders, k, st.nu_range = leader_gradient(grads, self.round, self.cfg.rounds, st.nu_range,
                                                            prm.k_min, prm.k_max, prm.lgi, rng, prm.time_scaling)
            selected, threshold, _ = gda.select(grads, lead, leaders, prm.gda_eta, prm.gda, rng)
            coeffs = (gda.regularizer_coefficients(grads, leaders, selected, prm.gda_lambda)
                      if prm.gda_regularizer == "second_order" else None)
            self.record("lgi_skipped", 0.0)
            self.record("lgi_k", k)
            self.record("gda_kept", len(selected) / len(batches))
            self.record("gda_threshold_deg", math.degrees(threshold))
        update = gda.loss_gradient(grads, selected, prm.gda_reduction)
        reg_act: dict[int, torch.Tensor] = {}
        if coeffs is not None:
            reg, reg_act = regularizer_gradients(self.model, batches, names, coeffs)
            reg = reg if prm.gda_reduction == "sum" or not selected else reg / len(selected)
            self.record("gda_reg_rel", float(reg.norm() / update.norm().clamp_min(1e-30)))  # |eq. 7's part| / |sum g_i|
            update = update + reg
        if prm.cut_gradients == "eq8":
            chosen = {batches[i][0] for i in selected}
            act_grads = {c: g if c in chosen else torch.zeros_like(g) for c, g in act_grads.items()}
        for c, extra in reg_act.items():
            act_grads[c] = act_grads[c] + extra
        if has_bn:
            refresh_batch_norm_stats(self.model, batches)
        apply_flat_gradient(self.model, self.opt, batches[0][1], names, update)
        return StepResult(act_grads, losses)


class GAPSL(Algorithm):
    name = "gapsl"
    summary = "GAPSL: parallel split learning with leader gradient identification and direction alignment"
    params_cls = GAPSLParams
    planner = EqualSteps
    client = KeepsOwnModel  # PSL: every client keeps its own client-side model
    server = GAPSLServer
    aggregator = OwnModels
    # Sec. IV-4: 10 clients, Dirichlet alpha = 0.1, SGD momentum 0.9, lr 0.005 client / 0.01 server (VGG-16).
    # cut 1: the CNN's first conv layer on the clients, ~1 % of its parameters (VGG-16's four conv
    # layers are 1.8 % of VGG-16; the CNN's cut 2 would put 60 % there).
    config_defaults = {"clients": 10, "partition": "dirichlet", "alpha": 0.1, "momentum": 0.9, "lr": 0.005,
                       "server_lr": 0.01, "cut": 1}

    @classmethod
    def validate(cls, cfg) -> None:
        p = cfg.algo_params
        if not 0 < p.k_min <= p.k_max <= 1:
            raise ConfigError(f"need 0 < k_min <= k_max <= 1, got k_min={p.k_min}, k_max={p.k_max}")
        if not (math.isfinite(p.gda_eta) and p.gda_eta >= 0):
            raise ConfigError(f"gda_eta must be a finite number >= 0, got {p.gda_eta}")
        if not (math.isfinite(p.gda_lambda) and p.gda_lambda >= 0):
            raise ConfigError(f"gda_lambda must be a finite number >= 0, got {p.gda_lambda}")
        for name, value, allowed in (("lgi", p.lgi, LGI_MODES), ("gda", p.gda, gda.GDA_MODES),
                                     ("gda_reduction", p.gda_reduction, gda.REDUCTIONS),
                                     ("gda_regularizer", p.gda_regularizer, gda.REGULARIZERS),
                                     ("cut_gradients", p.cut_gradients, CUT_GRADIENTS),
                                     ("round_steps", p.round_steps, ROUND_STEPS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} '{value}'; allowed: {', '.join(allowed)}")
