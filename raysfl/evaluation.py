"""Test accuracy and loss of a full model on a held-out set (pure PyTorch)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor,
             batch_size: int = 512, device="cpu") -> tuple[float, float]:
    """Return (accuracy as a fraction 0..1, mean cross-entropy loss)."""
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, len(y), batch_size):
        xb = to_tensor(x[i:i + batch_size]).to(device)
        yb = torch.from_numpy(np.array(y[i:i + batch_size], dtype=np.int64)).to(device)
        out = model(xb)
        loss_sum += float(F.cross_entropy(out, yb, reduction="sum"))
        correct += int((out.argmax(1) == yb).sum())
    model.train(was_training)
    n = max(1, len(y))
    return correct / n, loss_sum / n
