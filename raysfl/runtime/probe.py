"""Memory probes for soak tests: a process's resident set and the object store's use."""

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


def object_store_used_bytes() -> int:
    """Bytes held in Ray's shared-memory object store, cluster-wide (driver side)."""
    from ray._private.internal_api import memory_summary

    text = memory_summary(stats_only=True)
    m = re.search(r"Plasma memory usage\s+([\d.]+)\s+MiB", text)
    return int(float(m.group(1)) * 2**20) if m else 0
