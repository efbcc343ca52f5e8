"""Your model's own state_dict keys for a model you brought as an ``nn.Sequential`` or a list
of blocks.

raysfl trains a :class:`~raysfl.models.SplitModel`, whose keys are ``blocks.<i>.<name>`` (the
same at every cut). The trained model comes back in your module's keys: ``0.weight`` of your
``nn.Sequential``, not ``blocks.0.0.weight``. The map from one to the other is made once, when
the run starts, by matching the tensors of your module with those of the blocks split from it
(:func:`key_map`), and kept in the run directory as ``model_keys.json`` (:func:`write`), so
``raysfl export`` and :func:`raysfl.load_run` give your keys without your model at hand.
A list of blocks comes back as ``nn.Sequential(*blocks)`` (keys ``<i>.<name>``); a SplitModel
you brought keeps its own ``blocks.*`` keys (no map).
"""

from __future__ import annotations

import json
from pathlib import Path

FILE = "model_keys.json"


def key_map(model, blocks) -> dict[str, str]:
    """{your key: the SplitModel key of the same tensor} for ``model`` (an nn.Sequential, or a
    list of blocks) split into ``blocks`` (the same module objects, not copies)."""
    from torch import nn

    own = (model if isinstance(model, nn.Module) and not isinstance(model, (list, tuple))
           else nn.Sequential(*model)).state_dict(keep_vars=True)
    by_id = {}
    for i, block in enumerate(blocks):
        for name, t in block.state_dict(keep_vars=True).items():
            by_id.setdefault(id(t), f"blocks.{i}.{name}")
    return {k: by_id[id(t)] for k, t in own.items() if id(t) in by_id}


def as_module(model):
    """A copy of the model you brought as the module its keys belong to: an nn.Sequential (or
    your own nn.Module) as it is, a list of blocks as ``nn.Sequential(*blocks)``."""
    import copy

    from torch import nn

    return copy.deepcopy(model if isinstance(model, nn.Module) and not isinstance(model, nn.ModuleList)
                         else nn.Sequential(*model))


def write(run_dir: Path, keys: dict[str, str] | None) -> None:
    if keys:
        (Path(run_dir) / FILE).write_text(json.dumps(keys, indent=1) + "\n")


def read(run_dir: Path) -> dict[str, str] | None:
    """The run's key map, or None (a zoo model, or a SplitModel of your own)."""
    path = Path(run_dir) / FILE
    return json.loads(path.read_text()) if path.is_file() else None


def to_own(state: dict, keys: dict[str, str] | None) -> dict:
    """``state`` (SplitModel keys) in your model's keys; unchanged without a map."""
    return state if not keys else {own: state[split] for own, split in keys.items()}
