"""raysfl: Ray-native split federated learning.

    import raysfl
    result = raysfl.run(raysfl.Config(algo="splitfed_v1", clients=10, rounds=5))
    print(result.final["test_accuracy"], result.run_dir)

Names are imported lazily so that Ray actors, which import ``raysfl.runtime.*``, do not pay
for the driver-only API (Parquet, TensorBoard, checkpoints).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "run": "raysfl.api", "RunResult": "raysfl.api", "config_from_kwargs": "raysfl.api",
    "resume_config": "raysfl.api", "load_run": "raysfl.api", "shutdown": "raysfl.api",
    "Callback": "raysfl.callbacks", "SplitModel": "raysfl.models", "split_sequential": "raysfl.models",
    "custom_dataset": "raysfl.data", "from_dicts": "raysfl.data", "Loss": "raysfl.objective",
    "Config": "raysfl.config", "DeviceConfig": "raysfl.config", "ResourceConfig": "raysfl.config",
    "ConfigError": "raysfl.errors", "RunFailed": "raysfl.errors",
}
__all__ = sorted(_LAZY) + ["errors", "trackers", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("errors", "trackers", "callbacks"):
        return importlib.import_module(f"raysfl.{name}")
    raise AttributeError(f"module 'raysfl' has no attribute {name!r}")
