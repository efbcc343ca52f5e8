"""A saved state's tensors against the shapes of a model, before it is loaded (ours).

A checkpoint edited by hand, or written with another version of your own model, would reach
the actors and fail there: a ``RayTaskError`` of many lines (a server model's tensor), or a
failure at the first step of every client (an optimiser's buffer). So that it is refused
with one line naming the first key that disagrees, both shapes and the file:

* the driver checks, before anything is loaded into an actor
  (:func:`raysfl.runtime.checkpoint_fit.check_checkpoint`),
  every tensor whose shape the run's model fixes: the fed server's global model (every key of
  the model, none missing), the clients' own models and each server's model (the keys the
  model has), and each server's optimiser state where the server role is the default one
  (its optimiser holds one buffer per model parameter, in order);
* the roles check again as they load, against what they hold (``ServerSide.load_state``,
  ``Aggregator.load_state``: :class:`StateMismatch`), for what the driver cannot know (an
  algorithm's own roles); :func:`raysfl.runtime.checkpoint_fit.load_federation` turns an
  actor's error while loading into one line, without Ray's traceback.

This module holds the shape checks (the roles use them); the run's checks are in
:mod:`raysfl.runtime.checkpoint_fit`.
"""

from __future__ import annotations

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
