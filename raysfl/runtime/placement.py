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
    need, need_gpus = actor_demand(cfg, num_client_actors, num_servers)
    num_cpus = r.num_cpus or max(os.cpu_count() or 1, math.ceil(need))
    num_gpus = r.num_gpus if r.num_gpus is not None else (math.ceil(need_gpus) if need_gpus else None)
    if need_gpus and not torch.cuda.is_available():
        import sys

        print(f"raysfl: warning: the actors ask for {need_gpus:g} GPUs but this machine has no CUDA GPU; "
              "they run on CPU (Ray is given placeholder GPUs so they can be placed)", file=sys.stderr)
    ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
             runtime_env=env, log_to_driver=True, configure_logging=False)
    return True


def actor_demand(cfg, num_client_actors: int, num_servers: int) -> tuple[float, float]:
    """(CPUs, GPUs) the run's actors ask Ray for."""
    r = cfg.resources
    cpus = num_client_actors * r.client_cpus + num_servers * r.server_cpus + r.fed_cpus
    gpus = num_client_actors * r.client_gpus + num_servers * r.server_gpus + r.fed_gpus
    return cpus, gpus


def check_capacity(cfg, num_client_actors: int, num_servers: int) -> None:
    """Fail fast (instead of waiting forever for actors) when the cluster is too small."""
    import ray

    from raysfl.errors import RunFailed

    cpus, gpus = actor_demand(cfg, num_client_actors, num_servers)
    have = ray.cluster_resources()
    for name, need in (("CPU", cpus), ("GPU", gpus)):
        if need > have.get(name, 0.0) + 1e-9:
            raise RunFailed(
                f"the actors need {need:g} {name}s ({num_client_actors} client actors, {num_servers} servers, "
                f"1 fed server) but the Ray cluster has {have.get(name, 0.0):g}; lower --client-{name.lower()}s/"
                f"--server-{name.lower()}s/--fed-{name.lower()}s or --client-actors, or add nodes")


def _project_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
