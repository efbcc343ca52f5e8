"""Per-client device profiles: sampled heterogeneity (memory, compute, links, latency).

Every algorithm reads the same profiles: SuperSFL allocates depth from memory and latency
(its eq. 1), FLEX-SFL splits by compute capacity (its eq. 5), FedPairing pairs by CPU
frequency, and the simulated clock turns FLOPs and bytes into seconds with them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from raysfl.config import DeviceConfig


@dataclass(frozen=True)
class DeviceProfile:
    client: int
    memory_gb: float
    cpu_ghz: float
    flops_per_s: float
    uplink_bps: float
    downlink_bps: float
    latency_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def sample_profiles(num_clients: int, cfg: DeviceConfig, seed: int) -> list[DeviceProfile]:
    """Draw one profile per client, uniform in each configured range, fixed by ``seed``."""
    rng = np.random.default_rng([seed, 0xDE71CE])

    def u(rng_range):
        lo, hi = rng_range
        return rng.uniform(lo, hi, size=num_clients)

    mem, lat, ghz = u(cfg.memory_gb), u(cfg.latency_ms), u(cfg.cpu_ghz)
    up, down = u(cfg.uplink_mbps), u(cfg.downlink_mbps)
    return [
        DeviceProfile(
            client=k,
            memory_gb=float(mem[k]),
            cpu_ghz=float(ghz[k]),
            flops_per_s=float(ghz[k] * 1e9 * cfg.flops_per_cycle),
            uplink_bps=float(up[k] * 1e6),
            downlink_bps=float(down[k] * 1e6),
            latency_s=float(lat[k] / 1000.0),
        )
        for k in range(num_clients)
    ]
