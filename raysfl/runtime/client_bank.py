"""A client bank: a client actor's virtual clients of a round stepped as one tensor program
(issue 44, item 1; ours, ``--client-bank``).

Without it a client actor loads each of its round's clients into a module of its own, builds
each an optimiser, and runs one forward, one backward and one optimiser step per client and
step. With it, the clients that can share a program -- the same client-side blocks and
learning rate, SplitFed's plain client role, SGD -- form a :class:`BankGroup`:

- their parameters are stacked, one tensor per parameter name with a row per client, loaded
  with one copy per name (no module per client is loaded; each client's part holds views of
  its rows, so whatever reads a part -- its update, its state -- reads the bank);
- a step is one ``torch.func.vmap``-ped forward over the stacked parameters and the clients'
  batches (``functional_call``), per batch size, and once the gradients at the cut are back,
  one backward of the group's activations and ONE optimiser step over the stacked rows.

SGD's update is elementwise (momentum, weight decay), so a row steps exactly as its client's
own optimiser would; a row that does not step (its client failed, its batches ran out) is
put back as it was, its momentum buffer with it. The forward and backward of a row give the
same values as the client's own module up to float rounding (``vmap`` turns a convolution over
stacked weights into a grouped one, which sums in another order): ``scripts/same_results.py``
compares within a relative 1e-5.

Buffers are stacked too: a BatchNorm's running statistics have a row per client, updated by
the ``vmap``-ped forward as each client's own module would update them.

What stays one client at a time, with results exactly as before: a client that holds the whole
model (FedAvg's local training), a role with a hook of its own (FedProx's regulariser,
SuperSFL's TPGF, FedPairing, own modules), AdamW (its step counter is one per tensor, not per
row), parts with random modules (dropout), a client whose server is away (``local``), a group
of one, and a model ``vmap`` cannot run (tried once per run and block count on two rows of two
samples).
"""

from __future__ import annotations

import numpy as np
import torch

from raysfl.algorithms.roles.client import ClientSide, backprop
from raysfl.optim import build_optimizer

# the hooks a role must leave as SplitFed's for its clients to step in a bank
_PLAIN_HOOKS = ("begin", "forward", "backward", "fallback", "regularizer", "finish_steps")


def role_is_plain(role) -> bool:
    """Whether ``role`` steps its clients exactly as SplitFed's client does (no hook of its own)."""
    return isinstance(role, ClientSide) and all(getattr(type(role), h) is getattr(ClientSide, h)
                                                for h in _PLAIN_HOOKS)


def part_is_stackable(part: torch.nn.Module) -> bool:
    """A part whose rows can be stepped together: no random modules (a row's dropout mask would
    come from another stream than its client's), float32 parameters. Buffers (BatchNorm's
    running statistics) are stacked too, a row per client."""
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in part.modules()):
        return False
    return all(p.dtype == torch.float32 and p.requires_grad for p in part.parameters())


def _call(template: torch.nn.Module):
    """The part's forward as a function of (its parameters, one client's batch)."""
    from torch.func import functional_call

    return lambda params, x: functional_call(template, params, (x,))


def vmap_runs(part: torch.nn.Module, input_shape: tuple, device) -> bool:
    """Whether ``vmap`` runs this part's forward and backward (a custom model may use an op
    without a batching rule, or data-dependent control flow): tried on two rows of two samples."""
    from torch.func import vmap

    try:
        params = {n: torch.stack([p.detach(), p.detach()]).requires_grad_(True) for n, p in part.named_parameters()}
        params.update({n: torch.stack([b, b]) for n, b in part.named_buffers()})  # copies: the part's stay
        x = torch.randn((2, 2, *input_shape), device=device)
        out = vmap(_call(part))(params, x)
        out.sum().backward()
        return True
    except Exception:  # noqa: BLE001 - any failure means: step these clients one by one
        return False


class BankGroup:
    """One round's clients of a client actor stepped together (module docstring).

    ``members``: their :class:`~raysfl.algorithms.roles.ClientRound` (each ``part`` a module of
    the same blocks, not yet loaded); ``states``: each member's start state ({name: array});
    ``lr``: their learning rate."""

    def __init__(self, members: list, states: list[dict], cfg, lr: float, device):
        self.members = members
        self.row = {a.client: k for k, a in enumerate(members)}
        template = members[0].part
        stacked = lambda n: torch.from_numpy(np.stack([np.asarray(s[n]) for s in states])).to(device)  # noqa: E731
        self.params = {n: stacked(n).requires_grad_(True) for n, _ in template.named_parameters()}
        self.buffers = {n: stacked(n) for n, _ in template.named_buffers()}  # BatchNorm's statistics: a row each
        for k, a in enumerate(members):  # each part holds views of its rows
            for n, p in a.part.named_parameters():
                p.data = self.params[n].detach()[k]
            for n, b in a.part.named_buffers():
                b.data = self.buffers[n][k]
        self.forward_of = _call(template)
        self.opt = build_optimizer(list(self.params.values()), cfg, lr)
        self.pending: list[tuple[list[int], torch.Tensor]] = []  # (rows, their stacked activations)
        self.grads: dict[int, torch.Tensor] = {}  # row -> the gradient at the cut that came back

    def forward(self, rows: list[int], xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The activations of ``rows`` on their batches ``xs`` (one ``vmap``-ped call per batch
        size), each kept for its gradient."""
        from torch.func import vmap

        out: list[torch.Tensor | None] = [None] * len(rows)
        by_shape: dict[tuple, list[int]] = {}
        for j, x in enumerate(xs):
            by_shape.setdefault(tuple(x.shape), []).append(j)
        everyone = rows == list(range(len(self.members)))
        for js in by_shape.values():
            sub = [rows[j] for j in js]
            if everyone and len(js) == len(rows):
                idx, params, buffers = None, self.params, self.buffers  # updated in place
            else:
                idx = torch.tensor(sub, device=next(iter(self.params.values())).device)
                params = {n: t.index_select(0, idx) for n, t in self.params.items()}
                buffers = {n: t.index_select(0, idx) for n, t in self.buffers.items()}
            acts = vmap(self.forward_of)({**params, **buffers}, torch.stack([xs[j] for j in js]))
            if idx is not None:  # the rows' running statistics, updated in their copies, written back
                for n, t in buffers.items():
                    self.buffers[n].index_copy_(0, idx, t)
            self.pending.append((sub, acts))
            for i, j in enumerate(js):
                out[j] = acts[i]
        return out

    def receive(self, client: int, grad: torch.Tensor) -> None:
        """The gradient at the cut for ``client``'s last forward."""
        self.grads[self.row[client]] = grad

    def step(self) -> None:
        """Back-propagate the gradients that came back and take one optimiser step for their
        rows; forwards whose gradient never came are dropped."""
        pending, grads, self.pending, self.grads = self.pending, self.grads, [], {}
        if not grads:
            return
        for rows, acts in pending:
            if any(r in grads for r in rows):
                g = torch.stack([grads[r] if r in grads else torch.zeros_like(acts[0]) for r in rows])
                backprop(acts, g)
        self._step_rows(sorted(grads))

    def _step_rows(self, rows: list[int]) -> None:
        """The optimiser's step for ``rows`` only: the others are put back as they were."""
        tensors = list(self.params.values())
        still = sorted(set(range(len(self.members))) - set(rows))
        saved = []
        if still:
            idx = torch.tensor(still, device=tensors[0].device)
            for t in tensors:
                buf = self.opt.state.get(t, {}).get("momentum_buffer")
                saved.append((t, t.detach().index_select(0, idx),
                              None if buf is None else buf.index_select(0, idx)))
        self.opt.step()
        for t, rows_before, buf_before in saved:
            t.data.index_copy_(0, idx, rows_before)
            buf = self.opt.state.get(t, {}).get("momentum_buffer")
            if buf is not None:  # a row that has not stepped has no momentum yet: zero is the same
                buf.index_copy_(0, idx, buf_before if buf_before is not None else torch.zeros_like(rows_before))
        self.opt.zero_grad(set_to_none=True)
