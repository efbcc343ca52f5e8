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
"""

from __future__ import annotations

from raysfl.algorithms.base import Algorithm, ClientModel, Protocol, ServerModel


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


class ParallelSplitLearning(Algorithm):
    name = "psl"
    summary = "Parallel split learning: shared server-side model, no client-side aggregation"
    protocol = Protocol(client_model=ClientModel.OWN)
