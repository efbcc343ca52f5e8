"""FedPairing's loss weights (eqs. 2-3) and why they decide the global step size.

Eqs. (2)-(3) step each client's model on a_i-weighted gradients, a_i = |D_i| / sum_k |D_k|
("the server determines the aggregation weight a_i for each client based on the same method
used in FedAvg"), and the server then averages the models with no weight of its own:
"Since the aggregation weights of each client have already been applied to the
corresponding gradients during backward propagation, the server can directly perform
averaging" (Sec. II-A.3), w_g = (1/N) sum_i w^i (Alg. 2).

Within a pair with L_i + L_j = W every layer of the pair's two models receives each
partner's gradient exactly once (own prefix on the own copy, suffix on the partner's), so
after one step sum_i (w^i - w_g) = -eta sum_i a_i g_i and the plain mean moves the global
model by -(eta / N) sum_i a_i g_i: FedAvg's step divided by N (lr 0.1 with 20 clients acts
like 0.005). Two readings, ``--pair-weights``:

* ``fedavg`` (default): the loss weight is K a_i = n_i / mean_k n_k, with a_i normalised over
  the round's K clients. The plain mean then moves the global model by -eta sum_i a_i g_i,
  FedAvg's global step at the same lr (exactly so for one local SGD step, to first order for
  several). It does **not** keep each client's local SGD at the paper's lr: every step on
  client i's data (its prefix on its own copy, its suffix on its partner's) is scaled by
  n_i / mean(n), so client i trains at an effective lr of eta n_i / mean(n). With equal
  sizes (IID) that is eta; on a size-skewed partition it is not (lr 0.1 became 0.01 for the
  smallest and 0.245 for the largest client on Dirichlet 0.3 with 20 clients, issue 34): a
  large client takes more steps *and* larger ones, where a FedAvg client takes eta and is
  weighted by n_i afterwards. The two agree to first order only.
* ``paper``: the literal a_i = |D_i| / sum over all N clients, with the plain mean: every
  client's lr is scaled by a_i (about eta / N), so the global step is FedAvg's divided by N.

``raysfl reproduce fed_pairing --table accuracy_iid`` / ``accuracy_noniid`` run both.
"""

from __future__ import annotations

import numpy as np

from raysfl.algorithms.fed_pairing.spec import PAIR_WEIGHTS


def loss_weights(mode: str, sizes, clients: list[int]) -> dict[int, float]:
    """{client: weight of its loss in both halves of its split step} for the round's
    ``clients`` (``sizes``: samples of every client of the federation)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    if mode == "paper":
        return {c: float(sizes[c] / sizes.sum()) for c in clients}
    if mode == "fedavg":
        round_total = float(sum(sizes[c] for c in clients))
        return {c: float(len(clients) * sizes[c] / round_total) for c in clients}
    raise ValueError(f"unknown pair_weights '{mode}'; allowed: {', '.join(PAIR_WEIGHTS)}")
