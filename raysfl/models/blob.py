"""The run's initial model as it travels to the actors: sealed bytes, never tensors.

Every actor starts from a copy of the model the driver built (a zoo model from the seed, or
yours). Handed to Ray as a module, its parameters would be torch tensors crossing a Ray
boundary, which the wire rule forbids (:mod:`raysfl.runtime.wire_guard`): torch rebuilds a
pickled tensor on the device it came from. A :class:`ModelBlob` holds the model pickled on
the CPU (with cloudpickle, so a class defined in your script travels by value), and each
actor unpacks its own copy and moves it to its device.
"""

from __future__ import annotations

import copyreg
import io
from collections import ChainMap


class ModelBlob:
    """A CPU model, pickled. ``ModelBlob(model).model()`` gives a fresh copy of it."""

    def __init__(self, model):
        import torch
        from ray import cloudpickle

        bad = sorted({str(t.device) for t in list(model.parameters()) + list(model.buffers())
                      if t.device.type != "cpu"})
        if bad:
            raise ValueError(f"the initial model must be on the CPU to travel to the actors, found tensors on "
                             f"{', '.join(bad)}")

        class Pickler(cloudpickle.CloudPickler):
            # cloudpickle's own reducers, without a serializer registered with Ray for tensors (the wire guard's)
            dispatch_table = ChainMap({k: v for k, v in cloudpickle.CloudPickler._dispatch_table.items()
                                       if not (isinstance(k, type) and issubclass(k, torch.Tensor))},
                                      copyreg.dispatch_table)

        buf = io.BytesIO()
        Pickler(buf, protocol=cloudpickle.DEFAULT_PROTOCOL).dump(model)
        self.data = buf.getvalue()

    def model(self):
        import pickle

        return pickle.loads(self.data)
