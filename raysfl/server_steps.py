"""Server-side training steps on a group of smashed batches (pure PyTorch, no Ray).

Two shapes cover the spine's baselines, and later algorithms build on them (plus
:func:`per_client_gradients`, each client's own gradient of the shared server-side model,
batched over the group, for GAPSL and the gradient-angle metric):

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

import contextlib

import torch
from torch import nn

from raysfl.models import SplitModel


def _forward_from(model: SplitModel, x: torch.Tensor, cut: int) -> torch.Tensor:
    for block in model.blocks[cut:]:
        x = block(x)
    return x


def _loss(loss):
    """The run's loss (:mod:`raysfl.objective`); cross-entropy where none is given."""
    if loss is None:
        from raysfl.objective import BUILT_IN

        return BUILT_IN["cross_entropy"]
    return loss


def _group_forward(model: SplitModel, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]], loss):
    """The concatenated forward of a group (per cut: clients with different cuts enter the network
    at different blocks): ({cut: batch indices}, {cut: its input, requiring grad}, {cut: each
    segment's mean loss}, the sum of every sample's loss; None for an empty group)."""
    by_cut: dict[int, list[int]] = {}
    for i, (_, cut, _, _) in enumerate(batches):
        by_cut.setdefault(cut, []).append(i)
    inputs: dict[int, torch.Tensor] = {}
    means: dict[int, list[torch.Tensor]] = {}
    total = None
    for cut, idx in sorted(by_cut.items()):
        x = torch.cat([batches[i][2] for i in idx]).requires_grad_(True)
        y = torch.cat([batches[i][3] for i in idx])
        s, means[cut] = loss.group(_forward_from(model, x, cut), y, [int(batches[i][3].shape[0]) for i in idx])
        inputs[cut] = x
        total = s if total is None else total + s
    return by_cut, inputs, means, total


def _per_client(batches, by_cut, inputs, means, client_grad) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """Each client's gradient at its cut (``client_grad(its rows of the input's gradient, its
    rows)``) and mean loss, after the group's backward."""
    grads: dict[int, torch.Tensor] = {}
    order: list[int] = []
    for cut, idx in by_cut.items():
        offset = 0
        for i in idx:
            client, n = batches[i][0], int(batches[i][3].shape[0])
            grads[client] = client_grad(inputs[cut].grad[offset:offset + n], n)
            order.append(client)
            offset += n
    values = torch.stack([m.detach() for cut in by_cut for m in means[cut]]).tolist()  # one host sync
    return grads, dict(zip(order, values))


def shared_server_step(model: SplitModel, opt: torch.optim.Optimizer,
                       batches: list[tuple[int, int, torch.Tensor, torch.Tensor]], loss=None,
                       ) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """One optimizer step of a shared server-side model on a group.

    ``batches``: (client, cut, smashed activations, labels); ``loss``: the run's
    :class:`raysfl.objective.Loss` (cross-entropy by default). Returns the gradient of each
    client's own mean loss w.r.t. its activations, and each client's mean loss.
    """
    opt.zero_grad(set_to_none=True)
    n_total = sum(int(b[3].shape[0]) for b in batches)
    by_cut, inputs, means, total = _group_forward(model, batches, _loss(loss))
    (total / n_total).backward()
    opt.step()
    return _per_client(batches, by_cut, inputs, means, lambda g, n: g * (n_total / n))


def shared_server_part(model: SplitModel, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]], loss=None,
                       ) -> tuple[dict[int, torch.Tensor], dict[int, float], int]:
    """One client actor's share of a streamed :func:`shared_server_step` (ours: ``--server-stream``).

    Forward and backward of the *sum* of these batches' per-sample losses: the server-side
    parameters' gradients accumulate over a step's parts, and :func:`finish_shared_step` divides
    them by the step's rows and steps once -- the gradient of the mean over the whole group,
    as the concatenated step takes it. Each client's gradient is that of its own mean loss, as
    there: it does not depend on the other parts' rows (no layer of the server side mixes rows:
    streaming is off where it has BatchNorm). Returns (gradients, mean losses, rows).
    """
    by_cut, inputs, means, total = _group_forward(model, batches, _loss(loss))
    if total is None:
        return {}, {}, 0
    total.backward()
    grads, losses = _per_client(batches, by_cut, inputs, means, lambda g, n: g / n)
    return grads, losses, sum(int(b[3].shape[0]) for b in batches)


def finish_shared_step(model: SplitModel, opt: torch.optim.Optimizer, rows: int) -> None:
    """The optimiser step that ends a streamed shared step over ``rows`` rows in all: the
    accumulated gradients (of the parts' summed losses) become those of the group's mean loss."""
    if rows:
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(rows)
        opt.step()
    opt.zero_grad(set_to_none=True)


def per_client_server_step(models: dict[int, SplitModel], opts: dict[int, torch.optim.Optimizer],
                           batches: list[tuple[int, int, torch.Tensor, torch.Tensor]], loss=None,
                           ) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """One step of each client's own server-side model on its own batch (SplitFed V1)."""
    loss = _loss(loss)
    grads: dict[int, torch.Tensor] = {}
    values: list[torch.Tensor] = []
    for client, cut, x, y in batches:
        opt = opts[client]
        opt.zero_grad(set_to_none=True)
        x = x.requires_grad_(True)
        value = loss(_forward_from(models[client], x, cut), y)
        value.backward()
        opt.step()
        grads[client] = x.grad
        values.append(value.detach())
    losses = torch.stack(values).tolist() if values else []  # one host sync for the group
    return grads, {b[0]: v for b, v in zip(batches, losses)}


@contextlib.contextmanager
def _batch_stats_only(module: nn.Module):
    """BatchNorm layers normalise with each batch's own statistics and leave their running
    statistics alone while inside (in-place buffer updates are not allowed under vmap)."""
    saved = []
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            saved.append((m, m.track_running_stats, m.running_mean, m.running_var, m.num_batches_tracked))
            m.track_running_stats, m.running_mean, m.running_var, m.num_batches_tracked = False, None, None, None
    try:
        yield bool(saved)
    finally:
        for m, track, mean, var, count in saved:
            m.track_running_stats, m.running_mean, m.running_var, m.num_batches_tracked = track, mean, var, count


def per_client_gradients(model: SplitModel, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]], loss=None):
    """Each client's gradient of its own mean loss, for the whole group in one batched call.

    ``torch.func.grad`` of a functional forward of the server-side blocks, ``vmap``-ed over
    the clients (clients with equal batch sizes go through one vmap), with respect to both
    the server-side parameters and the client's smashed data. The result equals one
    backward pass per client (tests/test_gapsl.py); BatchNorm uses each client's batch
    statistics, as in such a pass, and running statistics are not touched
    (:func:`refresh_batch_norm_stats`). All clients must share one cut.

    Returns (G: (clients, P) flat parameter gradients in ``batches`` order, {client: gradient
    at its cut}, {client: loss}, parameter names in flattening order, whether the server
    side has BatchNorm).
    """
    from torch.func import functional_call, grad, vmap

    cuts = {b[1] for b in batches}
    if len(cuts) != 1:
        raise ValueError(f"per_client_gradients needs one cut for the group, got {sorted(cuts)}")
    part = model.part(cuts.pop(), model.num_blocks)
    names = [n for n, _ in part.named_parameters()]
    params = {n: p.detach() for n, p in part.named_parameters()}

    objective = _loss(loss)  # the run's loss; a function of tensors, so vmap can batch it

    def loss_fn(p, x, y):
        value = objective(functional_call(part, p, (x,)), y)
        return value, value

    grad_fn = vmap(grad(loss_fn, argnums=(0, 1), has_aux=True), in_dims=(None, 0, 0))
    by_size: dict[int, list[int]] = {}
    for i, b in enumerate(batches):
        by_size.setdefault(int(b[3].shape[0]), []).append(i)
    flat: list[torch.Tensor | None] = [None] * len(batches)
    act_grads: dict[int, torch.Tensor] = {}
    losses: dict[int, float] = {}
    with _batch_stats_only(part) as has_bn:
        for _, idx in sorted(by_size.items()):
            x = torch.stack([batches[i][2].detach() for i in idx])
            y = torch.stack([batches[i][3] for i in idx])
            (g_params, g_x), loss = grad_fn(params, x, y)
            values = loss.detach().tolist()  # one host sync per group of equal batch sizes
            for k, i in enumerate(idx):
                flat[i] = torch.cat([g_params[n][k].reshape(-1) for n in names])
                act_grads[batches[i][0]] = g_x[k]
                losses[batches[i][0]] = values[k]
    return torch.stack(flat), act_grads, losses, names, has_bn


@torch.no_grad()
def refresh_batch_norm_stats(model: SplitModel, batches) -> None:
    """Update BatchNorm running statistics with one forward of the group's concatenated
    smashed data (what a shared forward pass would have done)."""
    cut = batches[0][1]
    model.part(cut, model.num_blocks)(torch.cat([b[2] for b in batches]))


def apply_flat_gradient(model: SplitModel, opt: torch.optim.Optimizer, cut: int, names: list[str],
                        flat: torch.Tensor) -> None:
    """One optimizer step of the server-side blocks [cut, L) on a flat gradient vector laid
    out as :func:`per_client_gradients` flattens parameters."""
    opt.zero_grad(set_to_none=True)
    params = dict(model.part(cut, model.num_blocks).named_parameters())
    offset = 0
    for n in names:
        p = params[n]
        p.grad = flat[offset:offset + p.numel()].view_as(p).to(p.dtype).clone()
        offset += p.numel()
    opt.step()


class StackedCopies:
    """Per-client copies of a model's server-side blocks [cut, L), held as ONE stacked tensor per
    parameter (row i: client i's copy), stepped with ONE optimiser and one batched forward and
    backward per step (``torch.func.vmap`` of a functional call of the blocks): SplitFed V1's
    per-client server-side models without a module, an optimiser and a Python step per client.

    Each client's row sees exactly what its own copy would: its own mean loss, its own
    optimiser step (SGD's update is element by element, so one optimiser over the rows is one
    per row). Each row of a parameter is a tensor of its own, stacked for a step's forward, so a
    step costs the rows of the clients in it, not every row: the others get no gradient, and the
    optimiser skips a tensor without one, as a client's own optimiser would not step. (With the
    rows as one tensor, every row was gathered, updated and put back: a step of 1 of 20 clients at
    the mnist5k CNN's cut 2 took 19x a loop over modules, 1.9x now; benchmarks/stacked_copies.py.)
    The batched matrix products may sum in another order than one client's at a time: results
    agree to float rounding (tests/test_core.py measures it). Buffers (BatchNorm's running
    statistics) are stacked too, one row per client, and each copy updates its own row in
    place under vmap, as its own module would. For SGD and one cut: see :func:`stackable`.
    """

    def __init__(self, model: SplitModel, cut: int, clients: list[int], make_optimizer, loss=None):
        self.model, self.cut, self.loss = model, cut, _loss(loss)
        self.part = model.part(cut, model.num_blocks)
        self.rows = {c: i for i, c in enumerate(sorted(clients))}
        n = len(self.rows)
        # {name: [row 0's tensor, row 1's, ...]}: one leaf per client and parameter
        self.params = {k: [p.detach().clone().requires_grad_(True) for _ in range(n)]
                       for k, p in self.part.named_parameters()}
        self.buffers = {k: b.detach().unsqueeze(0).repeat(n, *([1] * b.dim())) for k, b in self.part.named_buffers()}
        self.opt = make_optimizer([t for rows in self.params.values() for t in rows])

    def step(self, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]]):
        """One step of the copies of the clients in ``batches``: ({client: gradient at its cut},
        {client: its mean loss})."""
        from torch.func import functional_call, vmap

        self.opt.zero_grad(set_to_none=True)  # the rows not in this step keep no gradient: not stepped
        by_size: dict[int, list[int]] = {}
        for j, b in enumerate(batches):
            by_size.setdefault(int(b[3].shape[0]), []).append(j)
        grads, losses = {}, {}
        for _, js in sorted(by_size.items()):
            rows = [self.rows[batches[j][0]] for j in js]
            idx = torch.tensor(rows, device=batches[js[0]][2].device)
            sub = {k: torch.stack([p[i] for i in rows]) for k, p in self.params.items()}
            bufs = {k: b[idx] for k, b in self.buffers.items()}  # copies: updated in place below, then put back
            x = torch.stack([batches[j][2] for j in js]).requires_grad_(True)
            y = torch.stack([batches[j][3] for j in js])
            out = vmap(lambda p, b, xx: functional_call(self.part, (p, b), (xx,)))(sub, bufs, x)
            for k, b in bufs.items():
                self.buffers[k][idx] = b
            if self.loss.rows is not None:  # every copy's rows in one call
                per = self.loss.rows(out.reshape(-1, *out.shape[2:]), y.reshape(-1, *y.shape[2:]))
                loss = per.reshape(len(js), -1).mean(dim=1)
            else:
                loss = torch.stack([self.loss(out[k], y[k]) for k in range(len(js))])
            loss.sum().backward()
            values = loss.detach().tolist()  # one host sync per group of equal batch sizes
            for k, j in enumerate(js):
                grads[batches[j][0]] = x.grad[k]
                losses[batches[j][0]] = values[k]
        self.opt.step()
        return grads, losses

    def gradient(self, client: int) -> torch.Tensor:
        """The flat server-side gradient of ``client``'s copy after its last step."""
        i = self.rows[client]
        return torch.cat([p[i].grad.reshape(-1) for p in self.params.values() if p[i].grad is not None])

    def states(self) -> dict[int, dict[str, torch.Tensor]]:
        """{client: its copy's server-side blocks as a state dict (views), buffers included}."""
        return {c: {**{k: p[i].detach() for k, p in self.params.items()}, **{k: b[i] for k, b in self.buffers.items()}}
                for c, i in self.rows.items()}


def stackable(model: SplitModel, cuts: dict[int, int], optimizer: str) -> bool:
    """Whether :class:`StackedCopies` can hold a round's per-client copies: every client at one
    cut, and SGD (whose update is element by element, so one optimiser over the rows is one per
    row). BatchNorm's buffers stack with the parameters."""
    return len(set(cuts.values())) == 1 and optimizer == "sgd"
