"""Test accuracy and loss of a full model on a held-out set (pure PyTorch): overall, and per
class so that accuracy can be weighted by a client's own label mix. The loss and the accuracy
are the run's (:mod:`raysfl.objective`)."""

from __future__ import annotations

import numpy as np
import torch


def evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor,
             batch_size: int = 512, device="cpu", loss=None) -> tuple[float, float]:
    """Return (accuracy as a fraction 0..1, mean loss): the run's ``loss``
    (:mod:`raysfl.objective`; cross-entropy by default). A loss without an accuracy
    (regression) gives NaN for it."""
    return evaluate_predictions(model, x, y, to_tensor, batch_size, device, loss)[:2]


@torch.no_grad()
def evaluate_predictions(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor,
                         batch_size: int = 512, device="cpu", loss=None) -> tuple[float, float, np.ndarray]:
    """(accuracy, mean loss, the class predicted for each row) in one pass; the predictions
    are empty for real-valued targets (no classes)."""
    from raysfl.objective import BUILT_IN

    loss = loss if loss is not None else BUILT_IN["cross_entropy"]
    was_training = model.training
    model.eval()
    correct, loss_sum, preds = 0.0, 0.0, []
    for i in range(0, len(y), batch_size):
        xb = to_tensor(x[i:i + batch_size]).to(device)
        yb = torch.from_numpy(np.array(y[i:i + batch_size])).to(device)  # int64 class ids or float32 values
        out = model(xb)
        loss_sum += float(loss.total(out, yb))
        if loss.has_accuracy:
            correct += float(loss.hits(out, yb).sum())
        if loss.targets == "classes":
            preds.append(out.argmax(1).cpu().numpy())
    model.train(was_training)
    n = max(1, len(y))
    acc = correct / n if loss.has_accuracy else float("nan")
    return acc, loss_sum / n, np.concatenate(preds) if preds else np.zeros(0, dtype=np.int64)


@torch.no_grad()
def evaluate_by_class(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor, num_classes: int,
                      batch_size: int = 512, device="cpu") -> tuple[np.ndarray, np.ndarray]:
    """(correct predictions per class, samples per class) of ``model`` on (x, y)."""
    was_training = model.training
    model.eval()
    correct = np.zeros(num_classes, dtype=np.int64)
    total = np.bincount(np.asarray(y, dtype=np.int64), minlength=num_classes)[:num_classes]
    for i in range(0, len(y), batch_size):
        xb = to_tensor(x[i:i + batch_size]).to(device)
        yb = torch.from_numpy(np.array(y[i:i + batch_size], dtype=np.int64)).to(device)
        hit = (model(xb).argmax(1) == yb).cpu().numpy()
        correct += np.bincount(yb.cpu().numpy()[hit], minlength=num_classes)[:num_classes]
    model.train(was_training)
    return correct, total


def mix_weighted_accuracy(correct: np.ndarray, total: np.ndarray, mix: np.ndarray) -> float:
    """Accuracy on a client's label mix: per-class test accuracy weighted by the client's share
    of each class, sum_k p_k * correct_k / total_k (classes absent from the test set count 0)."""
    mix = np.asarray(mix, dtype=np.float64)
    if mix.sum() <= 0:
        return float("nan")
    p = mix / mix.sum()
    per_class = np.divide(correct, total, out=np.zeros(len(total), dtype=np.float64), where=total > 0)
    return float(np.dot(p, per_class))
