"""Probes of an actor's process: its resident set and the object store's use (soak tests), the
memory a device has free (SuperSFL's measured allocation), and the warm-up before round 1."""

from __future__ import annotations

import re


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def available_memory_bytes() -> int:
    """Memory available to new work on this machine (Linux MemAvailable; else total)."""
    try:
        with open("/proc/meminfo") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if ":" in line}
        return fields.get("MemAvailable", fields.get("MemTotal", 0))
    except (OSError, ValueError, IndexError):
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def object_store_usage() -> tuple[int, int]:
    """(bytes, objects) held in Ray's shared-memory object store, cluster-wide (MiB resolution)."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(stats_only=True)
    m = re.search(r"Plasma memory usage\s+([\d.]+)\s+MiB,\s+(\d+)\s+objects", text)
    return (int(float(m.group(1)) * 2**20), int(m.group(2))) if m else (0, 0)


def referenced_object_bytes() -> int:
    """Exact bytes of every object some worker still references, cluster-wide (what a
    reference leak grows; includes small objects kept outside the shared store)."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(stats_only=False, group_by="STACK_TRACE", units="B")
    total, lines = 0.0, text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Mem Used by Objects") and i + 1 < len(lines):
            m = re.match(r"\s*([\d.]+)\s*B", lines[i + 1])
            total += float(m.group(1)) if m else 0.0
    return int(total)


def warm_up(model, input_shape: tuple[int, ...], batch: int, device) -> float:
    """One forward and backward pass of a throw-away copy of ``model`` on a batch of zeros of the
    run's batch size, so that torch's first-call set-up (kernels, thread pools, allocator) is not
    counted in round 1 -- nor against a timed round's deadline (``--round-deadline-s``): cold
    actors on a loaded machine can take seconds for their first step. Touches neither the model
    nor any random stream. Returns the seconds it took."""
    import copy
    import time

    import torch

    t0 = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        m = copy.deepcopy(model).to(device).train()
        m(torch.zeros((batch, *input_shape), device=device)).float().sum().backward()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)  # the GPU's work is done, not only queued
    return time.perf_counter() - t0
