"""Split learning baselines: vanilla SL, SplitFed V1 and V2, parallel split learning.

Clients run blocks [0, cut) and send smashed data and labels; the server runs the rest and
returns the gradient at the cut. What differs is what is shared and when it is averaged:

* ``sl`` -- vanilla split learning (Gupta & Raskar, 2018): clients take turns; each trains
  its local steps with the single server model and hands its client-side model to the next.
* ``splitfed_v1`` -- SplitFed V1 (Thapa et al., 2022): clients train in parallel, each with
  its own copy of the server-side model; client-side and server-side models are both
  averaged (FedAvg weights) every round.
* ``splitfed_v2`` -- SplitFed V2: one shared server-side model updated on the whole group
  (one concatenated forward/backward per step here, rather than the reference code's
  client-by-client loop); client-side models averaged every round.
* ``psl`` -- parallel split learning (as in GAPSL's baseline): one shared server-side model,
  no client-side aggregation: every client keeps its own client-side model.

Without client-side aggregation there is no single global model to test;
:func:`evaluate_own_models` says what PSL-style algorithms (PSL, EPSL, GAPSL) report instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from raysfl.aggregation import weighted_average
from raysfl.algorithms.base import Algorithm, ClientModel, Protocol, ServerModel
from raysfl.errors import ConfigError
from raysfl.server_steps import apply_flat_gradient, per_client_gradients, refresh_batch_norm_stats

SERVER_REDUCTIONS = ("mean", "sum")
# what evaluate_own_models adds to the test accuracy (fed_evaluate's extra columns)
OWN_MODEL_METRICS = ["test_accuracy_avg_client", "test_accuracy_label_mix", "own_class_share"]


class SplitLearning(Algorithm):
    name = "sl"
    summary = "Vanilla split learning: clients train one after another with one server model"
    protocol = Protocol(sequential=True)


class SplitFedV1(Algorithm):
    name = "splitfed_v1"
    summary = "SplitFed V1: per-client server-side models, both sides averaged every round"
    protocol = Protocol(server_model=ServerModel.PER_CLIENT)


class SplitFedV2(Algorithm):
    name = "splitfed_v2"
    summary = "SplitFed V2: one shared server-side model, client-side models averaged"


def evaluate_own_models(fed, ev) -> tuple[float, float, dict[str, float]]:
    """Test accuracy when every client keeps its own client-side model (PSL, EPSL, GAPSL).

    The reported ``test_accuracy`` (and loss) is the mean, over the round's participants, of
    each client's *composite* model -- its own client-side part followed by the shared
    server side -- on the global test set. GAPSL's paper does not say how it combines test
    accuracy across devices; this is raysfl's reading. Beside it (``OWN_MODEL_METRICS``):

    * ``test_accuracy_avg_client``: one model whose client-side part is the participants'
      client-side models averaged (weighted by their training sizes) *for evaluation only*
      -- what client aggregation would have given at this point, never trained on;
    * ``test_accuracy_label_mix``: each composite model's global-test accuracy with every
      class weighted by its client's training label mix, averaged over clients (how well
      each client serves its own distribution);
    * ``own_class_share``: the share of each composite model's global-test predictions that
      fall in its client's own classes, averaged (1 = it predicts only what it trains on).

    With ``--local-test-fraction`` the runtime adds ``test_accuracy_local`` (each client's
    composite model on its own held-out samples).
    """
    nan = float("nan")
    if not fed.last_clients:
        acc, loss = ev(fed.global_state)
        return acc, loss, dict.fromkeys(OWN_MODEL_METRICS, nan)
    seen = []
    for c in fed.last_clients:
        ev.load({**fed.global_state, **fed.own.get(c, {})})
        seen.append(ev.for_client(ev.model, c))
    sizes = ev.views.histograms.sum(axis=1)
    owned = [(fed.own[c], float(sizes[c])) for c in fed.last_clients if c in fed.own]
    avg = ev(weighted_average(owned, base=fed.global_state))[0] if owned else nan
    return (float(np.mean([r["accuracy"] for r in seen])), float(np.mean([r["loss"] for r in seen])),
            {"test_accuracy_avg_client": float(avg),
             "test_accuracy_label_mix": float(np.mean([r["label_mix"] for r in seen])),
             "own_class_share": float(np.mean([r["own_class_share"] for r in seen]))})


@dataclass
class PSLParams:
    # The server-side loss over the group: "mean" over every sample (one step on the
    # concatenated batch, the default) or "sum" of the clients' mean losses, sum_i L_i (the
    # reduction of GAPSL's eq. 8 with every client kept: the fair baseline for GAPSL's steps).
    server_reduction: str = "mean"


class ParallelSplitLearning(Algorithm):
    name = "psl"
    summary = "Parallel split learning: shared server-side model, no client-side aggregation"
    params_cls = PSLParams
    protocol = Protocol(client_model=ClientModel.OWN)

    @classmethod
    def validate(cls, cfg) -> None:
        if cfg.algo_params.server_reduction not in SERVER_REDUCTIONS:
            raise ConfigError(f"unknown server_reduction '{cfg.algo_params.server_reduction}'; "
                              f"allowed: {', '.join(SERVER_REDUCTIONS)}")

    def server_step(self, server, batches):
        """``mean``: the shared step on the concatenated group (SplitFed V2's server step).
        ``sum``: each client's gradient of the server side (batched), summed -- GAPSL's server
        step with every client selected. Every client gets the gradient of its own loss."""
        if self.params.server_reduction == "mean":
            return super().server_step(server, batches)
        grads, act_grads, losses, names, has_bn = per_client_gradients(server.model, batches)
        if has_bn:
            refresh_batch_norm_stats(server.model, batches)
        apply_flat_gradient(server.model, server.opt, batches[0][1], names, grads.sum(dim=0))
        if self.cfg.grad_angles:
            from raysfl.algorithms.base import record_gradient_angle

            record_gradient_angle(server, grads)
        return act_grads, losses

    def eval_metric_names(self) -> list[str]:
        return list(OWN_MODEL_METRICS)

    def fed_evaluate(self, fed, ev):
        return evaluate_own_models(fed, ev)
