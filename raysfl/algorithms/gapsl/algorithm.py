"""GAPSL (Lin, Aouedi, Ni, Chatzinotas, Chen): parallel split learning with leader gradient
identification and gradient direction alignment.

PSL's shape -- many clients, one shared server-side model, no client-side aggregation --
with a server step that looks at each client's gradient of the server-side model:

1. per-client gradients g_i of the server-side model for the whole group at once
   (:func:`raysfl.server_steps.per_client_gradients`: ``torch.func.grad`` under ``vmap``
   over the clients, one functional forward/backward per client batch, batched);
2. LGI (Sec. III-B, eqs. 1-4, Alg. 1, :mod:`raysfl.algorithms.gapsl.lgi`): consistency scores,
   the adaptive ratio K^t, and the leader gradient from the most consistent clients;
3. GDA (Sec. III-C, eqs. 5-8, Alg. 2, :mod:`raysfl.algorithms.gapsl.gda`): the adaptive angular
   threshold, and the server-side update from the selected clients' gradients, each
   aligned towards the leader (the first-order reading of eq. 7 in gda.py).

Every client, selected or not, gets back the gradient of its own loss with respect to its
smashed data, computed at the server weights of that step: GDA decides what the shared
server-side model learns from, not whether a client may train its own client-side model
(without that gradient a filtered-out client would never train at all, since PSL never
aggregates client-side models).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from raysfl.algorithms.base import Algorithm, ClientModel, Protocol, record_gradient_angle
from raysfl.algorithms.gapsl.gda import GDA_MODES, REDUCTIONS, server_update
from raysfl.algorithms.gapsl.lgi import LGI_MODES, leader_gradient
from raysfl.errors import ConfigError
from raysfl.server_steps import apply_flat_gradient, per_client_gradients, refresh_batch_norm_stats


@dataclass
class GAPSLParams:
    """GAPSL's knobs; defaults are the paper's (Sec. IV-4) where it gives one."""

    k_min: float = 0.2             # K_min of eq. (2)
    k_max: float = 0.8             # K_max of eq. (2)
    time_scaling: bool = True      # eq. (2)'s t/T factor (False: Algorithm 1, line 10, which omits it)
    gda_eta: float = 0.5           # eta of eq. (6): larger = stricter threshold (the paper gives no value)
    gda_lambda: float = 5e-4       # lambda of eq. (7): 5e-4 for VGG-16, 3e-5 for ViT (Sec. IV-4)
    gda_reduction: str = "sum"     # sum: eq. (8) as written | mean: the selected clients' average
    lgi: str = "lgi"               # lgi | none (Non-LGI) | random (Rand-LGI), Sec. V-C
    gda: str = "gda"               # gda | none (Non-GDA) | random (Rand-GDA), Sec. V-C


class GAPSL(Algorithm):
    name = "gapsl"
    summary = "GAPSL: parallel split learning with leader gradient identification and direction alignment"
    params_cls = GAPSLParams
    protocol = Protocol(client_model=ClientModel.OWN)  # PSL: every client keeps its own client-side model
    # Sec. IV-4: 10 clients, Dirichlet alpha = 0.1, SGD momentum 0.9, lr 0.005 client / 0.01 server (VGG-16).
    config_defaults = {"clients": 10, "partition": "dirichlet", "alpha": 0.1, "momentum": 0.9, "lr": 0.005,
                       "server_lr": 0.01}

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
                                     ("gda_reduction", p.gda_reduction, REDUCTIONS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} '{value}'; allowed: {', '.join(allowed)}")

    def server_metric_names(self) -> list[str]:
        return ["grad_angle_deg", "lgi_k", "gda_kept", "gda_threshold_deg"]

    def server_step(self, server, batches):
        """LGI + GDA on the group's per-client gradients, one optimizer step of the shared
        server-side model; each client gets the gradient of its own loss at its cut."""
        p = server.extra
        grads, act_grads, losses, names, has_bn = per_client_gradients(server.model, batches)
        calls = p.get("calls", 0)
        p["calls"] = calls + 1
        rng = np.random.default_rng([self.cfg.seed, server.round, calls, 0x6A95])
        prm = self.params
        lead, leaders, k, p["nu_range"] = leader_gradient(grads, server.round, self.cfg.rounds, p.get("nu_range"),
                                                         prm.k_min, prm.k_max, prm.lgi, rng, prm.time_scaling)
        update, used, threshold, _ = server_update(grads, lead, leaders, prm.gda_eta, prm.gda_lambda, prm.gda,
                                                   prm.gda_reduction, rng)
        if has_bn:
            refresh_batch_norm_stats(server.model, batches)
        apply_flat_gradient(server.model, server.opt, batches[0][1], names, update)
        record_gradient_angle(server, grads)
        server.record("lgi_k", k)
        server.record("gda_kept", len(used) / len(batches))
        server.record("gda_threshold_deg", math.degrees(threshold))
        return act_grads, losses
