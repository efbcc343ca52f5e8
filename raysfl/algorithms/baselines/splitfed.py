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
  client-by-client loop); client-side models averaged every round. Every role's default.
* ``psl`` -- parallel split learning (as in GAPSL's baseline): one shared server-side model,
  no client-side aggregation: every client keeps its own client-side model
  (:class:`~raysfl.algorithms.roles.OwnModels`, which also says what is evaluated).

The specs are in :mod:`raysfl.algorithms.baselines.spec`, vanilla SL's planner in
:mod:`raysfl.algorithms.baselines.planner`; the roles of their own are here.
"""

from __future__ import annotations

from raysfl.algorithms.roles import ClientSide, ServerSide, StepResult, record_gradient_angle
from raysfl.server_steps import apply_flat_gradient, per_client_gradients, refresh_batch_norm_stats


class KeepsOwnModel(ClientSide):
    """A client that keeps its client-side model: nothing is uploaded (PSL, EPSL, GAPSL)."""

    uploads_model = False


class PSLServer(ServerSide):
    """``mean``: the shared step on the concatenated group (SplitFed V2's server step).
    ``sum``: each client's gradient of the server side (batched), summed -- GAPSL's server step
    with every client selected. Every client gets the gradient of its own loss."""

    def streams(self) -> bool:
        """``mean`` is SplitFed V2's step, which may stream (``sum`` needs the whole group)."""
        return self.params.server_reduction == "mean" and self.shared_step_streams()

    def step(self, batches):
        if self.params.server_reduction == "mean":
            return super().step(batches)
        grads, act_grads, losses, names, has_bn = per_client_gradients(self.model, batches, self.objective)
        if has_bn:
            refresh_batch_norm_stats(self.model, batches)
        apply_flat_gradient(self.model, self.opt, batches[0][1], names, grads.sum(dim=0))
        if self.cfg.grad_angles:
            record_gradient_angle(self, grads)
        return StepResult(act_grads, losses)
