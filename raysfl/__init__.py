"""raysfl: Ray-native split federated learning.

    import raysfl
    result = raysfl.run(raysfl.Config(algo="splitfed_v1", clients=10, rounds=5))
    print(result.final["test_accuracy"], result.run_dir)
"""

from raysfl.api import RunResult, config_from_kwargs, resume_config, run
from raysfl.config import Config, DeviceConfig, ResourceConfig
from raysfl.errors import ConfigError

__version__ = "0.1.0"
__all__ = ["Config", "ConfigError", "DeviceConfig", "ResourceConfig", "RunResult", "config_from_kwargs",
           "resume_config", "run", "__version__"]
