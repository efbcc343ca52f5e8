"""``--init-from RUN``: a new run that starts from a finished run's final global model (ours).

Not a resume: the new run has its own directory, starts at round 1 with fresh optimisers,
counters and clocks, and may change any setting (the learning rate, the algorithm, the data's
split) -- only its model must have the source's shapes. The weights are the source's newest
readable checkpoint's global model (what ``raysfl export`` writes); they replace the seeded
initial model before any actor starts, so every role starts from them as it would from the
seed's. They are checked first, in one line each, before the new run directory is made:

* the source's checkpoint file is the one its ``checkpoints/manifest.json`` records (its sha256);
* the source keeps a single global model (PSL, GAPSL and FLEX-SFL keep one per client);
* every tensor of this run's model is there with its shape, and no other
  (:mod:`raysfl.state_shapes`, the shape checks a resume uses).

The new run's ``config.json`` records ``init_from`` (the source directory) and
``init_from_checkpoint``: the checkpoint's round, file and sha256.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from raysfl.errors import ConfigError


@dataclass
class WarmStart:
    model: object   # this run's initial SplitModel, holding the source's weights
    record: dict    # config.json's init_from_checkpoint: {"round", "file", "sha256"}


def load(cfg) -> WarmStart:
    """The initial model of ``cfg``'s run with the weights of the run in ``cfg.init_from``
    (ConfigError, one line, where they cannot be used)."""
    import numpy as np
    import torch

    from raysfl import checkpoint
    from raysfl.algorithms import get_algorithm
    from raysfl.data import dataset_info
    from raysfl.resolve import saved_config
    from raysfl.models import build_model
    from raysfl.resolve import from_dict
    from raysfl.runtime.checkpoint_fit import checkpoint_path
    from raysfl.trained import global_weights
    from raysfl.state_shapes import describe, first_mismatch, shapes

    src = Path(cfg.init_from).expanduser()
    where = f"init-from '{src}'"
    try:
        src_cfg = from_dict(saved_config(src))
        state = checkpoint.load_latest(src, src_cfg.to_dict())
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    path = checkpoint_path(src, state)
    digest = checkpoint.file_digest(path)
    recorded = checkpoint.read_manifest(src).get(str(state["round"]), {}).get("sha256")
    if recorded and recorded != digest:
        raise ConfigError(f"{where}: {path.name} is not the file written as round {state['round']}'s checkpoint "
                          f"(its sha256 differs from {checkpoint.MANIFEST}'s)")
    weights = global_weights(src_cfg, state, get_algorithm(src_cfg.algo))
    if weights is None:
        raise ConfigError(f"{where}: {src_cfg.algo} keeps no single global model (each client runs its own) to "
                          f"start from; give a run of an algorithm with one")
    info = dataset_info(cfg.dataset)
    model = build_model(cfg.model, info.input_shape, info.num_classes, seed=cfg.seed)
    mine = shapes(model.state_dict())
    bad = first_mismatch(weights, mine, complete=True)
    extra = next((k for k in weights if k not in mine), None)
    if bad or extra:
        what = describe("its final model", bad) if bad else f"its final model has '{extra}', which this run's lacks"
        raise ConfigError(f"{where} does not fit this run's model: {what} (it trained model '{src_cfg.model}' on "
                          f"'{src_cfg.dataset}'; this run: model '{cfg.model}' on '{cfg.dataset}')")
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()}, strict=True)
    return WarmStart(model, {"round": int(state["round"]), "file": path.name, "sha256": digest})
