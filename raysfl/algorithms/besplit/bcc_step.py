"""BESplit's server step (Sec. 4.1-4.2): evidential training of each client's own server-side
model, with Bias-Compensated Collaboration mixing (eqs. 12-14) and the statistics the
Client State Records are built from. Pure PyTorch, no Ray.

For each client k of the group step, its server-side model W_S_k runs on its smashed batch
z_k and is trained with the evidential loss (eq. 5). A client i matched with a partner j
(``mixes[i] = (j, {n: rho_n})``) also takes, for every class n over-represented at j
(eq. 13), the first round(rho_n * count) of j's smashed samples of class n in this step
(N_{j->i}, eq. 14; rho from eqs. 31-32) into the same step: W_S_i is trained on
z_i plus those rows.

Gradient routing: every smashed batch enters as its own leaf tensor, and the lent rows are
*indexed* out of the partner's leaf, so autograd accumulates the gradient of i's loss with
respect to a lent row into that row of j's leaf -- the gradient goes back only to j, the
client whose sample it is, summed with the gradient of j's own step. Client i receives the
gradient of its loss with respect to its own rows only.

No waiting: BCC only uses what has arrived in this step. A partner that is missing (dead,
late, in another group, at another cut) means the client's step runs without BCC (counted
as ``skipped``).

CSR statistics come from each client's own rows in its own step (evidence, counts and the
two uncertainties per true class, eqs. 3-4); lent rows count for nobody's record.
"""

from __future__ import annotations

import numpy as np
import torch

from raysfl.algorithms.besplit.evidential import aleatoric, epistemic, evidence, evidential_loss


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


def batch_statistics(alpha: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, np.ndarray]:
    """One batch's contribution to a Client State Record (Table 6): summed evidence per true
    class (N x N), sample counts, summed aleatoric and epistemic uncertainty per true class."""
    alpha = alpha.detach().double()
    e = alpha - 1
    out = {"evidence": torch.zeros(num_classes, num_classes, dtype=torch.float64, device=alpha.device),
           "counts": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device),
           "u_ale": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device),
           "u_epi": torch.zeros(num_classes, dtype=torch.float64, device=alpha.device)}
    out["evidence"].index_add_(0, y, e)
    out["counts"].index_add_(0, y, torch.ones_like(y, dtype=torch.float64))
    out["u_ale"].index_add_(0, y, aleatoric(alpha))
    out["u_epi"].index_add_(0, y, epistemic(alpha))
    return {k: v.cpu().numpy() for k, v in out.items()}


def _forward_from(model, x: torch.Tensor, cut: int) -> torch.Tensor:
    for block in model.blocks[cut:]:
        x = block(x)
    return x


def evidential_server_step(models: dict, opts: dict, batches: list[tuple[int, int, torch.Tensor, torch.Tensor]],
                           mixes: dict[int, tuple[int, dict[int, float]]], t: int, total: int,
                           evidence_kind: str = "softplus"):
    """One step of every client's own server-side model (see the module docstring).

    Returns (gradient at the cut per client, its mean evidential loss on its own rows, its
    server-side outputs (logits) for its own rows, its CSR batch statistics, rows lent to
    it, clients whose partner was missing).
    """
    leaves = {c: x.detach().requires_grad_(True) for c, _, x, _ in batches}
    meta = {c: (cut, y) for c, cut, _, y in batches}
    losses, logits_out, stats, lent, skipped = {}, {}, {}, {}, []
    for c, cut, _, y in batches:
        inp, lab = leaves[c], y
        if c in mixes:
            j, ratios = mixes[c]
            if j in leaves and meta[j][0] == cut:
                rows = lent_rows(meta[j][1], ratios)
                lent[c] = len(rows)
                if len(rows):
                    inp, lab = torch.cat([leaves[c], leaves[j][rows]]), torch.cat([y, meta[j][1][rows]])
            else:
                skipped.append(c)
        opt = opts[c]
        opt.zero_grad(set_to_none=True)
        logits = _forward_from(models[c], inp, cut)
        alpha = evidence(logits, evidence_kind) + 1
        per_sample = evidential_loss(alpha, lab, t, total, reduction="none")
        per_sample.mean().backward()
        opt.step()
        n = len(y)
        losses[c] = float(per_sample[:n].detach().mean())
        logits_out[c] = logits[:n].detach()
        stats[c] = batch_statistics(alpha[:n], y, logits.shape[-1])
    grads = {c: leaves[c].grad if leaves[c].grad is not None else torch.zeros_like(leaves[c]) for c in leaves}
    return grads, losses, logits_out, stats, lent, skipped
