"""A checkpoint's tensors against the shapes of the run's model, before a resume loads them (ours).

A checkpoint edited by hand, or written with another version of your own model, would reach
the actors and fail there: a ``RayTaskError`` of many lines (a server model's tensor), or a
failure at the first step of every client (an optimiser's buffer). So that it is refused
with one line naming the first key that disagrees, both shapes and the file:

* the driver checks, before anything is loaded into an actor (:func:`check_checkpoint`),
  every tensor whose shape the run's model fixes: the fed server's global model (every key of
  the model, none missing), the clients' own models and each server's model (the keys the
  model has), and each server's optimiser state where the server role is the default one
  (its optimiser holds one buffer per model parameter, in order);
* the roles check again as they load, against what they hold (``ServerSide.load_state``,
  ``Aggregator.load_state``: :class:`StateMismatch`), for what the driver cannot know (an
  algorithm's own roles); :func:`load_federation` turns an actor's error while loading into
  one line, without Ray's traceback.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from raysfl.errors import ConfigError

Mismatch = tuple[str, tuple, "tuple | None"]  # (key, shape in the checkpoint, the run's shape; None: missing)


class StateMismatch(ConfigError):
    """A role's saved state does not fit the model it holds (raised on the actor as it loads)."""


def shapes(tensors) -> dict[str, tuple]:
    """{key: shape} of a state dict (torch tensors or NumPy arrays)."""
    return {k: tuple(np.shape(v)) for k, v in tensors.items()}


def first_mismatch(saved: dict, expected: dict[str, tuple], complete: bool = False) -> Mismatch | None:
    """The first key of ``saved`` that ``expected`` has with another shape (``complete``: also
    the first key of ``expected`` that ``saved`` lacks, shape None)."""
    for k, v in saved.items():
        want = expected.get(k)
        if want is not None and tuple(np.shape(v)) != tuple(want):
            return k, tuple(np.shape(v)), tuple(want)
    if complete:
        for k, want in expected.items():
            if k not in saved:
                return k, None, tuple(want)
    return None


def optimizer_mismatch(saved: dict, params: list[tuple]) -> Mismatch | None:
    """The first per-parameter buffer of an optimiser's saved state (``<index>.<name>``,
    :func:`raysfl.transport.optimizer_state_to_wire`) that is not a scalar (Adam's ``step``) and
    has another shape than parameter ``index`` of ``params``; an older checkpoint's
    ``state_dict`` is not checked."""
    if not isinstance(saved, dict) or "param_groups" in saved:
        return None
    for k, v in saved.items():
        i, _, _ = str(k).partition(".")
        got = tuple(np.shape(v))
        if got and i.isdigit() and int(i) < len(params) and got != tuple(params[int(i)]):
            return k, got, tuple(params[int(i)])
    return None


def describe(where: str, bad: Mismatch, theirs: str = "the run's") -> str:
    """``server 0's model 'blocks.3.1.weight' has shape (3, 3), the run's is (10, 128)``."""
    key, got, want = bad
    if got is None:
        return f"{where} has no '{key}' (the run's model has it, shape {want})"
    return f"{where} '{key}' has shape {got}, {theirs} is {want}"


def check_server_state(state: dict, model, opt) -> None:
    """On a server actor, before its role loads ``state``: the model's tensors and the
    optimiser's buffers have the shapes of what the role holds (:class:`StateMismatch`)."""
    bad = first_mismatch(state.get("model", {}), shapes(model.state_dict()))
    if bad:
        raise StateMismatch(describe("the server's model", bad))
    bad = optimizer_mismatch(state.get("opt", {}), [tuple(p.shape) for g in opt.param_groups for p in g["params"]])
    if bad:
        raise StateMismatch(describe("the server's optimiser state", bad, "its parameter's"))


def check_global_state(saved: dict, held: dict) -> None:
    """On the fed actor, before the aggregator loads it: the saved global model's tensors have
    the shapes of the one it holds (:class:`StateMismatch`)."""
    bad = first_mismatch(saved, shapes(held))
    if bad:
        raise StateMismatch(describe("the fed server's global model", bad))


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
