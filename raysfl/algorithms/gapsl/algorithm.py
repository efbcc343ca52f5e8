"""GAPSL (Lin, Aouedi, Ni, Chatzinotas, Chen): parallel split learning with leader gradient
identification and gradient direction alignment.

PSL's shape -- many clients, one shared server-side model, no client-side aggregation --
with a server step that looks at each client's gradient of the server-side model.

**A round** (Sec. III-A: "i) each client device executes FP ... and transmits the resulting
activations to the server; ii) the server employs LGI to construct a leader gradient and
then utilizes GDA ..., followed by BP on the server-side model; iii) the server sends all
generated gradients to the client device"): every server step holds one batch of *every*
participant, so every participant takes the same number of steps in a round
(:meth:`raysfl.algorithms.baselines.planner.EqualSteps.plan_steps`: ``ceil(local_epochs x mean client size / batch)``, or
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

The spec (knobs, their choices, paper setting, checks) is in :mod:`raysfl.algorithms.gapsl.spec`;
this module holds the server role.

A group of fewer than 3 clients skips LGI and GDA (with 2 clients the two consistency
scores are equal, their spread is 0 and the lower index always leads): it takes PSL's step
with GAPSL's reduction, and its spread does not enter eq. 2's running range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from raysfl.algorithms.gapsl import gda
from raysfl.algorithms.gapsl.lgi import leader_gradient
from raysfl.algorithms.gapsl.second_order import regularizer_gradients
from raysfl.algorithms.roles import ServerSide, StepResult, record_gradient_angle
from raysfl.angles import pairwise_angles
from raysfl.server_steps import apply_flat_gradient, per_client_gradients, refresh_batch_norm_stats

MIN_GROUP = 3  # smallest group LGI/GDA run on


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
        grads, act_grads, losses, names, has_bn = per_client_gradients(self.model, batches, self.objective)
        calls = st.calls
        st.calls = calls + 1
        everyone = list(range(len(batches)))
        # eq. 1's angles, read by the recorded mean angle and by LGI: one (S, S) matrix in float64
        # over the whole server side, a fifth of the server's time when computed twice (mnist5k);
        # eq. 5's angles to the leader are in float64 too: the gradients are converted once for both
        grads64 = grads.double()
        angles = pairwise_angles(grads64) if len(batches) > 1 else None
        record_gradient_angle(self, grads, angles)
        self.record("group_clients", len(batches))
        if len(batches) < MIN_GROUP:
            selected, coeffs = everyone, None
            self.record("lgi_skipped", 1.0)
        else:
            rng = np.random.default_rng([self.cfg.seed, self.round, calls, 0x6A95])
            lead, leaders, k, st.nu_range = leader_gradient(grads, self.round, self.cfg.rounds, st.nu_range,
                                                            prm.k_min, prm.k_max, prm.lgi, rng, prm.time_scaling,
                                                            angles)
            selected, threshold, _ = gda.select(grads64, lead, leaders, prm.gda_eta, prm.gda, rng)
            coeffs = (gda.regularizer_coefficients(grads, leaders, selected, prm.gda_lambda)
                      if prm.gda_regularizer == "second_order" else None)
            self.record("lgi_skipped", 0.0)
            self.record("lgi_k", k)
            self.record("gda_kept", len(selected) / len(batches))
            self.record("gda_threshold_deg", math.degrees(threshold))
        update = gda.loss_gradient(grads, selected, prm.gda_reduction)
        reg_act: dict[int, torch.Tensor] = {}
        if coeffs is not None:
            reg, reg_act = regularizer_gradients(self.model, batches, names, coeffs, self.objective)
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
