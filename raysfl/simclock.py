"""Simulated wall-clock time of the heterogeneous deployment.

Real wall time on a laptop says little about phones and edge boxes, so every round also
gets a simulated duration computed from what each client did:

    t_k = client_flops_k / speed_k                (client compute, forward + backward)
        + server_flops_k / server_speed           (its share of server compute)
        + bytes_up_k * 8 / uplink_k + bytes_down_k * 8 / downlink_k
        + messages_k * latency_k                  (one latency per one-way transfer)

A synchronous round lasts as long as its slowest participant (``max``); vanilla split
learning visits clients one after another (``sum``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - types only: the planner (driver, validation) needs no torch
    from raysfl.devices import DeviceProfile
    from raysfl.transport import ClientRoundStats


def client_time(stats: ClientRoundStats, profile: DeviceProfile, server_flops_per_s: float) -> float:
    t = stats.traffic
    return (
        stats.client_flops / profile.flops_per_s
        + stats.server_flops / server_flops_per_s
        + t.up * 8.0 / profile.uplink_bps
        + t.down * 8.0 / profile.downlink_bps
        + t.messages * profile.latency_s
    )


def compute_time(stats: ClientRoundStats, profile: DeviceProfile, server_flops_per_s: float) -> float:
    """The compute part of :func:`client_time` alone (no links, no latency): the one clock every
    algorithm shares whatever its cost model (``sim_compute_s``, beside each paper's own)."""
    return stats.client_flops / profile.flops_per_s + stats.server_flops / server_flops_per_s


def round_time(client_times: list[float], sequential: bool = False) -> float:
    if not client_times:
        return 0.0
    return float(sum(client_times) if sequential else max(client_times))
