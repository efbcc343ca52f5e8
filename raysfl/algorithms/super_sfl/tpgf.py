"""SuperSFL's Three-Phase Gradient Fusion (TPGF, Sec. II-B, eqs. 3-4, Algorithm 2) and the
ablation of Sec. IV.

Phase 1 gives the client encoder a local gradient g_client (from the client classifier's
loss), clipped to L2 norm tau = 0.5; phase 2 gives it g_server (the server's gradient of
the smashed data, back-propagated through the encoder); phase 3 fuses them:

    w_client = d_i / (d_i + d_s) * (L_client + eps)^-1 / ((L_client + eps)^-1 + (L_server + eps)^-1)   (3)
    w_server = 1 - w_client
    g        = w_client * g_client + w_server * g_server                                                (4)

Ablation modes (Sec. IV, Fig. 6): ``full`` (both factors), ``no_loss`` (depth factor only),
``no_depth`` (inverse-loss factor only), ``equal`` (w_client = 0.5).
"""

from __future__ import annotations

import torch

from raysfl.algorithms.super_sfl.spec import FUSION_MODES

EPS = 1e-8


def client_weight(depth: int, server_depth: int, loss_client: float, loss_server: float,
                  mode: str = "full", eps: float = EPS) -> float:
    """Eq. (3): the client gradient's weight (the server's is 1 - this)."""
    if mode not in FUSION_MODES:
        raise ValueError(f"unknown fusion mode '{mode}'; allowed: {', '.join(FUSION_MODES)}")
    depth_term = depth / (depth + server_depth)
    inv_c, inv_s = 1.0 / (loss_client + eps), 1.0 / (loss_server + eps)
    loss_term = inv_c / (inv_c + inv_s)
    if mode == "full":
        return depth_term * loss_term
    if mode == "no_loss":
        return depth_term
    if mode == "no_depth":
        return loss_term
    return 0.5


def fused_loss(depth: int, server_depth: int, loss_client: float, loss_server: float, mode: str = "full") -> float:
    """The client's loss as aggregation sees it (Sec. II-D): both losses fused with eq. (3)."""
    w = client_weight(depth, server_depth, loss_client, loss_server, mode)
    return w * loss_client + (1.0 - w) * loss_server


def l2_norm(grads: list[torch.Tensor]) -> float:
    """The L2 norm of a gradient given as a list of tensors (one vector)."""
    return float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads))) if grads else 0.0


def clip_l2(grads: list[torch.Tensor], max_norm: float = 0.5) -> list[torch.Tensor]:
    """Scale a gradient (a list of tensors, one vector) to L2 norm <= ``max_norm``."""
    scale = min(1.0, max_norm / (l2_norm(grads) + 1e-12))
    return [g * scale for g in grads]


def fuse(g_client: list[torch.Tensor], g_server: list[torch.Tensor], w_client: float) -> list[torch.Tensor]:
    """Eq. (4): w_client * g_client + (1 - w_client) * g_server, tensor by tensor."""
    return [w_client * a + (1.0 - w_client) * b for a, b in zip(g_client, g_server)]
