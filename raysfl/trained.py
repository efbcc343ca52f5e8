"""The trained global model of a run directory, from its newest checkpoint (``None`` where the
algorithm keeps no single global model: PSL, GAPSL, FLEX-SFL), in your model's own keys for a
model you brought (:mod:`raysfl.models.own_keys`). Used by :class:`raysfl.api.RunResult` and,
through :meth:`raysfl.callbacks.Callback.on_model`, by the trackers."""

from __future__ import annotations

from pathlib import Path


def global_weights(cfg, state: dict, spec) -> dict | None:
    """{SplitModel key: array} of the global model in checkpoint ``state`` of a run of algorithm
    ``spec``, or None."""
    if "model" in state:  # the centralised run: one model
        return state["model"]
    agg = spec.aggregator(cfg, None, None, {})
    agg.load_state(state["federation"]["fed"])
    return agg.global_model()


def global_state_dict(cfg, run_dir: Path, spec) -> dict | None:
    """The newest checkpoint's global model as a ``state_dict`` of torch tensors, in your keys."""
    import numpy as np
    import torch

    from raysfl import checkpoint
    from raysfl.models import own_keys

    if not checkpoint.rounds_saved(run_dir):
        return None
    weights = global_weights(cfg, checkpoint.load_latest(run_dir), spec)
    if weights is None:
        return None
    return own_keys.to_own({k: torch.from_numpy(np.array(v)) for k, v in weights.items()}, own_keys.read(run_dir))


def whole_model(config: dict, run_dir: Path, state_dict: dict):
    """The trained global model as one module: the run's :class:`~raysfl.models.SplitModel`
    (every block, the client part followed by the server part) holding ``state_dict`` (the
    global model :meth:`raysfl.callbacks.Callback.on_model` hands over, in your keys for a model
    you brought), in eval mode. ``config``: the run's settings as in ``config.json``. Built as
    :meth:`raysfl.api.RunResult.model` builds a zoo model; a model or data of your own must be
    registered (during the run, as for the callbacks)."""
    from raysfl.data import dataset_info
    from raysfl.models import build_model, own_keys

    keys = own_keys.read(run_dir)  # {your key: SplitModel key}
    split = {s: state_dict[own] for own, s in keys.items()} if keys else state_dict
    info = dataset_info(config["dataset"])
    model = build_model(config["model"], info.input_shape, info.num_classes, seed=config["seed"])
    model.load_state_dict(split, strict=True)
    return model.eval()
