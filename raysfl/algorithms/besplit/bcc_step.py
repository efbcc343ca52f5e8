"""BESplit's server step (Sec. 4.1-4.2): evidential training of each client's own server-side
model, with Bias-Compensated Collaboration mixing (eqs. 12-14, 30) and the statistics the
Client State Records are built from. Pure PyTorch, no Ray.

For each client k of the group step, its server-side model W_S_k runs on its smashed batch
z_k and is trained with the evidential loss (eq. 5). A client i matched with a partner j
(``mixes[i] = (j, {n: rho_n})``) also takes, for every class n over-represented at j
(eq. 13), the first round(rho_n * count) of j's smashed samples of class n in this step
(N_{j->i}, eq. 14; rho from eqs. 31-32) into the same step: W_S_i is trained on
z_i plus those rows.

**Moved, not copied** (``move=True``, the default): eq. (30) moves the mass,
P^_j,n = P_j,n - rho P_j,n and P^_i,n = P_i,n + rho P_j,n, so the lender's own loss leaves out
the rows it lends: W_S_j is trained on its remaining rows only, W_S_i on its own plus the lent
ones. (``move=False`` keeps the lent rows in the lender's loss as well: they are then
trained on twice.) The lender's model still runs the lent rows forward, without gradient
from its loss: its Client State Record and the logits DTD's global teacher sends back cover
every row of its batch.

Gradient routing: every smashed batch enters as its own leaf tensor, and the lent rows are
*indexed* out of the partner's leaf, so autograd accumulates the gradient of i's loss with
respect to a lent row into that row of j's leaf -- the gradient goes back only to j, the
client whose sample it is (with ``move=False`` summed with the gradient of j's own step).
Client i receives the gradient of its loss with respect to its own rows only.

No waiting: BCC only uses what has arrived in this step. A partner that is missing (dead,
late, done with its steps, in another group, at another cut) means the client's step runs
without BCC (counted as ``skipped``).

CSR statistics come from each client's own rows (evidence, counts and the two uncertainties
per true class, eqs. 3-4 and the epistemic measure chosen for eq. 9); lent rows count for
nobody else's record. By default they are the outputs of the client's own server-side model
W_S_k as it trains (Fig. 1); given ``stats_model`` (the round's starting server-side model,
the same for every client), they are that model's outputs for the same rows instead.
"""

from __future__ import annotations

import numpy as np
import torch

from raysfl.algorithms.besplit.evidential import aleatoric, epistemic_measure, evidence, evidential_loss


def lent_rows(y_partner: torch.Tensor, ratios: dict[int, float]) -> torch.Tensor:
    """Rows of the partner's batch lent to a client: for each class n with ratio rho_n, the
    first round(rho_n * (partner's class-n rows)) of them (batches are already shuffled)."""
    take = []
    for n, rho in sorted(ratios.items()):
        rows = (y_partner == int(n)).nonzero(as_tuple=True)[0]
        k = int(np.floor(float(rho) * len(rows) + 0.5))
        if k > 0:
            take.append(rows[:k])
    return torch.cat(take) if take else torch.zeros(0, dtype=torch.long, device=y_partner.device)


def batch_statistics(alpha: torch.Tensor, y: torch.Tensor, num_classes: int,
                     epistemic_kind: str = "mutual_info") -> dict[str, np.ndarray]:
    """One batch's contribution to a Client State Record (Table 6): summed evidence per true
    class (N x N), sample counts, summed aleatoric (eq. 3) and epistemic uncertainty per true
    class (``epistemic_kind``: see :func:`~raysfl.algorithms.besplit.evidential.epistemic_measure`)."""
    alpha = alpha.detach().double()
    e = alpha - 1
    out = {"evidence": torch.zeros(num_classes, num_classes, dtype=torch.float64, device=alpha.device),
           "counts": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device),
           "u_ale": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device),
           "u_epi": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device)}
    out["evidence"].index_add_(0, y, e)
    out["counts"].index_add_(0, y, torch.ones_like(y, dtype=torch.float64))
    out["u_ale"].index_add_(0, y, aleatoric(alpha))
    out["u_epi"].index_add_(0, y, epistemic_measure(alpha, epistemic_kind))
    return {k: v.cpu().numpy() for k, v in out.items()}


def _forward_from(model, x: torch.Tensor, cut: int) -> torch.Tensor:
    for block in model.blocks[cut:]:
        x = block(x)
    return x


def evidential_server_step(models: dict, opts: dict, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]],
                           mixes: dict[int, tuple[int, dict[int, float]]], t: int, total: int,
                           evidence_kind: str = "exp", epistemic_kind: str = "mutual_info", move: bool = True,
                           stats_model=None, clip_norm: float = 0.0):
    """One step of every client's own server-side model (see the module docstring).

    Returns (gradient at the cut per client, its mean evidential loss on its own rows, its
    server-side outputs (logits) for its own rows, its CSR batch statistics, rows lent to
    it, clients whose partner was missing).
    """
    leaves = {c: x.detach().requires_grad_(True) for c, _, x, _ in batches}
    meta = {c: (cut, y) for c, cut, _, y in batches}
    borrowed, lent, skipped = {}, {}, []
    given = {c: torch.zeros(len(y), dtype=torch.bool, device=y.device) for c, _, _, y in batches}
    for c, cut, _, _ in batches:  # who takes which of its partner's rows (N_{j->i}, eq. 14)
        if c not in mixes:
            continue
        j, ratios = mixes[c]
        if j in leaves and meta[j][0] == cut:
            rows = lent_rows(meta[j][1], ratios)
            lent[c] = len(rows)
            if len(rows):
                borrowed[c] = (j, rows)
                given[j][rows] = True
        else:
            skipped.append(c)
    losses, logits_out, stats = {}, {}, {}
    for c, cut, _, y in batches:
        n = len(y)
        inp, lab = leaves[c], y
        if c in borrowed:
            j, rows = borrowed[c]
            inp, lab = torch.cat([leaves[c], leaves[j][rows]]), torch.cat([y, meta[j][1][rows]])
        opt = opts[c]
        opt.zero_grad(set_to_none=True)
        logits = _forward_from(models[c], inp, cut)
        alpha = evidence(logits, evidence_kind) + 1
        per_sample = evidential_loss(alpha, lab, t, total, reduction="none")
        train = torch.ones(len(lab), dtype=torch.bool, device=lab.device)
        if move:
            train[:n] = ~given[c]  # eq. (30): rows lent away leave the lender's own loss
        if train.any():
            per_sample[train].mean().backward()
            if clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(models[c].parameters(), clip_norm)
            opt.step()
        losses[c] = float(per_sample[:n].detach().mean())
        logits_out[c] = logits[:n].detach()
        if stats_model is not None:  # prediction mode: BatchNorm's running statistics stay as they are
            was = stats_model.training
            stats_model.eval()
            with torch.no_grad():
                alpha = evidence(_forward_from(stats_model, leaves[c].detach(), cut), evidence_kind) + 1
            stats_model.train(was)
        stats[c] = batch_statistics(alpha[:n], y, logits.shape[-1], epistemic_kind)
    grads = {c: leaves[c].grad if leaves[c].grad is not None else torch.zeros_like(leaves[c]) for c in leaves}
    return grads, losses, logits_out, stats, lent, skipped
