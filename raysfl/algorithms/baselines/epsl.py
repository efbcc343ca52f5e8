"""EPSL (Lin, Zhu, Deng, Chen, Gao, Huang, Fang, "Efficient Parallel Split Learning over
Resource-constrained Wireless Edge Networks", IEEE TMC 2024): parallel split learning whose
server aggregates part of the last layer's gradients across clients. GAPSL's paper (ref.
[23], Sec. IV-A3, where it is called EPSSL) compares with it: "a variant of PSL that
aggregates a portion of the last-layer activation's gradients on the server to reduce
computing and communication overhead".

raysfl's reading (EPSL's own paper is not in this repository, so this follows GAPSL's
sentence and PSL's shape): every client keeps its own client-side model, as in PSL; in each
server step, for the first ``ceil(phi * b)`` sample positions of the clients' batches, the
gradient of the loss with respect to the last layer's output (the logits) is replaced by its
mean over the clients at that position; the server back-propagates these gradients (the
rest unchanged) through the server side and returns each client its gradient at the cut.
``phi = 0`` is PSL's step. The aggregated rows' gradients then carry every client's labels,
which is the calibration EPSL's aggregation brings to non-IID data. Its saving in server
computation (back-propagating an aggregated row once instead of once per client) is not
modelled: the learning is the same, the FLOP count is PSL's.

EPSL's spec (``phi``, its check) is in :mod:`raysfl.algorithms.baselines.spec`; its server role here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from raysfl.algorithms.roles import ServerSide, StepResult
from raysfl.models import SplitModel


def aggregated_last_layer_step(model: SplitModel, opt: torch.optim.Optimizer, batches, phi: float,
                               reduction: str = "mean"):
    """One step of the shared server side with EPSL's last-layer gradient aggregation.

    ``batches``: (client, cut, smashed activations, labels), one cut. The server's loss is the
    mean cross-entropy over every row of the group (PSL's ``mean`` step) except that, at the
    first ``ceil(phi * b_max)`` row positions, each client's gradient at the logits is the mean
    over the clients holding that position. Returns ({client: gradient of its own share at its
    cut}, {client: its mean loss}), scaled as :func:`raysfl.server_steps.shared_server_step`
    scales them (each client as if it trained alone with the server). ``reduction="sum"``: the
    server's loss is the sum of the clients' mean losses (each row weighted 1 / n_i, not
    1 / sum n_i), GAPSL's eq. (8) reduction; the clients' gradients are the same either way.
    """
    cuts = {b[1] for b in batches}
    if len(cuts) != 1:
        raise ValueError(f"EPSL's step needs one cut for the group, got {sorted(cuts)}")
    cut = cuts.pop()
    sizes = [int(b[3].shape[0]) for b in batches]
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    n_total = sum(sizes)
    opt.zero_grad(set_to_none=True)
    x = torch.cat([b[2] for b in batches]).requires_grad_(True)
    y = torch.cat([b[3] for b in batches])
    logits = x
    for block in model.blocks[cut:]:
        logits = block(logits)
    with torch.no_grad():
        per_row = F.cross_entropy(logits, y, reduction="none")
        g = torch.softmax(logits, dim=1) - F.one_hot(y, logits.shape[1]).to(logits.dtype)  # d CE_row / d logits
        for j in range(math.ceil(phi * max(sizes))):
            rows = [o + j for o, n in zip(offsets, sizes) if j < n]
            g[rows] = g[rows].mean(dim=0)
    if reduction == "sum":
        row_weight = torch.cat([torch.full((n,), 1.0 / n, dtype=logits.dtype, device=logits.device) for n in sizes])
        (logits * g * row_weight[:, None]).sum().backward()
    else:
        (logits * g).sum().div(n_total).backward()
    opt.step()
    grads, losses = {}, {}
    for (client, _, _, _), o, n in zip(batches, offsets, sizes):
        grads[client] = x.grad[o:o + n] * (1.0 if reduction == "sum" else n_total / n)
        losses[client] = float(per_row[o:o + n].mean())
    return grads, losses


class EPSLServer(ServerSide):
    """PSL's shared server side, stepped with EPSL's last-layer gradient aggregation."""

    def step(self, batches):
        return StepResult(*aggregated_last_layer_step(self.model, self.opt, batches, self.params.phi,
                                                      self.params.server_reduction))
