"""The training objective: what a model's outputs are scored against, and how.

One :class:`Loss` per run, named by the config's ``loss`` and chosen with
``raysfl.run(cfg, data=..., loss=...)`` (docs/custom-model-data.md, "Other tasks"):

=================  ====================  =========================================  ===================
``loss``           targets               trains with                                ``test_accuracy``
=================  ====================  =========================================  ===================
``cross_entropy``  class ids ``(N,)``    softmax cross-entropy (the default)        argmax = target
``mse``            real ``(N, k)``       mean squared error (regression)            none (NaN)
``bce``            0/1 ``(N, k)``        binary cross-entropy on logits             per label (1 - Hamming
                                         (multi-label classification)               loss), threshold 0
a function         real ``(N, k)``       ``fn(outputs, targets)``: the batch's      none (NaN)
                                         mean loss, a scalar tensor
``Loss(fn, targets="classes")``          your loss of class ids (e.g.               argmax = target
                                         ``nn.CrossEntropyLoss(label_smoothing=.1)``)
=================  ====================  =========================================  ===================

Targets that are real values are float32 arrays ``(N, k)`` (a 1-D array is ``(N, 1)``); the
model's last block outputs ``k`` values per sample. Every role computes its loss here
(:func:`raysfl.server_steps.shared_server_step`, the client's whole-model step, evaluation),
so a run's loss is the same on the clients, the servers and in the test score. Real-valued
targets have no classes, so they go with ``--partition iid`` only, and the algorithms that
read class labels themselves refuse them (:attr:`raysfl.algorithms.spec.Algorithm.targets`).

Torch is imported by the functions that compute, not above: validation names a loss without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from raysfl.errors import ConfigError, excerpt
from raysfl.run_registry import RunRegistry

PREFIX = "custom-"
TARGETS = ("classes", "values")
_RUNS = RunRegistry("loss", "raysfl.run(cfg, data=..., loss=...)", "raysfl.Loss(fn, name=...)")


# ----------------------------------------------------------------- the built-in losses
def _cross_entropy(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y)


def _cross_entropy_rows(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y, reduction="none")


def _cross_entropy_sum(out, y):
    import torch.nn.functional as F

    return F.cross_entropy(out, y, reduction="sum")


def _argmax_hits(out, y):
    return (out.argmax(1) == y).float()


def _mse(out, y):
    import torch.nn.functional as F

    return F.mse_loss(out, y)


def _mse_rows(out, y):
    return (out - y).pow(2).reshape(len(out), -1).mean(1)


def _bce(out, y):
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(out, y)


def _bce_rows(out, y):
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(out, y, reduction="none").reshape(len(out), -1).mean(1)


def _label_hits(out, y):
    return ((out > 0).to(y.dtype) == y).float().reshape(len(out), -1).mean(1)


@dataclass(eq=False)
class Loss:
    """A training objective.

    ``fn(outputs, targets)``: the batch's mean loss (a scalar tensor; under ``torch.func``'s
    vmap for GAPSL and SplitFed V1, so plain tensor operations only). ``targets``: ``"classes"``
    (integer class ids) or ``"values"`` (float arrays). ``rows(outputs, targets)``, optional:
    each sample's loss, shape ``(N,)``, whose mean is ``fn``'s (without it a group's loss is
    computed client by client). ``hits(outputs, targets)``, optional: each sample's accuracy in
    [0, 1] (the test accuracy; without it ``test_accuracy`` is NaN and runs are judged by
    ``test_loss``). ``name``: how the config records it (``custom-<fn's name>`` for yours).
    """

    fn: Callable
    targets: str = "values"
    rows: Callable | None = None
    hits: Callable | None = None
    name: str = ""
    sums: Callable | None = None  # the batch's summed loss, where a reduction of its own has it

    def __post_init__(self):
        if not callable(self.fn):
            raise ConfigError(f"loss must be a name ({', '.join(BUILT_IN)}), a function (outputs, targets) -> "
                              f"mean loss, or raysfl.Loss(fn, ...); got {type(self.fn).__name__}")
        if self.targets not in TARGETS:
            raise ConfigError(f"Loss targets must be one of {', '.join(TARGETS)}, got {self.targets!r}")
        if self.targets == "classes" and self.hits is None:
            self.hits = _argmax_hits  # class ids: accuracy is the argmax's
        if not self.name:
            own = getattr(self.fn, "__name__", None) or type(self.fn).__name__
            self.name = own if own in BUILT_IN and self.fn is BUILT_IN[own].fn else _custom_name(own)

    @property
    def has_accuracy(self) -> bool:
        return self.hits is not None

    def __call__(self, outputs, targets):
        return self.fn(outputs, targets)

    def total(self, outputs, targets):
        """The batch's summed loss (evaluation's ``test_loss`` is its mean over the test set)."""
        if self.sums is not None:
            return self.sums(outputs, targets)
        if self.rows is not None:
            return self.rows(outputs, targets).sum()
        return self.fn(outputs, targets) * len(outputs)

    def group(self, outputs, targets, sizes: list[int]):
        """(sum of the group's per-sample losses, [each segment's mean loss]) for a batch that
        concatenates ``sizes`` clients' samples: the shared server step's one forward/backward
        (its parameters step on the sum / N, each client gets its own mean's gradient)."""
        if self.rows is not None:
            losses = self.rows(outputs, targets)
            means, o = [], 0
            for n in sizes:
                means.append(losses[o:o + n].detach().mean())
                o += n
            return losses.sum(), means
        means, total, o = [], None, 0
        for n in sizes:
            m = self.fn(outputs[o:o + n], targets[o:o + n])
            total = m * n if total is None else total + m * n
            means.append(m.detach())
            o += n
        return total, means


def _custom_name(name: str) -> str:
    import re

    clean = re.sub(r"[^A-Za-z0-9_.]+", "_", str(name)).strip("_") or "loss"
    return clean if clean.startswith(PREFIX) else PREFIX + clean


BUILT_IN: dict[str, Loss] = {
    "cross_entropy": Loss(_cross_entropy, "classes", _cross_entropy_rows, _argmax_hits, name="cross_entropy",
                          sums=_cross_entropy_sum),
    "mse": Loss(_mse, "values", _mse_rows, None, name="mse"),
    "bce": Loss(_bce, "values", _bce_rows, _label_hits, name="bce"),
}
DEFAULT = "cross_entropy"


def as_loss(loss) -> Loss:
    """``loss`` as given to ``raysfl.run`` (a name of :data:`BUILT_IN`, a function, or a
    :class:`Loss`) as a Loss."""
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        if loss in BUILT_IN:
            return BUILT_IN[loss]
        raise ConfigError(f"unknown loss {excerpt(loss)}; allowed: {', '.join(BUILT_IN)}, a function (outputs, targets) -> "
                          f"mean loss, or raysfl.Loss(fn, targets='classes'|'values')")
    return Loss(loss)


def get_loss(name: str) -> Loss:
    """The run's loss by its config name: built in, or yours registered for the run."""
    if name in BUILT_IN:
        return BUILT_IN[name]
    if is_custom(name):
        found = _RUNS.lookup(name)
        if found is None:
            raise _RUNS.missing(name)
        return found
    raise ConfigError(f"unknown loss {excerpt(name)}; allowed: {', '.join(BUILT_IN)} (or your own: "
                      f"raysfl.run(cfg, data=..., loss=fn))")


def objective_of(ctx) -> Loss:
    """The run's loss held by a FederationContext (cross-entropy for a role built without one,
    as unit tests build them)."""
    return getattr(ctx, "loss", None) or BUILT_IN[DEFAULT]


def is_custom(name) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


registered, lookup, missing = _RUNS.registered, _RUNS.lookup, _RUNS.missing
