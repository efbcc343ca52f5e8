"""Test accuracy and loss of a full model on a held-out set (pure PyTorch): overall, and per
class so that accuracy can be weighted by a client's own label mix. The loss and the accuracy
are the run's (:mod:`raysfl.objective`).

Where every client keeps a model of its own, evaluating each on the whole test set costs one
pass per client; :func:`test_shares` deals the test set among them instead, so that a round's
evaluation costs a fixed number of passes whatever the number of clients (``--eval-passes``).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch


def test_shares(y: np.ndarray, clients: int, passes: int, seed) -> list[np.ndarray] | None:
    """The test rows each of ``clients`` per-client models is scored on, so that all of them
    together make ``passes`` passes over the test set (ours, ``--eval-passes``); None when every
    model gets the whole set (``passes`` 0, or at least ``clients``).

    Every test row goes to ``passes`` different models and every model gets the same number of
    rows, to one row: the rows are put in a seeded random order within each class, classes one
    after another, and dealt round-robin, so each share is stratified by class. The mean over
    the models of their accuracy on their shares then estimates the mean of their accuracies on
    the whole set without bias (up to the rounding of a share to whole rows of each class), at
    ``passes / clients`` of the cost."""
    if passes <= 0 or passes >= clients:
        return None
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    if y.dtype.kind in "iub":  # class ids: stratify
        order = order[np.argsort(y[order], kind="stable")]
    slot = np.arange(len(y) * passes)
    rows, owner = order[slot // passes], rng.permutation(clients)[slot % clients]
    return [np.sort(rows[owner == c]) for c in range(clients)]


@contextlib.contextmanager
def fast_layout(model: torch.nn.Module, x: np.ndarray, device):
    """Lay the model's 4-D weights out channels-last for an evaluation pass over images on the
    CPU, and back after: convolution and max-pooling run faster on channels-last tensors
    (benchmarks/evaluation_cost.py, docs/performance.md section 10). The values are the same,
    and the outputs equal to float rounding (1e-7 on the digits CNN's logits).

    Every max-pool's input is laid out channels-last too: a convolution of one input channel
    (grey images: digits, MNIST) gives its output in the default layout whatever the weights',
    and the CPU's max-pool is 11-16 times slower on that layout at these sizes
    (benchmarks/channels_last.py). A max is exact in any layout, so the pooled values are the
    same to the bit."""
    images = np.ndim(x) == 4 and torch.device(device).type == "cpu"
    convs = [p for p in model.parameters() if p.dim() == 4] if images else []
    moved = [p for p in convs if not p.is_contiguous(memory_format=torch.channels_last)]
    for p in moved:
        p.data = p.data.contiguous(memory_format=torch.channels_last)
    hooks = [m.register_forward_pre_hook(_pool_channels_last) for m in model.modules()
             if isinstance(m, torch.nn.MaxPool2d)] if convs else []
    try:
        yield bool(convs)  # lay the inputs out channels-last too
    finally:
        for h in hooks:
            h.remove()
        for p in moved:
            p.data = p.data.contiguous()


def _pool_channels_last(module, args):
    """A max-pool's forward pre-hook (:func:`fast_layout`): its batch of images channels-last."""
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:  # not an input passed by keyword
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return None


@contextlib.contextmanager
def held(model: torch.nn.Module, x: np.ndarray, device):
    """Many passes of ``model`` in a row, its weights replaced between them (a round's
    per-client models, each copied into one module in turn): eval mode and the CPU layout of
    :func:`fast_layout` set once for all of them, not once per pass. It gives whether the
    inputs go channels-last; passes inside pass that on as their ``held``. At 100 per-client
    models of a few dozen test rows each, switching the modules' modes and laying the weights
    out, and back, was a large part of each pass (docs/performance.md, section 10). The passes
    compute what they did."""
    was_training = model.training
    model.eval()
    try:
        with fast_layout(model, x, device) as channels_last:
            yield channels_last
    finally:
        model.train(was_training)


def _batch(to_tensor, x, device, channels_last: bool) -> torch.Tensor:
    xb = to_tensor(x).to(device)
    return xb.contiguous(memory_format=torch.channels_last) if channels_last and xb.dim() == 4 else xb


def evaluate(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor,
             batch_size: int = 512, device="cpu", loss=None) -> tuple[float, float]:
    """Return (accuracy as a fraction 0..1, mean loss): the run's ``loss``
    (:mod:`raysfl.objective`; cross-entropy by default). A loss without an accuracy
    (regression) gives NaN for it."""
    return evaluate_predictions(model, x, y, to_tensor, batch_size, device, loss)[:2]


@torch.no_grad()
def evaluate_predictions(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, to_tensor,
                         batch_size: int = 512, device="cpu", loss=None, outputs: list | None = None,
                         held: bool | None = None) -> tuple[float, float, np.ndarray]:
    """(accuracy, mean loss, the class predicted for each row) in one pass; the predictions
    are empty for real-valued targets (no classes). ``outputs``: a list that receives each
    batch's model outputs (on the CPU), for metrics of your own (:mod:`raysfl.user_metrics`).
    ``held``: None, or the pass runs inside :func:`held`, which set the model's mode and
    layout, and this is what it gave (whether the inputs go channels-last)."""
    from raysfl.objective import BUILT_IN

    loss = loss if loss is not None else BUILT_IN["cross_entropy"]
    was_training = model.training
    if held is None:
        model.eval()
    correct, loss_sum, preds = 0.0, 0.0, []
    with fast_layout(model, x, device) if held is None else contextlib.nullcontext(held) as channels_last:
        for i in range(0, len(y), batch_size):
            xb = _batch(to_tensor, x[i:i + batch_size], device, channels_last)
            yb = torch.from_numpy(np.array(y[i:i + batch_size])).to(device)  # int64 class ids or float32 values
            out = model(xb)
            if outputs is not None:
                outputs.append(out.detach().float().cpu())
            loss_sum += float(loss.total(out, yb))
            if loss.has_accuracy:
                correct += float(loss.hits(out, yb).sum())
            if loss.targets == "classes":
                preds.append(out.argmax(1).cpu().numpy())
    if held is None:
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
    with fast_layout(model, x, device) as channels_last:
        for i in range(0, len(y), batch_size):
            xb = _batch(to_tensor, x[i:i + batch_size], device, channels_last)
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
