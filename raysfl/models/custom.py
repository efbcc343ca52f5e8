"""Your own model: a :class:`SplitModel`, a list of blocks, or an ``nn.Sequential``.

``raysfl.run(cfg, model=...)`` accepts

* a :class:`SplitModel` (its ``input_shape``/``num_classes`` must match the data);
* a list of modules, the blocks in order: cut k runs blocks ``[0, k)`` on the client;
* an ``nn.Sequential``, split into blocks by :func:`split_sequential`.

The model is checked once on the driver (it runs one zero sample through each block, which
also measures the FLOPs and activation shapes that cut validation, the simulated clock and
byte counts use) and then travels to every actor as one object. Its weights are the initial
weights of the run: ``--seed`` does not re-initialise a model you give (build it under
``torch.manual_seed`` for a seeded initialisation); the object you pass is never trained
itself, the trained model comes back from :meth:`raysfl.api.RunResult.model` as your own module
(an ``nn.Sequential`` you gave, trained; a list of blocks as ``nn.Sequential(*blocks)``), and
its ``state_dict`` in your module's keys (:mod:`raysfl.models.own_keys`).

While the run is going on the model is registered in this process under ``custom-<name>``
(:func:`registered`), so validation on the driver (``build_model``, the algorithms'
``validate``) finds it like a zoo model; the actors never look it up by name.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from raysfl.errors import ConfigError, first_line
from raysfl.run_registry import RunRegistry

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from raysfl.models.splittable import SplitModel

# torch is imported by the functions that take a model, not above: validation looks a model up
# by name (is_custom, lookup, missing) without importing torch.

PREFIX = "custom-"
_RUNS = RunRegistry("model", "raysfl.run(cfg, model=...)", "SplitModel(name, blocks, ...)")


def _has_params(m: nn.Module) -> bool:
    return any(True for _ in m.parameters()) or any(True for _ in m.buffers())


def split_sequential(seq: nn.Sequential, at: Sequence[int] | None = None) -> list[nn.Module]:
    """The blocks of ``seq`` (its own modules, not copies).

    ``at``: the child indices where a new block starts (``at=[2, 4]`` on six children gives
    blocks ``[0:2], [2:4], [4:6]``). By default every child with parameters starts a block,
    and the parameter-free children after it (activations, pooling, dropout, flatten) join
    it, so ``Linear, ReLU, Linear, ReLU, Linear`` gives three blocks, cut points after each
    ReLU. Children before the first one with parameters join the first block.
    """
    from torch import nn

    if not isinstance(seq, nn.Sequential):
        raise ConfigError(f"split_sequential needs an nn.Sequential, got {type(seq).__name__}")
    children = list(seq.children())
    n = len(children)
    if at is None:
        starts = [i for i, m in enumerate(children) if _has_params(m)]
        starts = sorted(set([0] + starts[1:])) if starts else [0]
    else:
        starts = sorted(set(int(i) for i in at) | {0})
        bad = [i for i in starts if not 0 <= i < n]
        if bad:
            raise ConfigError(f"split_sequential: block starts {bad} are outside the {n} children (0..{n - 1})")
    bounds = starts + [n]
    blocks = [nn.Sequential(*children[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]
    if len(blocks) < 2:
        raise ConfigError(f"an nn.Sequential with {n} children gives {len(blocks)} block; a split model needs at "
                          f"least 2 (pass at=[...] to split_sequential, or give a list of blocks)")
    return blocks


def _name(name: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9_.]+", "_", str(name)).strip("_") or "model"
    return clean if clean.startswith(PREFIX) else PREFIX + clean


def as_split_model(model, input_shape: tuple[int, ...], num_classes: int, targets: str = "classes") -> SplitModel:
    """``model`` (any accepted form) as a SplitModel named ``custom-<name>`` for data of
    ``input_shape`` and ``num_classes`` (for real-valued ``targets``: the values per sample),
    checked to run on it (one-line ConfigError naming the block that fails). A copy: the
    caller's object is left alone."""
    from torch import nn

    from raysfl.models.splittable import SplitModel

    if isinstance(model, SplitModel):
        if tuple(model.input_shape) != tuple(input_shape) or model.num_classes != num_classes:
            what = "classes" if targets == "classes" else "outputs"
            raise ConfigError(f"model '{model.name}' is built for inputs {model.input_shape} and "
                              f"{model.num_classes} {what}, but the data have {tuple(input_shape)} and "
                              f"{num_classes}")
        split = copy.deepcopy(model)
        split.name = _name(model.name)
    else:
        if isinstance(model, nn.Sequential):
            blocks = split_sequential(model)
        elif isinstance(model, (list, tuple, nn.ModuleList)) and all(isinstance(b, nn.Module) for b in model):
            blocks = list(model)
        else:
            raise ConfigError(f"model must be a raysfl SplitModel, a list of nn.Module blocks or an nn.Sequential; "
                              f"got {type(model).__name__}")
        from raysfl.models.own_keys import key_map

        keys = key_map(model, blocks)  # before the copy: matched by tensor identity
        split = SplitModel(_name("model"), copy.deepcopy(blocks), input_shape, num_classes)
        split.own_keys = keys  # your module's keys of the trained model (raysfl.models.own_keys)
    split = split.cpu()  # a model you built on a GPU: checked, and sent to the actors, from the CPU
    check_runs(split, targets)
    return split


PROBE_BATCH = 2  # samples the check runs: a block that drops or folds the batch dimension shows with 2


def check_runs(model: SplitModel, targets: str = "classes") -> None:
    """A batch of ``PROBE_BATCH`` zero samples through every block (eval mode, no gradients): a
    ConfigError naming the first block that fails, that does not keep the batch as its output's
    first dimension (``x.squeeze()``, ``x.view(-1)``, ``x.view(1, -1)``: every block is the client
    side's last or the server side's first at some cut, where the batch must stay one), or
    outputs of the wrong shape (logits for class ids, values for real-valued ``targets``). Fills the model's FLOP and shape profile."""
    import torch

    with torch.no_grad():
        modes = [(m, m.training) for m in model.modules()]
        model.eval()
        try:
            x = torch.zeros((PROBE_BATCH, *model.input_shape))
            for i, block in enumerate(model.blocks):
                given = tuple(x.shape)
                try:
                    x = block(x)
                except Exception as e:  # noqa: BLE001 - any failure is a model/data mismatch
                    first = first_line(e, None)
                    raise ConfigError(f"model '{model.name}' does not run on the data: block {i} "
                                      f"({type(block).__name__}) fails on input of shape {tuple(x.shape[1:])}: "
                                      f"{first}") from None
                if not isinstance(x, torch.Tensor):
                    raise ConfigError(f"model '{model.name}': block {i} returns {type(x).__name__}, not a tensor")
                if x.dim() == 0 or x.shape[0] != PROBE_BATCH:
                    raise ConfigError(f"model '{model.name}': block {i} ({type(block).__name__}, {_side(model, i)}) "
                                      f"drops the batch dimension: input {given} gives output {tuple(x.shape)}, "
                                      f"expected ({PROBE_BATCH}, ...); keep dim 0 as the batch (x.flatten(1), "
                                      f"not x.view(-1) or x.squeeze())")
        finally:
            for m, was in modes:
                m.training = was
        if tuple(x.shape[1:]) != (model.num_classes,):
            need = (f"a classifier for these data must output ({model.num_classes},) logits" if targets == "classes"
                    else f"these data's targets have {model.num_classes} value(s) per sample, so the model must "
                         f"output ({model.num_classes},) outputs")
            raise ConfigError(f"model '{model.name}' outputs shape {tuple(x.shape[1:])} per sample; {need}")
        model.block_flops()  # measured once here, reused by the run






def _side(model: SplitModel, i: int) -> str:
    """Where block ``i`` runs: the client side's last block at cut i+1, the server side's first at cut i."""
    at = []
    if i + 1 < model.num_blocks:
        at.append(f"the client side's last at cut {i + 1}")
    if i > 0:
        at.append(f"the server side's first at cut {i}")
    return " and ".join(at) or "the whole model"


def is_custom(name) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


registered, lookup, missing = _RUNS.registered, _RUNS.lookup, _RUNS.missing
