"""A client bank: a client actor's virtual clients of a round stepped as one tensor program
(issue 44, item 1; ours, ``--client-bank``).

Without it a client actor loads each of its round's clients into a module of its own, builds
each an optimiser, and runs one forward, one backward and one optimiser step per client and
step. With it, the clients that can share a program -- the same client-side blocks and
learning rate, SplitFed's plain client role, SGD or AdamW -- form a :class:`BankGroup`:

- their parameters are stacked, one tensor per parameter name with a row per client, loaded
  with one copy per name (no module per client is loaded; each client's part holds views of
  its rows, so whatever reads a part -- its update, its state -- reads the bank);
- a step is one ``torch.func.vmap``-ped forward over the stacked parameters and the clients'
  batches (``functional_call``), per batch size, and once the gradients at the cut are back,
  one backward of the group's activations and ONE optimiser step over the stacked rows. The
  members are ordered by their batch sizes (:func:`batch_order`), so that a batch size's rows
  are a run, passed as views of the stacked tensors rather than copied out.

SGD's and AdamW's updates are elementwise (momentum, weight decay, AdamW's moments), so a row
steps as its client's own optimiser would; AdamW's step counter (one per tensor in torch) is
set to the rows' own count for their step. A row that does not step (its client failed, its
batches ran out) is put back as it was, its optimiser state with it. The forward and backward
of a row give the same values as the client's own module up to float rounding (``vmap`` turns
a convolution over stacked weights into a grouped one, which sums in another order):
``scripts/same_results.py`` compares within a relative 1e-5.

Buffers are stacked too: a BatchNorm's running statistics have a row per client, updated by
the ``vmap``-ped forward as each client's own module would update them.

What stays one client at a time, with results exactly as before: a client that holds the whole
model (FedAvg's local training), a role with a hook of its own (FedProx's regulariser,
SuperSFL's TPGF, FedPairing, own modules), parts with random modules (dropout), a client whose
server is away (``local``), a group of one, and a model ``vmap`` cannot run (tried once per run
and block count on two rows of two samples).
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


def batch_order(sizes: dict[int, list[int]]) -> list[int]:
    """Clients in the order that makes each step's clients of one batch size a run of rows
    (:meth:`BankGroup.forward`), given each client's batch sizes step by step: sorted by those
    sizes, the larger first at each step. With whole epochs (every batch full but an epoch's
    last) the clients with a full batch at a step are a run, and so are those ending their epoch
    at it with one size. Any order gives the same results; this one saves copies."""
    return sorted(sizes, key=lambda c: ([-n for n in sizes[c]], c))


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
        self.steps = [0] * len(members)  # optimiser steps each row has taken this round
        # (rows, their stacked activations, None or (where their rows are, the leaves they stepped))
        self.pending: list[tuple[list[int], torch.Tensor, tuple | None]] = []
        self.grads: dict[int, torch.Tensor] = {}  # row -> the gradient at the cut that came back

    def forward(self, rows: list[int], xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The activations of ``rows`` on their batches ``xs`` (one ``vmap``-ped call per batch
        size), each kept for its gradient. Where one batch size holds every row, the stacked
        parameters themselves are stepped. Otherwise each batch size's rows get parameters of
        their own: views of the stacked tensors where the rows are a run, copies
        (``index_select``) where they are not, which is why a client actor orders a group's
        members by their batch sizes (:func:`batch_order`). Either way these are leaves of their
        own, whose gradients :meth:`step` writes into the stacked ones' rows: through a slice or
        an ``index_select`` of the stacked tensors, autograd would fill a zero gradient of the
        whole stacked size per batch size and add them up (at 500 rows of the digits CNN, 100 MB
        tensors: a quarter of a step; ``benchmarks/bank_rows.py``)."""
        from torch.func import vmap

        out: list[torch.Tensor | None] = [None] * len(rows)
        by_shape: dict[tuple, list[int]] = {}
        for j, x in enumerate(xs):
            by_shape.setdefault(tuple(x.shape), []).append(j)
        whole = len(by_shape) == 1 and sorted(rows) == list(range(len(self.members)))
        for js in by_shape.values():
            js = sorted(js, key=lambda j: rows[j])
            sub = [rows[j] for j in js]
            lo, hi = sub[0], sub[0] + len(sub)
            idx = None
            if whole:  # every row at one batch size: the stacked tensors, updated in place
                params, buffers, where = self.params, self.buffers, None
            elif sub == list(range(lo, hi)):  # a run of rows: views of the stacked tensors
                where = slice(lo, hi)
                params = {n: t.detach()[lo:hi].requires_grad_(True) for n, t in self.params.items()}
                buffers = {n: t[lo:hi] for n, t in self.buffers.items()}
            else:  # scattered rows: copies, their statistics written back
                idx = where = torch.tensor(sub, device=next(iter(self.params.values())).device)
                params = {n: t.detach().index_select(0, idx).requires_grad_(True) for n, t in self.params.items()}
                buffers = {n: t.index_select(0, idx) for n, t in self.buffers.items()}
            acts = vmap(self.forward_of)({**params, **buffers}, torch.stack([xs[j] for j in js]))
            if idx is not None:  # the rows' running statistics, updated in their copies, written back
                for n, t in buffers.items():
                    self.buffers[n].index_copy_(0, idx, t)
            self.pending.append((sub, acts, None if where is None else (where, params)))
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
        written: set[int] = set()  # rows whose gradients came from leaves of their own
        for rows, acts, leaves in pending:
            if any(r in grads for r in rows):
                g = torch.stack([grads[r] if r in grads else torch.zeros_like(acts[0]) for r in rows])
                backprop(acts, g)
                if leaves is not None:
                    self._take_grads(*leaves)
                    written.update(rows)
        rest = sorted(set(range(len(self.members))) - written) if written else []
        if rest:  # rows no forward of this step covered: a zero gradient, as autograd's would be
            for t in self.params.values():
                t.grad.index_fill_(0, torch.tensor(rest, device=t.device), 0.0)
        self._step_rows(sorted(grads))

    def _take_grads(self, where, leaves: dict[str, torch.Tensor]) -> None:
        """The gradients of a batch size's leaves (:meth:`forward`) into the stacked parameters'
        rows ``where`` (a slice or an index tensor)."""
        for n, leaf in leaves.items():
            t = self.params[n]
            if t.grad is None:  # every row is written by a forward or zeroed by step()
                t.grad = torch.empty_like(t)
            grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
            if isinstance(where, slice):
                t.grad[where] = grad
            else:
                t.grad.index_copy_(0, where, grad)

    def _step_rows(self, rows: list[int]) -> None:
        """The optimiser's step for ``rows`` only: each row takes the step its own optimiser
        would, the others are put back as they were. Rows that have stepped a different number
        of times (one missed a gradient and came back) step in passes of their own, so that
        AdamW's bias correction counts each row's own steps."""
        counts = {r: self.steps[r] + 1 for r in rows}
        for count in sorted(set(counts.values())):  # one pass, unless the rows' counts differ
            self._step_only([r for r in rows if counts[r] == count], count)
        for r in rows:
            self.steps[r] += 1
        self.opt.zero_grad(set_to_none=True)

    def _step_only(self, rows: list[int], count: int) -> None:
        """One optimiser step over the stacked tensors, as the ``count``-th step of ``rows``;
        every other row's parameters and per-element state (SGD's momentum, AdamW's moments)
        put back. A row that has not stepped has no state yet: zero is the same (SGD's first
        step sets its momentum to the gradient, AdamW's moments start at zero)."""
        tensors = list(self.params.values())
        still = sorted(set(range(len(self.members))) - set(rows))
        idx = torch.tensor(still, device=tensors[0].device) if still else None
        saved = []
        for t in tensors:
            state = self.opt.state.get(t, {})
            if "step" in state:  # AdamW's counter, one per tensor: this pass's rows' count before it
                state["step"].fill_(count - 1)
            if idx is not None:
                rows_state = {k: v.index_select(0, idx) for k, v in state.items()
                              if torch.is_tensor(v) and v.shape == t.shape}
                saved.append((t, t.detach().index_select(0, idx), rows_state))
        self.opt.step()
        for t, rows_before, state_before in saved:
            t.data.index_copy_(0, idx, rows_before)
            for k, v in self.opt.state.get(t, {}).items():
                if torch.is_tensor(v) and v.shape == t.shape:
                    v.index_copy_(0, idx, state_before[k] if k in state_before else torch.zeros_like(rows_before))
