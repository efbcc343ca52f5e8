"""The planner: the algorithm's role on the driver (SplitFed's by default).

It decides, round by round, who takes part, where each client cuts the model, which server
actor serves it, how many local steps it takes and what else its client needs to know (its
per-client plan data: FedPairing's partner); and, once per run, what the other roles share
(:meth:`Planner.shared`). It also says how the round's steps are wired (``exchange``) and how
long a round takes on the simulated clock. It holds no tensors and is never shipped to an
actor.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from raysfl.algorithms.roles.context import FederationContext
from raysfl.algorithms.roles.exchange import Exchange, SplitExchange
from raysfl.algorithms.roles.records import Recorder
from raysfl.simclock import client_time, round_time


class Planner(Recorder):
    """SplitFed's planning: every client (or a seeded uniform sample) each round, one cut, one
    server actor, the runtime's step rule."""

    exchange: ClassVar[type[Exchange] | None] = SplitExchange  # None: one process, no actors (centralised)
    uses_cut: ClassVar[bool] = True  # the model is split at ``--cut`` (whole-model clients: False)

    def __init__(self, cfg):
        self.cfg = cfg
        self.params = cfg.algo_params
        self.metrics: dict[str, list[float]] = {}          # the planned round's figures (``record``)
        self.client_metrics: dict[int, dict[str, object]] = {}  # ... per client (``record(..., client=)``)

    # ----------------------------------------------------------------- once per run
    @property
    def servers(self) -> int:
        """Server actors the run starts (a split exchange needs at least one)."""
        return 1 if self.exchange is not None and self.exchange.server_side else 0

    def setup(self, ctx: FederationContext) -> None:
        """Called once before the actors start (FLEX-SFL's clusters, SuperSFL's depths)."""

    def shared(self) -> object:
        """Facts the other roles are built with (plain data, taken once after :meth:`setup`;
        FLEX-SFL's clusters). Default: none."""
        return None

    @classmethod
    def plans_own_steps(cls) -> bool:
        """Whether it decides each client's local steps itself (``plan_steps``: GAPSL's equal
        counts), so that --local-steps / --local-epochs are not the count the runtime checks."""
        return cls.plan_steps is not Planner.plan_steps

    measures_clients: ClassVar[bool] = False  # wants each client's (memory GB, latency s), measured
                                              # once after the actors start (SuperSFL's allocation)
    plans_ahead: ClassVar[bool] = True  # round r+1 may be planned before round r's metrics are taken
                                        # (--run-ahead): they read nothing planning changes (False: FedPairing,
                                        # whose client_sim_time reads the pairs it planned last)

    def calibrate(self, profile: dict[int, tuple[float, float]]) -> None:
        """The measured (memory GB, latency s) per client, for planners that ask for them."""

    def client_info(self, client: int) -> dict:
        """Extra per-client facts written to ``clients.json`` (e.g. edge cluster)."""
        return {}

    # ----------------------------------------------------------------- each round
    def select(self, rnd: int, ctx: FederationContext) -> list[int]:
        """Clients that take part in round ``rnd`` (uniform without replacement, seeded) among
        ``ctx.available()``, those that can join it (churn: fewer when fewer are; an
        unavailable client returned is dropped)."""
        k = self.cfg.selected_per_round
        pool = ctx.available()
        if k >= len(pool):
            return pool
        rng = np.random.default_rng([self.cfg.seed, rnd, 0x5E1EC7])  # without churn: the draw it always was
        return sorted(pool[int(i)] for i in rng.choice(len(pool), size=k, replace=False))

    def assign_cuts(self, rnd: int, clients: list[int], ctx: FederationContext) -> dict[int, int]:
        """Split point per client: blocks [0, cut) run on the client."""
        cut = self.cfg.cut if self.uses_cut else ctx.num_blocks
        return {c: cut for c in clients}

    def assign_servers(self, rnd: int, clients: list[int], cuts: dict[int, int],
                       ctx: FederationContext) -> dict[int, int]:
        """Index of the server actor that runs each client's server-side part."""
        return {c: 0 for c in clients}

    def plan_steps(self, rnd: int, clients: list[int], ctx: FederationContext) -> dict[int, tuple[int, int]] | None:
        """(local steps, batch size) of each client in round ``rnd``. None (the default) keeps
        the runtime's rule for each client on its own: ``--local-steps``, or ``ceil(local_epochs
        x n_k / batch)`` with batch ``min(batch_size, n_k)`` (``runtime/planning.local_steps``)."""
        return None

    def client_plans(self, rnd: int, clients: list[int], cuts: dict[int, int]) -> dict[int, object]:
        """What each client's role needs to know this round besides its cut and steps (sent with
        its plan; FedPairing: its partner, overlapping layers and loss weight). Default: nothing."""
        return {}

    def model_blocks(self, cut: int, ctx: FederationContext) -> int:
        """How many leading blocks a client at ``cut`` holds this round (downloads, trains):
        its cut (FedPairing: every block, its partner runs the rest on its own copy)."""
        return cut

    def restrict(self, rnd: int, plans: dict, clients: list[int]) -> dict:
        """The round's plans for ``clients`` alone (a simulated-clock replay of the clients it
        includes; FedPairing: a client whose partner is not among them trains alone)."""
        return {c: plans[c] for c in clients}

    def servers_down(self, rnd: int) -> set[int]:
        """Server actors the algorithm's own availability model takes off line in round ``rnd``
        (SuperSFL's server availability, Table III); handled like ``unavailable:`` faults."""
        return set()

    def on_server_down(self, rnd: int, clients: list[int]) -> list[int]:
        """Clients whose server is unavailable this round: return those that still train without
        it (fallback, e.g. SuperSFL's local heads). Default: none; they sit the round out."""
        return []

    def sync_servers(self, rnd: int) -> bool:
        """Whether the server actors send their server-side state to the fed server in round
        ``rnd`` (every round by default; FLEX-SFL only every tau_e rounds)."""
        return True

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """Metric columns it fills with :meth:`record` while it plans a round (SuperSFL's
        ``server_available``, FLEX-SFL's HiLo schedule)."""
        return []

    def record(self, name: str, value, client: int | None = None) -> None:
        """Note a figure of the round being planned: its round mean becomes the metric column
        ``name``; with ``client``, the value (as given) is that client's clients.parquet column
        ``name`` (the same names for every client and round; FedPairing's ``partner``)."""
        if client is None:
            super().record(name, value)
        else:
            self.client_metrics.setdefault(client, {})[name] = value

    def take_client_records(self) -> dict[int, dict[str, object]]:
        """What :meth:`record` noted per client since the last call, which it forgets."""
        out, self.client_metrics = self.client_metrics, {}
        return out

    def client_sim_time(self, client: int, stats, profile, server_flops_per_s: float) -> float:
        """Simulated seconds client ``client`` spent in the round (default: simclock.client_time:
        compute on its device, its share of server compute, its links, one latency per message)."""
        return client_time(stats, profile, server_flops_per_s)

    def round_sim_time(self, client_times: list[float]) -> float:
        """Simulated length of the round from its clients' times (the slowest; the sum when the
        clients take turns)."""
        return self.exchange.round_time(client_times) if self.exchange is not None else round_time(client_times)
