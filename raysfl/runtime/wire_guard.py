"""The rule that keeps tensors off the wire, enforced: no ``torch.Tensor`` crosses a Ray boundary.

Everything that travels between the driver and the actors goes through
:mod:`raysfl.transport`'s NumPy wire format (``pack``, ``state_to_wire``,
``optimizer_state_to_wire``) or, for the model the actors start from, as a sealed
:class:`raysfl.models.ModelBlob`. A torch tensor handed to Ray instead would be pickled
by torch, which rebuilds it on the device it came from: a CUDA tensor sent to a CPU-only
driver fails there ("Attempting to deserialize object on a CUDA device"), and on one GPU box
the receiver silently takes GPU memory. On a CPU machine nothing shows, so the rule is
checked there: with ``RAYSFL_WIRE_GUARD=1`` (the test suite sets it), :func:`install` makes
Ray refuse to serialise a tensor in every process of a local Ray that raysfl starts (a
``worker_process_setup_hook``) and in the driver, so a tensor in any actor call's
arguments or result fails the call at once, naming its shape and device.
"""

from __future__ import annotations

import os

ENV = "RAYSFL_WIRE_GUARD"
HOOK = "raysfl.runtime.wire_guard.install"


def enabled() -> bool:
    """Whether this process runs with the guard (``RAYSFL_WIRE_GUARD=1``)."""
    return os.environ.get(ENV, "") not in ("", "0")


def _refuse(t):
    raise TypeError(f"a torch.Tensor of shape {tuple(t.shape)} on {t.device} was about to cross a Ray boundary; "
                    f"tensors travel as NumPy buffers (raysfl.transport.pack / state_to_wire / "
                    f"optimizer_state_to_wire)")


def install() -> None:
    """Make this process's Ray serialiser refuse torch tensors (call after Ray is initialised in the
    driver; Ray's workers run it as their setup hook)."""
    import ray
    import torch

    ray.util.register_serializer(torch.Tensor, serializer=_refuse, deserializer=lambda x: x)


def runtime_env_hook() -> dict:
    """The runtime_env entry that installs the guard in every worker of a local Ray (or {})."""
    return {"worker_process_setup_hook": HOOK} if enabled() else {}
