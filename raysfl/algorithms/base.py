"""The algorithm plug-in interface: one typed protocol description and the hooks the runtime calls.

An algorithm is one class. Its :class:`Protocol` (the ``protocol`` class attribute, which an
instance may refine from its params in ``__init__``) tells the runtime the *shape* of the
exchange -- who holds which part of the model, who aggregates, how servers are shared -- and
is validated once, when the class is defined or the instance is built. Its *hooks* hold the
mathematics; the defaults below are SplitFed's.

=============================  ===================  ==============================================
hook                           called by            when / what for
=============================  ===================  ==============================================
``validate`` (classmethod)     driver               before Ray starts: refuse bad settings
``setup``                      driver               once per run: plain data from the federation
                                                    context (FLEX-SFL's clusters, SuperSFL's depths)
``wants_calibration``,         driver               once, after the actors start: measured
``calibrate``                                       (memory, latency) per client (SuperSFL)
``client_info``                driver               per client, into ``clients.json``
``select``                     driver               each round: who takes part
``assign_cuts``                driver               each round: split point per client
``assign_servers``             driver               each round: server actor per client
``plan_steps``                 driver               each round: (local steps, batch size) per client
                                                    (default: the runtime's rule, per client)
``pair_plan``                  driver               each round: partners and overlaps (PEER)
``servers_down``,              driver               each round: the algorithm's own availability
``on_server_down``                                  model, and who trains without the server
``sync_servers``               driver               each round: do servers send their state?
``round_info``                 driver               each round: extra metric columns
``client_sim_time``,           driver               each round: simulated seconds per client and
``round_sim_time``                                  per round
``client_loss``,               client actor         each local step of a WHOLE-model client
``client_regularizer``                              (FedAvg's loss, FedProx's proximal term)
``client_head``                client actor         round start: a client's own module
                                                    (``client_heads``)
``client_forward``             client actor         each step, before the smashed data leaves
``client_backward``            client actor         each step, with the server's gradient
``client_fallback``            client actor         a step without the server's answer
``server_timeout_s``           client actor         how long to wait for that answer
``client_report``              client actor         round end: facts sent with the update
``client_metric_names``        client actor/driver  metric columns client hooks record with
                                                    ``a.stats.record(name, value)``
``double_overlap``             client actor         each PEER step: the doubled step (eq. 7)
``server_step``                server actor         each group step: gradients (and losses)
``server_updates_per_step``    server actor         each group step: FLOP accounting
``server_weights``             server actor         round end: aggregation weights per client
``server_metric_names``        server actor/driver  metric columns the server step records
``fed_client_state``           fed server           round start: what each client starts from
``fed_aggregate``,             fed server           round end: merge updates and server states
``aggregate``
``fed_evaluate``,              fed server           evaluation rounds: the reported accuracy
``eval_metric_names``                               and its extra columns
``client_model_state``,        fed server, driver   the model a client runs (local test splits,
``global_model_state``                              ``RunResult.client_models``); the global model
                                                    (``RunResult.model``, ``raysfl export``)
=============================  ===================  ==============================================

Hooks run inside Ray actors, so an algorithm instance must pickle (keep it to the config and
plain data). Adding an algorithm = one package ``raysfl/algorithms/<paper>/`` whose
``algorithm.py`` subclasses :class:`Algorithm`, one line in the registry
(``raysfl/algorithms/__init__.py``) and one example (docs/architecture.md walks through it).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from raysfl.aggregation import weighted_average
from raysfl.server_steps import per_client_gradients, per_client_server_step, shared_server_step
from raysfl.simclock import client_time, round_time

if TYPE_CHECKING:  # pragma: no cover
    from raysfl.config import Config
    from raysfl.devices import DeviceProfile


class Training(str, enum.Enum):
    """Where the model is trained."""

    SPLIT = "split"      # clients run blocks [0, cut), server actors the rest (SplitFed, PSL, FLEX-SFL, ...)
    WHOLE = "whole"      # every client trains the whole model; no server actors (FedAvg, FedProx)
    PEER = "peer"        # clients split the model with a partner client; no server actors (FedPairing;
                         # runtime/peer_split.py)
    CENTRAL = "central"  # one process on the pooled data, no actors (the centralised upper bound)


class ServerModel(str, enum.Enum):
    """How a server actor's server-side model is shared by its clients (SPLIT only)."""

    SHARED = "shared"          # one model, trained on the whole group (SplitFed V2, PSL, GAPSL)
    PER_CLIENT = "per_client"  # one copy per client during a round, averaged at its end (SplitFed V1)


class ClientModel(str, enum.Enum):
    """What happens to client-side models between rounds."""

    AGGREGATED = "aggregated"  # the fed server merges them (``fed_aggregate``); they upload their model
    OWN = "own"                # each client keeps its own, nothing is uploaded (PSL, GAPSL)


REPLIES = ("loss", "outputs")  # what a server's reply may carry besides the gradient at the cut


@dataclass(frozen=True)
class Protocol:
    """The shape of an algorithm's exchange, which the runtime branches on.

    Validated when built: combinations that mean nothing (a per-client server model without
    servers, a reply without a server) are refused.
    """

    training: Training = Training.SPLIT
    servers: int = 1                                 # server actors (SPLIT: >= 1, FLEX-SFL: one per edge
                                                     # cluster; otherwise 0)
    server_model: ServerModel = ServerModel.SHARED
    client_model: ClientModel = ClientModel.AGGREGATED
    sequential: bool = False         # clients take turns, each starting from the last one's model (SL)
    server_reply: tuple[str, ...] = ()  # besides the gradient: "loss" (SuperSFL's TPGF), "outputs"
                                        # (BESplit's DTD teacher)
    client_heads: bool = False       # every client keeps a module of its own (``client_head``)
    client_head_optimizer: bool = False  # ... and its optimiser state (momentum buffers) across rounds
                                         # (BESplit's auxiliary model: one local training over the run)
    broadcast_servers: bool = False  # ``fed_aggregate``'s merged server state goes back to every server
    survives_server_loss: bool = False  # clients whose server dies or stays silent go on
                                        # (``client_fallback``) instead of failing the round
    late_updates: bool = False       # updates that miss the real-time deadline join the next
                                     # round's aggregation (False: they are dropped)

    def __post_init__(self):
        if self.training is Training.SPLIT:
            if self.servers < 1:
                raise ValueError(f"training=split needs at least one server actor, got servers={self.servers}")
        else:
            needs_servers = {"servers": self.servers != 0, "server_model": self.server_model is not ServerModel.SHARED,
                             "sequential": self.sequential, "server_reply": bool(self.server_reply),
                             "client_heads": self.client_heads, "broadcast_servers": self.broadcast_servers,
                             "survives_server_loss": self.survives_server_loss}
            bad = [name for name, set_ in needs_servers.items() if set_]
            if bad:
                raise ValueError(f"{', '.join(bad)} need server actors (training=split), "
                                 f"not training={self.training.value}")
        if self.client_head_optimizer and not self.client_heads:
            raise ValueError("client_head_optimizer keeps the optimiser of a client's own module: it needs client_heads")
        unknown = [r for r in self.server_reply if r not in REPLIES]
        if unknown:
            raise ValueError(f"unknown server_reply {unknown}; allowed: {', '.join(REPLIES)}")
        if self.sequential and self.servers != 1:
            raise ValueError(f"sequential clients share one server actor, got servers={self.servers}")
        if self.late_updates and self.training is Training.CENTRAL:
            raise ValueError("late_updates needs client actors, not training=central")

    @property
    def split(self) -> bool:
        """Clients run a prefix of the model and a server actor the rest."""
        return self.training is Training.SPLIT

    @property
    def distributed(self) -> bool:
        """Runs on Ray actors (every training but CENTRAL)."""
        return self.training is not Training.CENTRAL

    @property
    def uses_cut(self) -> bool:
        """The model is split at a cut (``--cut`` must be valid): SPLIT and PEER."""
        return self.training in (Training.SPLIT, Training.PEER)

    @property
    def aggregate_clients(self) -> bool:
        return self.client_model is ClientModel.AGGREGATED

    @property
    def per_client_server(self) -> bool:
        return self.server_model is ServerModel.PER_CLIENT


@dataclass
class NoParams:
    """Algorithms without knobs of their own."""


@dataclass
class FederationContext:
    """What the driver knows about the federation (no raw data): for planning hooks."""

    num_clients: int
    num_blocks: int
    valid_cuts: list[int]
    sizes: np.ndarray          # samples per client
    histograms: np.ndarray     # (clients, classes) label counts
    profiles: list["DeviceProfile"]
    block_flops: list[int]     # forward FLOPs per sample of each model block (measured once)
    conv_blocks: int = 0       # leading convolutional blocks of the model (SplitModel.leading_conv_blocks)


@dataclass
class ClientUpdate:
    """A client's model after its local steps, as the fed server receives it."""

    client: int
    state: dict[str, np.ndarray]   # the blocks it trained
    weight: float                  # its sample count this round
    late: bool = False             # missed its round's deadline; aggregated one round later
    report: dict = field(default_factory=dict)  # the algorithm's ``client_report`` (e.g. losses, depth)


HEAD_OPTIMIZER = "head_opt."  # a client head's optimiser state in its update (``Protocol.client_head_optimizer``)


def prefix_with_own(fed, client: int, cut: int) -> dict[str, np.ndarray]:
    """The global model's blocks [0, ``cut``) plus the client's own parked state
    (``fed.own``: SuperSFL's classifier, BESplit's auxiliary model), for ``fed_client_state``."""
    state = {k: v for k, v in fed.global_state.items() if int(k.split(".")[1]) < cut}
    state.update(fed.own.get(client, {}))
    return state


def record_gradient_angle(server, grads: torch.Tensor) -> None:
    """The mean pairwise angle between the clients' server-side gradients (GAPSL's footnote 2,
    Fig. 3b), in degrees, as the ``grad_angle_deg`` metric."""
    import math

    from raysfl.algorithms.gapsl.lgi import mean_pairwise_angle

    if len(grads) > 1:
        server.record("grad_angle_deg", math.degrees(mean_pairwise_angle(grads)))


class Algorithm:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params_cls: ClassVar[type] = NoParams
    protocol: Protocol = Protocol()  # SplitFed V2's shape; an instance may refine it in __init__
    # The run settings of this algorithm's paper (optimizer, lr and decay, data split, model, ...):
    # every Config field the user leaves None takes its value from here when the config is
    # validated, on every entry point (Config(...), config_from_kwargs, files, the CLI).
    config_defaults: ClassVar[dict] = {}
    # ... and where the paper's setting depends on the data set (FLEX-SFL's Table 2: VGG-16 and
    # lr 0.03 on CIFAR-10): {dataset: {setting: value}}, applied before ``config_defaults``.
    dataset_defaults: ClassVar[dict] = {}

    def __init__(self, cfg: "Config"):
        self.cfg = cfg
        self.params = cfg.algo_params if cfg.algo_params is not None else self.params_cls()

    @classmethod
    def validate(cls, cfg: "Config") -> None:
        """Raise ConfigError for settings this algorithm cannot run with."""

    # ----------------------------------------------------------------- driver hooks
    def setup(self, ctx: FederationContext) -> None:
        """Called once on the driver before the actors start; keep only plain data (it is
        pickled into every actor)."""

    def wants_calibration(self) -> bool:
        """True if the algorithm needs each client's measured (memory GB, latency s), taken
        once by the client actors after they start (SuperSFL's ``allocation=measured``)."""
        return False

    def calibrate(self, profile: dict[int, tuple[float, float]]) -> None:
        """Receive the measured (memory GB, latency s) per client (driver side)."""

    def client_info(self, client: int) -> dict:
        """Extra per-client facts written to ``clients.json`` (e.g. edge cluster)."""
        return {}

    def round_info(self, rnd: int) -> dict[str, float]:
        """Extra columns of round ``rnd``'s metrics row (same keys every round)."""
        return {}

    def eval_metric_names(self) -> list[str]:
        """Extra columns ``fed_evaluate`` fills (NaN in rounds without evaluation)."""
        return []

    def sync_servers(self, rnd: int) -> bool:
        """Whether the server actors send their server-side state to the fed server in round
        ``rnd`` (every round by default; FLEX-SFL only every tau_e rounds)."""
        return True

    def select(self, rnd: int, ctx: FederationContext) -> list[int]:
        """Clients that take part in round ``rnd`` (uniform without replacement, seeded)."""
        k = self.cfg.selected_per_round
        if k >= ctx.num_clients:
            return list(range(ctx.num_clients))
        rng = np.random.default_rng([self.cfg.seed, rnd, 0x5E1EC7])
        return sorted(int(c) for c in rng.choice(ctx.num_clients, size=k, replace=False))

    def assign_cuts(self, rnd: int, clients: list[int], ctx: FederationContext) -> dict[int, int]:
        """Split point per client: blocks [0, cut) run on the client."""
        cut = self.cfg.cut if self.protocol.uses_cut else ctx.num_blocks
        return {c: cut for c in clients}

    def assign_servers(self, rnd: int, clients: list[int], cuts: dict[int, int],
                       ctx: FederationContext) -> dict[int, int]:
        """Index of the server actor that runs each client's server-side part."""
        return {c: 0 for c in clients}

    def plan_steps(self, rnd: int, clients: list[int], ctx: FederationContext) -> dict[int, tuple[int, int]] | None:
        """(local steps, batch size) of each client in round ``rnd``. None (the default) keeps
        the runtime's rule for each client on its own: ``--local-steps``, or ``ceil(local_epochs
        x n_k / batch)`` with batch ``min(batch_size, n_k)`` (``runtime/planning.local_steps``).
        GAPSL returns one step count for every client (Sec. III-A: every server step sees
        every participant)."""
        return None

    def on_server_down(self, rnd: int, clients: list[int]) -> list[int]:
        """Clients whose server is unavailable this round (``unavailable:`` faults): return
        those that still train without it (fallback, e.g. SuperSFL's local heads). Default:
        none; they sit the round out."""
        return []

    def pair_plan(self, rnd: int, clients: list[int]) -> dict[int, dict]:
        """PEER algorithms: per client {"partner": client or None, "overlap": [layers],
        "weight": the weight of its loss in both halves (optional, 1)} (its cut, from
        ``assign_cuts``, is its propagation length L_i)."""
        return {}

    def double_overlap(self) -> bool:
        """PEER algorithms: whether overlapping layers take the doubled step (eq. 7)."""
        return False

    def servers_down(self, rnd: int) -> set[int]:
        """Server actors the algorithm's own availability model takes off line in round ``rnd``
        (SuperSFL's server availability, Table III); handled like ``unavailable:`` faults."""
        return set()

    def client_sim_time(self, client: int, stats, profile, server_flops_per_s: float) -> float:
        """Simulated seconds client ``client`` spent in the round (default: simclock.client_time:
        compute on its device, its share of server compute, its links, one latency per message)."""
        return client_time(stats, profile, server_flops_per_s)

    def round_sim_time(self, client_times: list[float]) -> float:
        """Simulated length of the round from its clients' times (max; sum if sequential)."""
        return round_time(client_times, sequential=self.protocol.sequential)

    # ----------------------------------------------------------------- client hooks
    def client_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Loss of a client that runs the whole model (no server-side part)."""
        return F.cross_entropy(logits, labels)

    def client_regularizer(self, part: torch.nn.Module,
                           anchor: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Extra term added to the client's objective; ``anchor`` = state at round start."""
        return None

    def client_head(self, cut: int, model, num_classes: int) -> torch.nn.Module:
        """A client's own module for a client-side part of depth ``cut`` of ``model`` (the
        :class:`~raysfl.models.SplitModel`, for shapes and architecture), for algorithms that
        set ``protocol.client_heads``: SuperSFL's classifier on the smashed data, BESplit's auxiliary
        model. Built under a (seed, client) random seed; kept on the client between rounds."""
        raise NotImplementedError(f"{self.name} sets protocol.client_heads but does not define client_head")

    def server_timeout_s(self) -> float | None:
        """How long a client waits for its server's answer before ``client_fallback`` (None:
        as long as it takes; a dead server still counts as no answer)."""
        return None

    def client_forward(self, a, acts: torch.Tensor, y: torch.Tensor) -> None:
        """Right after a client's forward pass, before the smashed data leaves (e.g. TPGF's
        phase 1). ``a`` is the client's round state (``part``, ``opt``, ``head``,
        ``head_opt``, ``cut``, ``round``, ``extra``, ``stats``; ``x``/``y`` the batch being
        trained; ``server_logits`` the server's outputs for it once they are back, for
        algorithms whose ``protocol.server_reply`` has "outputs")."""

    def client_backward(self, a, acts: torch.Tensor, grad: torch.Tensor, server_loss: float | None) -> None:
        """Update the client-side part from the server's gradient at the cut (default: plain
        back-propagation plus ``client_regularizer``)."""
        reg = self.client_regularizer(a.part, a.anchor)
        if reg is not None:
            # d/dw [<a, g> + reg] = backprop of the server's gradient plus the regulariser's
            (acts * grad).sum().add(reg).backward()
        else:
            acts.backward(grad)
        a.opt.step()
        a.opt.zero_grad(set_to_none=True)

    def client_fallback(self, a, acts: torch.Tensor) -> bool:
        """A step without the server's answer (it timed out, died, or is unavailable this
        round). Return True if the client trained (counted as a fallback step), False if it
        cannot go on without its server (it drops out of the round: the default)."""
        return False

    def client_metric_names(self) -> list[str]:
        """Metric columns the client hooks fill with ``a.stats.record(name, value)``: the mean
        over every value the round's clients recorded (NaN in a round without any)."""
        return []

    def client_report(self, a) -> dict:
        """Extra facts sent with the client's update to ``fed_aggregate`` (``ClientUpdate.report``)."""
        return {}

    # ----------------------------------------------------------------- server hooks
    def server_step(self, server, batches):
        """Train the server side on one group step; return (grads, losses) per client.

        ``server`` is the :class:`raysfl.runtime.server_actor.ServerState` (model,
        optimizer, per-client models); ``batches`` a list of (client, cut, x, y). An
        algorithm whose ``protocol.server_reply`` has "outputs" returns a third dict, {client: server-side
        outputs for its batch}, sent back with the gradient.
        """
        if self.protocol.per_client_server:
            out = per_client_server_step(server.client_models, server.client_opts, batches)
            if self.cfg.grad_angles:  # each client's own copy holds its gradient right after its step
                grads = [torch.cat([p.grad.reshape(-1) for p in server.client_models[c].part(cut, server.model.num_blocks)
                                    .parameters() if p.grad is not None]) for c, cut, _, _ in batches]
                record_gradient_angle(server, torch.stack(grads))
            return out
        if self.cfg.grad_angles and len({b[1] for b in batches}) == 1:
            record_gradient_angle(server, per_client_gradients(server.model, batches)[0])
        return shared_server_step(server.model, server.opt, batches)

    def server_metric_names(self) -> list[str]:
        """Metric columns the server step fills with ``server.record(name, value)`` (round
        means over steps and servers; NaN in a round without them). Default: the mean
        pairwise angle of the clients' server-side gradients when ``--grad-angles`` is on."""
        return ["grad_angle_deg"] if self.cfg.grad_angles else []

    def server_weights(self, server, weights: dict[int, float]) -> dict[int, float] | None:
        """At the end of a round on each server: the aggregation weight of each of its clients
        (``weights``: their sample counts). Return None to keep sample weighting (the
        default); an algorithm that returns weights (BESplit's EA, eq. 10) has them used for
        this server's per-client server-side models, reported as ``agg_weight`` in
        ``clients.parquet`` and handed to the fed server (``fed.round_weights``)."""
        return None

    def server_updates_per_step(self) -> int:
        """Optimizer updates the server makes per received batch (for FLOP accounting)."""
        return 1

    # ----------------------------------------------------------------- fed hooks
    def fed_client_state(self, fed, client: int, cut: int) -> tuple[dict[str, np.ndarray] | None, bool]:
        """(state client ``client``, running blocks [0, ``cut``) this round, starts from, or None for the global model; whether
        receiving it costs a download). ``fed`` is the :class:`~raysfl.runtime.fed_actor.FedState`.
        Default: without client aggregation a client keeps its own model (no download)."""
        if not self.protocol.aggregate_clients and client in fed.own:
            return fed.own[client], False
        return None, True

    def fed_aggregate(self, fed, rnd: int, server_states: list[dict[str, np.ndarray]],
                      updates: list[ClientUpdate]) -> dict[str, np.ndarray] | None:
        """Merge round ``rnd``'s client updates and server-side states into ``fed``.

        Returns the state to load back into every server actor when the algorithm sets
        ``protocol.broadcast_servers`` (None otherwise).
        """
        if self.protocol.aggregate_clients:
            fed.global_state = self.aggregate(fed.global_state, updates)
        else:
            for u in updates:
                fed.own[u.client] = u.state
        for state in server_states:
            fed.global_state.update(state)
        return None

    def fed_evaluate(self, fed, evaluate_state) -> tuple[float, float, dict[str, float]]:
        """(test accuracy, test loss, extra metrics). ``evaluate_state(state)`` evaluates a
        full-model state dict. Without client aggregation: the mean over this round's
        participants of (own client-side model + global server side)."""
        if self.protocol.aggregate_clients or not fed.last_clients:
            acc, loss = evaluate_state(fed.global_state)
            return acc, loss, {}
        results = [evaluate_state({**fed.global_state, **fed.own.get(c, {})}) for c in fed.last_clients]
        return float(np.mean([a for a, _ in results])), float(np.mean([l for _, l in results])), {}

    def client_model_state(self, fed, client: int) -> dict[str, np.ndarray]:
        """The full model client ``client`` would run for inference, as a state dict: the global
        model, with the client's own client-side part where clients keep their own (PSL). Used
        for ``test_accuracy_local`` (its local test split, ``--local-test-fraction``)."""
        if self.protocol.aggregate_clients:
            return fed.global_state
        return {**fed.global_state, **fed.own.get(client, {})}

    def global_model_state(self, fed) -> dict[str, np.ndarray] | None:
        """The trained global model as one full state dict (``RunResult.model()``, ``raysfl
        export``), or None where the algorithm has no single global model. Default: the fed
        server's global model where every client runs it (clients aggregated and
        ``client_model_state`` not overridden); None where clients run models of their own
        (PSL's and GAPSL's own client sides, FLEX-SFL's cluster models): their models are
        ``client_model_state``."""
        if self.protocol.aggregate_clients and type(self).client_model_state is Algorithm.client_model_state:
            return fed.global_state
        return None

    def aggregate(self, global_state: dict[str, np.ndarray],
                  updates: list[ClientUpdate]) -> dict[str, np.ndarray]:
        """New global client-side state from this round's client updates (FedAvg weights)."""
        if not self.protocol.aggregate_clients or not updates:
            return global_state
        return weighted_average([(u.state, u.weight) for u in updates], base=global_state)
