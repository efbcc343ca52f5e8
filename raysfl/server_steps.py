"""Server-side training steps on a group of smashed batches (pure PyTorch, no Ray).

Two shapes cover the spine's baselines, and later algorithms build on them:

* :func:`shared_server_step` -- one server-side model shared by the whole group (SplitFed
  V2, PSL, vanilla SL). The group's smashed data is concatenated per cut into ONE
  forward/backward (DESIGN.md, "rules that keep it fast"); clients with different cuts
  enter the same network at different blocks, with the same weights.
* :func:`per_client_server_step` -- one server-side model per client (SplitFed V1).

Loss scaling: the server's parameters are updated with the mean loss over every sample in
the group (what one step on the concatenated batch does), while each client receives the
gradient of *its own* mean loss with respect to its smashed data, exactly what it would get
training alone with the server -- so client step sizes do not shrink with group size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from raysfl.models import SplitModel


def _forward_from(model: SplitModel, x: torch.Tensor, cut: int) -> torch.Tensor:
    for block in model.blocks[cut:]:
        x = block(x)
    return x


def shared_server_step(model: SplitModel, opt: torch.optim.Optimizer,
                       batches: list[tuple[int, int, torch.Tensor, torch.Tensor]],
                       ) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """One optimizer step of a shared server-side model on a group.

    ``batches``: (client, cut, smashed activations, labels). Returns the gradient of each
    client's own mean loss w.r.t. its activations, and each client's mean loss.
    """
    opt.zero_grad(set_to_none=True)
    by_cut: dict[int, list[int]] = {}
    for i, (_, cut, _, _) in enumerate(batches):
        by_cut.setdefault(cut, []).append(i)
    n_total = sum(int(b[3].shape[0]) for b in batches)
    inputs: dict[int, torch.Tensor] = {}
    per_sample: dict[int, torch.Tensor] = {}
    total = None
    for cut, idx in sorted(by_cut.items()):
        x = torch.cat([batches[i][2] for i in idx]).requires_grad_(True)
        y = torch.cat([batches[i][3] for i in idx])
        losses = F.cross_entropy(_forward_from(model, x, cut), y, reduction="none")
        inputs[cut], per_sample[cut] = x, losses
        s = losses.sum()
        total = s if total is None else total + s
    (total / n_total).backward()
    opt.step()
    grads: dict[int, torch.Tensor] = {}
    losses_out: dict[int, float] = {}
    for cut, idx in by_cut.items():
        offset = 0
        for i in idx:
            client, n = batches[i][0], int(batches[i][3].shape[0])
            g = inputs[cut].grad[offset:offset + n]
            grads[client] = g * (n_total / n)
            losses_out[client] = per_sample[cut][offset:offset + n].detach().mean().item()
            offset += n
    return grads, losses_out


def per_client_server_step(models: dict[int, SplitModel], opts: dict[int, torch.optim.Optimizer],
                           batches: list[tuple[int, int, torch.Tensor, torch.Tensor]],
                           ) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """One step of each client's own server-side model on its own batch (SplitFed V1)."""
    grads: dict[int, torch.Tensor] = {}
    losses: dict[int, float] = {}
    for client, cut, x, y in batches:
        opt = opts[client]
        opt.zero_grad(set_to_none=True)
        x = x.requires_grad_(True)
        loss = F.cross_entropy(_forward_from(models[client], x, cut), y)
        loss.backward()
        opt.step()
        grads[client] = x.grad
        losses[client] = loss.item()
    return grads, losses
