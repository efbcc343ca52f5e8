"""A checkpoint against the run's model, before a resume loads it into the actors (ours):
refused with one line naming the file, the first key that disagrees and both shapes
(:mod:`raysfl.state_shapes` holds the shape checks, which the roles run again as they load)."""

from __future__ import annotations

from pathlib import Path

from raysfl.errors import ConfigError
from raysfl.state_shapes import StateMismatch, describe, first_mismatch, optimizer_mismatch, shapes


def checkpoint_path(run_dir: Path, state: dict) -> Path:
    """The file a checkpoint read by :func:`raysfl.checkpoint.load_latest` came from."""
    return Path(run_dir) / "checkpoints" / f"round_{int(state['round']):04d}.pt"


def _refuse(run_dir: Path, state: dict, what: str) -> ConfigError:
    return ConfigError(f"checkpoint {checkpoint_path(run_dir, state)} does not fit the run's model: {what}; "
                       f"resume with the model the run started with")


def check_checkpoint(state: dict, model, run_dir: Path, spec=None) -> None:
    """Refuse (one-line ConfigError) a checkpoint whose tensors do not have the shapes of the
    run's ``model`` (the driver's copy; ``spec``: the algorithm, whose server role tells whether
    its optimiser's buffers follow the model's parameters)."""
    model_shapes = shapes(model.state_dict())
    if "federation" not in state:  # a centralized run's checkpoint: the model alone
        bad = first_mismatch(state.get("model", {}), model_shapes, complete=True)
        if bad:
            raise _refuse(run_dir, state, describe("the model", bad))
        return
    fed = state["federation"].get("fed", {})
    bad = first_mismatch(fed.get("global", {}), model_shapes, complete=True)
    if bad:
        raise _refuse(run_dir, state, describe("the fed server's global model", bad))
    for client, own in sorted((fed.get("own") or {}).items()):
        bad = first_mismatch(own, model_shapes)
        if bad:
            raise _refuse(run_dir, state, describe(f"client {client}'s own model", bad))
    params = [tuple(p.shape) for p in model.parameters()] if _default_optimizer(spec) else None
    for j, server in enumerate(state["federation"].get("servers") or []):
        bad = first_mismatch(server.get("model", {}), model_shapes)
        if bad:
            raise _refuse(run_dir, state, describe(f"server {j}'s model", bad))
        bad = optimizer_mismatch(server.get("opt", {}), params) if params is not None else None
        if bad:
            raise _refuse(run_dir, state, describe(f"server {j}'s optimiser state", bad, "its parameter's"))


def _default_optimizer(spec) -> bool:
    """Whether the algorithm's server role keeps the default optimiser, one over the model's
    parameters in order (roles that build their own are checked as they load)."""
    from raysfl.algorithms.roles.server import ServerSide

    role = getattr(spec, "server", None)
    return (isinstance(role, type) and issubclass(role, ServerSide) and role.optimizer is ServerSide.optimizer
            and role.__init__ is ServerSide.__init__)


def load_federation(fed, federation: dict, run_dir: Path, state: dict) -> None:
    """``fed.load_state(federation)``, an actor's error while loading (a role that refused its
    state, a tensor torch would not load) reduced to one ConfigError line naming the checkpoint;
    an actor that died is left to the run's failure handling."""
    import ray

    from raysfl.runtime.refs import is_death

    try:
        fed.load_state(federation)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if is_death(e) or cause is None:
            raise
        text = " ".join(line.strip() for line in str(cause).strip().splitlines() if line.strip())[:300]
        why = text if isinstance(cause, StateMismatch) else f"loading it fails ({type(cause).__name__}: {text})"
        raise _refuse(run_dir, state, why) from None
