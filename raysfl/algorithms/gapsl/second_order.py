"""Eq. (7) by double back-propagation (GAPSL's ``gda_regularizer="second_order"``).

Footnote 6 detaches g_i and g_lead, which removes the regulariser's gradient; this module
keeps it. Given c_j = d[lambda * sum_i (1 - cos theta_lead,i)]/d g_j for every client j
(:func:`raysfl.algorithms.gapsl.gda.regularizer_coefficients`), the regulariser's gradient is

    d/dw  = sum_j  d<g_j(w, a_j), c_j>/dw     (= H_ww,j c_j, a Hessian-vector product)
    d/da_j =       d<g_j(w, a_j), c_j>/da_j   (the mixed second derivative times c_j)

with g_j = dL_j/dw client j's gradient of its own mean loss. Both come from one
reverse-over-reverse pass per client (``torch.func.grad`` of the inner product of a
``torch.func.grad``), ``vmap``-ed over the clients of each batch size, as
:func:`raysfl.server_steps.per_client_gradients` computes g_j itself.
"""

from __future__ import annotations

import torch

from raysfl.models import SplitModel
from raysfl.objective import BUILT_IN
from raysfl.server_steps import _batch_stats_only


def regularizer_gradients(model: SplitModel, batches, names: list[str], coeffs: torch.Tensor, loss=None):
    """(flat gradient of sum_j <g_j, c_j> over the server-side parameters, {client: its
    gradient at the cut}) for ``coeffs`` = (clients, P) rows c_j in ``batches`` order and the
    parameter order ``names`` of ``per_client_gradients``. Clients whose c_j is zero are skipped."""
    from torch.func import functional_call, grad, vmap

    cut = batches[0][1]
    part = model.part(cut, model.num_blocks)
    params = {n: p.detach() for n, p in part.named_parameters()}
    shapes = [params[n].shape for n in names]
    sizes = [params[n].numel() for n in names]

    objective = loss if loss is not None else BUILT_IN["cross_entropy"]  # the run's loss (raysfl.objective)

    def loss_fn(p, x, y):
        return objective(functional_call(part, p, (x,)), y)

    def contracted(p, x, y, c):
        g = grad(loss_fn)(p, x, y)
        return sum((g[n] * cn.view(s)).sum() for n, cn, s in zip(names, c.split(sizes), shapes))

    fn = vmap(grad(contracted, argnums=(0, 1)), in_dims=(None, 0, 0, 0))
    total = torch.zeros(sum(sizes), dtype=coeffs.dtype, device=params[names[0]].device)
    act: dict[int, torch.Tensor] = {}
    live = [i for i in range(len(batches)) if bool(coeffs[i].abs().sum() > 0)]
    by_size: dict[int, list[int]] = {}
    for i in live:
        by_size.setdefault(int(batches[i][3].shape[0]), []).append(i)
    with _batch_stats_only(part):
        for _, idx in sorted(by_size.items()):
            x = torch.stack([batches[i][2].detach() for i in idx])
            y = torch.stack([batches[i][3] for i in idx])
            g_p, g_x = fn(params, x, y, coeffs[idx])
            total += torch.cat([g_p[n].reshape(len(idx), -1) for n in names], dim=1).sum(dim=0)
            for k, i in enumerate(idx):
                act[batches[i][0]] = g_x[k]
    return total, act
