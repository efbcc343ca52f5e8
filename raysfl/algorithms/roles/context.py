"""The plain data every role is built with or receives: the federation as the driver knows it,
and a client's update as the fed server receives it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from raysfl.objective import BUILT_IN, Loss


@dataclass
class FederationContext:
    """What the driver knows about the federation (no raw data); every role is built with it."""

    num_clients: int
    num_blocks: int
    valid_cuts: list[int]
    sizes: np.ndarray          # samples per client
    histograms: np.ndarray     # (clients, classes) label counts (real-valued targets: (clients, 1) sizes)
    profiles: list             # raysfl.devices.DeviceProfile per client
    block_flops: list[int]     # forward FLOPs per sample of each model block (measured once)
    conv_blocks: int = 0       # leading convolutional blocks of the model (SplitModel.leading_conv_blocks)
    num_classes: int = 0       # classes, or outputs per sample for real-valued targets
    loss: Loss = field(default_factory=lambda: BUILT_IN["cross_entropy"])  # the run's loss (raysfl.objective)
    metrics: object = None  # metrics of your own (raysfl.user_metrics.UserMetrics), set for the run, or None
    # clients that cannot join the round being planned (churn: ``unavailable:client`` faults); set
    # on the round's copy the planner's ``select`` receives, empty otherwise
    unavailable: frozenset[int] = frozenset()

    def available(self) -> list[int]:
        """The clients that can join the round being planned, in id order (selection picks among them)."""
        return [c for c in range(self.num_clients) if c not in self.unavailable]


@dataclass
class ClientUpdate:
    """A client's model after its local steps, as the fed server receives it."""

    client: int
    state: dict[str, np.ndarray]   # the blocks it trained (and its parked own module, ``head.*`` keys)
    weight: float                  # its sample count this round
    late: bool = False             # missed its round's deadline; aggregated one round later
    report: dict = field(default_factory=dict)  # the client role's ``report`` (e.g. losses, depth)
    token: str | None = None       # its client actor keeps ``state`` under this name (resident states)
