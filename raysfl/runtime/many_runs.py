"""Several runs on one Ray (``raysfl compare``, ``reproduce``, ``tune``): what one run's actors
ask for, how many runs fit at once, and a local Ray sized for that many. No torch here, so the
commands that list before they run stay light.
"""

from __future__ import annotations

import dataclasses
import math
import os

from raysfl.algorithms import get_algorithm
from raysfl.errors import ConfigError


def run_demand(cfg) -> tuple[float, float]:
    """(CPUs, GPUs) one run of ``cfg`` asks Ray for (nothing for a run without actors)."""
    from raysfl.runtime.placement import actor_demand  # torch: only when something will run

    planner = get_algorithm(cfg.algo).make_planner(cfg)
    if planner.exchange is None:
        return 0.0, 0.0
    return actor_demand(cfg, cfg.resources.num_client_actors(cfg.clients), planner.servers)


def runs_at_once(configs: list, cpus: float, gpus: float, requested: int | None = None) -> int:
    """How many runs go at once: ``requested``, or as many of the most demanding run as
    ``cpus``/``gpus`` hold (at least one, at most one per config)."""
    if requested is not None:
        if requested < 1:
            raise ConfigError(f"--parallel must be >= 1, got {requested}")
        return min(requested, len(configs))
    demands = [run_demand(c) for c in configs]  # each planner built once
    need_cpu = max(cpu for cpu, _ in demands)
    need_gpu = max(gpu for _, gpu in demands)
    fits = [math.floor(cpus / need_cpu + 1e-9) if need_cpu else len(configs),
            math.floor(gpus / need_gpu + 1e-9) if need_gpu else len(configs)]
    return max(1, min(len(configs), *fits))


def sized_for(cfg, at_once: int, need_cpu: float, need_gpu: float):
    """A copy of ``cfg`` whose local Ray is sized for ``at_once`` runs of it."""
    res = dataclasses.replace(cfg.resources,
                              num_cpus=max(cfg.resources.num_cpus or 0, math.ceil(at_once * need_cpu)) or None,
                              num_gpus=(max(cfg.resources.num_gpus or 0, math.ceil(at_once * need_gpu))
                                        if need_gpu else cfg.resources.num_gpus))
    return dataclasses.replace(cfg, resources=res)


def start_local_ray(configs: list, at_once: int) -> bool:
    """Ray for the runs: nothing when this process has one; the cluster in RAY_ADDRESS; else a
    local Ray sized for ``at_once`` runs of the most demanding config. Whether it started one."""
    import ray

    from raysfl.runtime.placement import init_ray

    if ray.is_initialized():
        return False
    biggest = max(configs, key=lambda c: run_demand(c)[0])
    if os.environ.get("RAY_ADDRESS"):
        return init_ray(biggest, 1, 1)
    cpu, gpu = run_demand(biggest)
    return init_ray(sized_for(biggest, at_once, cpu, gpu), biggest.resources.num_client_actors(biggest.clients), 3)
