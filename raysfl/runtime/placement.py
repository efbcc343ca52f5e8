"""Where actors run: Ray start-up, per-role resources, CPU threads and CUDA devices."""

from __future__ import annotations

import math
import os

import torch


def set_threads(cpus: float) -> None:
    """Give torch as many threads as the CPUs the actor was granted (at least one)."""
    torch.set_num_threads(max(1, int(math.floor(cpus))))


def device_for_actor(gpus: float) -> torch.device:
    """CUDA when this actor holds a real GPU share, else CPU (fake GPUs in tests fall back)."""
    if gpus > 0 and torch.cuda.is_available():
        try:
            import ray

            if ray.get_gpu_ids():
                return torch.device("cuda")
        except Exception:  # noqa: BLE001 - outside an actor: no GPU ids
            pass
    return torch.device("cpu")



def init_ray(cfg, num_client_actors: int, num_servers: int) -> bool:
    """Connect to the cluster in RAY_ADDRESS, or start a local one sized for this run.

    Returns True when this call started Ray (the caller then shuts it down).
    """
    import ray

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS"):
        # a submitted job brings its own runtime_env (--working-dir); don't override it
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
        return True
    env = {"env_vars": {"PYTHONPATH": os.pathsep.join(filter(None, [_project_root(), os.environ.get("PYTHONPATH")]))}}
    r = cfg.resources
    need = num_client_actors * r.client_cpus + num_servers * r.server_cpus + r.fed_cpus
    num_cpus = r.num_cpus or max(os.cpu_count() or 1, math.ceil(need))
    need_gpus = num_client_actors * r.client_gpus + num_servers * r.server_gpus + r.fed_gpus
    num_gpus = r.num_gpus if r.num_gpus is not None else (math.ceil(need_gpus) if need_gpus else None)
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
             runtime_env=env, log_to_driver=True, configure_logging=False)
    return True


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
