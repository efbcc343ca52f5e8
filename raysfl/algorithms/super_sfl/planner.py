"""SuperSFL's planner (the driver's role; no torch): eq. (1)'s depths (Sec. II-A, Alg. 1,
:mod:`~raysfl.algorithms.super_sfl.allocation`) and the server-availability schedule of Table III
(which the client role also reads)."""

from __future__ import annotations

import numpy as np

from raysfl.algorithms.roles.context import FederationContext
from raysfl.algorithms.roles.planner import Planner
from raysfl.algorithms.super_sfl.allocation import allocate_depths
from raysfl.algorithms.super_sfl.spec import SuperSFLParams
from raysfl.config import round_set

AVAILABILITY_BLOCK = 10  # rounds per block of the availability schedule


def server_answers(availability: float, rnd: int, seed: int, block: int = AVAILABILITY_BLOCK) -> bool:
    """Whether the server answers in round ``rnd``: in every block of ``block`` consecutive
    rounds it answers in exactly round(availability x block) of them, drawn from the seed.
    The fraction holds over any run of whole blocks and does not depend on the total number
    of rounds, so a resumed run keeps the schedule."""
    k = int(round(availability * block))
    b, pos = divmod(rnd - 1, block)
    perm = np.random.default_rng([seed, b, 0xA7A1]).permutation(block)
    return bool(perm[pos] < k)


def available_rounds(availability: float, rounds: int, seed: int) -> set[int]:
    """The rounds among 1..``rounds`` in which the server answers (:func:`server_answers`)."""
    return {r for r in range(1, rounds + 1) if server_answers(availability, r, seed)}


def server_up(params: SuperSFLParams, seed: int, rnd: int) -> bool:
    """Whether the server's gradients reach the clients in round ``rnd`` (Table III): the explicit
    ``availability_rounds``, else the seeded ``server_availability`` schedule."""
    if params.availability_rounds is not None:
        return rnd in round_set(str(params.availability_rounds))
    return server_answers(params.server_availability, rnd, seed)


class DepthPlanner(Planner):
    """Eq. (1)'s depths (from the device profiles, or measured once after the actors start),
    the server-availability schedule of Table III, fallback for clients whose server is away."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.depths: np.ndarray | None = None
        self.num_blocks = 0
        self.profile: dict[int, tuple[float, float]] = {}  # client -> (memory GB, latency s) used by eq. (1)
        self.valid_cuts: list[int] = []

    @property
    def measures_clients(self) -> bool:
        return self.params.allocation == "measured"

    def setup(self, ctx: FederationContext) -> None:
        """Eq. (1) once per run (Sec. II-A: profiles are sent once, at initialisation)."""
        self.num_blocks, self.valid_cuts = ctx.num_blocks, list(ctx.valid_cuts)
        if self.params.allocation == "profile":
            self.calibrate({k: (p.memory_gb, p.latency_s) for k, p in enumerate(ctx.profiles)})

    def calibrate(self, profile: dict[int, tuple[float, float]]) -> None:
        """Depths from (memory GB, latency s) per client: eq. (1), then the largest valid cut
        of the model not above d_i (every cut is valid for the zoo's models)."""
        clients = sorted(profile)
        self.profile = {c: (float(profile[c][0]), float(profile[c][1])) for c in clients}
        d = allocate_depths([profile[c][0] for c in clients], [profile[c][1] for c in clients], self.num_blocks,
                            self.params.depth_alpha, self.params.depth_beta)
        lowest = min(self.valid_cuts)
        self.depths = np.asarray([max([v for v in self.valid_cuts if v <= di] or [lowest]) for di in d])

    def client_info(self, client: int) -> dict:
        mem, lat = self.profile.get(client, (float("nan"), float("nan")))
        return {"depth": int(self.depths[client]), "alloc_memory_gb": mem, "alloc_latency_s": lat}

    def assign_cuts(self, rnd, clients, ctx):
        return {c: int(self.depths[c]) for c in clients}

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return ["server_available"]  # Table III's availability of round t (recorded in servers_down)

    def servers_down(self, rnd: int) -> set[int]:
        """``availability_mode=server`` only: the server is off in rounds without gradients
        (in ``gradients`` mode it keeps training; the client role drops its gradient)."""
        up = server_up(self.params, self.cfg.seed, rnd)
        self.record("server_available", float(up))
        if self.params.availability_mode == "gradients" or up:
            return set()
        return {0}

    def on_server_down(self, rnd: int, clients: list[int]) -> list[int]:
        return list(clients)  # every client trains on its local classifier (Alg. 3)

