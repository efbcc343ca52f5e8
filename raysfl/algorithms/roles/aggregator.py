"""The aggregator: the algorithm's role on the fed actor (SplitFed's by default).

It holds the global model (one full state dict, every block), the state each client keeps
between rounds (``own``: PSL's client-side models, parked modules of the clients' own, ...),
and the algorithm's own state (``self.state``, a dataclass), all plain NumPy and
checkpointed as a whole. It decides what each client starts a round from, merges the
round's client updates and server-side states, and evaluates.

:class:`OwnModels` is parallel split learning's: every client keeps its own client-side
model (nothing is uploaded or averaged), and the reported accuracy is the mean over the
round's participants of their own models (:func:`evaluate_own_models`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from raysfl import objective
from raysfl.aggregation import UpdateSum, weighted_average
from raysfl.algorithms.roles.context import ClientUpdate, FederationContext
from raysfl.own_states import OwnStates
from raysfl.algorithms.roles.records import Recorder
from raysfl.state_shapes import check_global_state

# why a client that trained in a round has no update in its aggregation (Aggregator.aggregate's failures):
# its actor or server died, or it lost its server's answer; it missed the real-time deadline;
# the simulated clock's deadline (--sim-deadline-s) dropped it
FAILURES = ("failed", "late", "past_sim_deadline")

# what evaluate_own_models adds to the test accuracy (extra columns)
OWN_MODEL_METRICS = ["test_accuracy_avg_client", "test_accuracy_label_mix", "own_class_share", "eval_test_share"]


def block_of(key: str) -> int:
    return int(key.split(".")[1])


class Aggregator(Recorder):
    """FedAvg of the client-side models (weighted by samples), the servers' states merged in."""

    state_cls: ClassVar[type | None] = None  # the role's own state (a dataclass; None: none)
    late_updates: ClassVar[bool] = False  # updates that miss the real-time deadline join the next round's
                                          # aggregation (False: they are dropped)
    keeps_updates: ClassVar[bool] = False  # own[c] = u.state, the next start: its client actor may keep it too
                                           # (--client-bank; raysfl.runtime.resident)

    def __init__(self, cfg, ctx: FederationContext | None, shared, global_state: dict[str, np.ndarray]):
        self.cfg, self.ctx, self.shared, self.params = cfg, ctx, shared, cfg.algo_params
        self.global_state = global_state
        self.own: dict[int, dict[str, np.ndarray]] = {}  # per-client state kept between rounds
        self.last_clients: list[int] = []                 # this round's aggregated participants
        self.round_weights: dict[int, float] = {}         # this round's server-chosen weights (ServerSide.weights)
        self.metrics: dict[str, list[float]] = {}         # this round's figures (``record``)
        self.state = self.state_cls() if self.state_cls is not None else None

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """Extra columns it fills with :meth:`record` (while it aggregates: every round; while it
        evaluates: NaN in rounds without evaluation) or with :meth:`evaluate`'s extras."""
        return []

    # ----------------------------------------------------------------- a round
    def client_start(self, client: int, cut: int) -> tuple[dict[str, np.ndarray] | None, bool]:
        """(the state client ``client``, holding blocks [0, ``cut``) this round, starts from --
        None for the global model --, whether receiving it costs a download)."""
        return None, True

    def prefix_with_own(self, client: int, cut: int) -> dict[str, np.ndarray]:
        """The global model's blocks [0, ``cut``) plus the client's own parked state (SuperSFL's
        classifier, BESplit's auxiliary model), for :meth:`client_start`."""
        state = {k: v for k, v in self.global_state.items() if block_of(k) < cut}
        state.update(self.own.get(client, {}))
        return state

    @classmethod
    def takes_sums(cls) -> bool:
        """Whether the round's updates may come summed by their client actors (``UpdateSum``,
        ``--update-sums``, ours): where the aggregation is this class's FedAvg unchanged -- a
        role that overrides :meth:`aggregate` or :meth:`average`, keeps updates or takes late
        ones sees every client's :class:`ClientUpdate`."""
        return (cls.aggregate is Aggregator.aggregate and cls.average is Aggregator.average
                and not cls.keeps_updates and not cls.late_updates)

    @classmethod
    def hands_servers_state(cls) -> bool:
        """Whether its :meth:`aggregate` may return a state every server adopts (FLEX-SFL's w_e,
        SuperSFL's super-network): any but the base's FedAvg and :class:`OwnModels`', which
        return None. A round submitted behind the aggregation (``--run-ahead``) holds the
        servers' first calls until it is done where it may."""
        return cls.aggregate not in (Aggregator.aggregate, OwnModels.aggregate)

    @classmethod
    def update_weight(cls, u: ClientUpdate) -> float:
        """An update's weight in :meth:`average`'s FedAvg: its samples (or ``--aggregation-weights``);
        client actors that sum updates weight them with it too."""
        return u.weight

    def aggregate(self, rnd: int, server_states: list[dict[str, np.ndarray]], updates: list[ClientUpdate],
                  failures: dict[int, str]) -> dict[str, np.ndarray] | None:
        """Merge round ``rnd``'s client updates and server-side states. ``failures``: the
        clients that trained this round without an update in ``updates``, and why (``FAILURES``:
        ``failed``, ``late``, ``past_sim_deadline``), as Flower's ``aggregate_fit`` receives
        them. Returns the state every server adopts (FLEX-SFL's w_e, SuperSFL's
        super-network), or None."""
        self.global_state = self.average(self.global_state, updates)
        for state in server_states:
            self.global_state.update(state)
        return None

    def average(self, global_state: dict[str, np.ndarray], updates: list[ClientUpdate]) -> dict[str, np.ndarray]:
        """New global client-side state from the updates (FedAvg: weighted by :meth:`update_weight`;
        an :class:`UpdateSum` is several clients' updates summed, where :meth:`takes_sums`)."""
        if not updates:
            return global_state
        return weighted_average([u if isinstance(u, UpdateSum) else (u.state, self.update_weight(u)) for u in updates],
                                base=global_state)

    def evaluate(self, ev) -> tuple[float, float, dict[str, float]]:
        """(test accuracy, test loss, extra columns) of what the paper evaluates: the global model.
        ``ev`` is the fed actor's evaluator (``ev(state)``, ``ev.module(m)``, ``ev.local(m, c)``,
        ``ev.for_client(m, c)``, and ``ev.shares(clients)`` to score many per-client models at a
        fixed cost, with ``with ev.held():`` around a run of passes of ``ev.model`` loaded in turn
        by ``ev.load``, so that its mode and layout are set once for all of them;
        raysfl.runtime.fed_actor.Evaluator)."""
        acc, loss = ev(self.global_state)
        return acc, loss, {}

    def client_model(self, client: int) -> dict[str, np.ndarray]:
        """The full model client ``client`` runs for inference (``test_accuracy_local``, its local
        test split; ``RunResult.client_models``)."""
        return self.global_state

    def local_test_clients(self, clients: list[int]) -> list[int]:
        """Of the clients with a local test split, those that have a model to test."""
        return clients

    def global_model(self) -> dict[str, np.ndarray] | None:
        """The trained global model as one state dict (``RunResult.model()``, ``raysfl export``),
        or None where clients run models of their own (:meth:`client_model`)."""
        return self.global_state

    # ----------------------------------------------------------------- snapshots and checkpoints
    def get_state(self) -> dict:
        """The state to go back to. Where ``own`` is an :class:`OwnStates` (the fed server's),
        as its manifest: the states changed since the last snapshot by value, the others by the
        names of their files (raysfl.own_states)."""
        own = self.own.manifest() if isinstance(self.own, OwnStates) else self.own
        return {"global": self.global_state, "own": own, "last_clients": self.last_clients,
                "extra": dataclasses.asdict(self.state) if self.state is not None else {}}

    def load_state(self, d: dict) -> None:
        check_global_state(d["global"], self.global_state)  # one plain line for a checkpoint that does not fit
        if isinstance(self.own, OwnStates):
            self.own.load(d["own"])
        else:
            self.own = d["own"]
        self.global_state, self.last_clients = d["global"], d["last_clients"]
        if self.state_cls is not None:
            self.state = self.state_cls(**(d.get("extra") or {}))


class OwnModels(Aggregator):
    """Every client keeps its own client-side model (PSL, EPSL, GAPSL)."""

    keeps_updates = True

    @classmethod
    def columns(cls, cfg) -> list[str]:
        """OWN_MODEL_METRICS less what the run's loss cannot give: no accuracy, no
        averaged-client accuracy; real-valued targets, no label mix or own-class share."""
        loss = objective.get_loss(cfg.loss)
        return [k for k in OWN_MODEL_METRICS
                if (k != "test_accuracy_avg_client" or loss.has_accuracy)
                and (k not in ("test_accuracy_label_mix", "own_class_share") or loss.targets == "classes")]

    def client_start(self, client, cut):
        if client in self.own:
            return self.own[client], False
        return None, True

    def aggregate(self, rnd, server_states, updates, failures):
        for u in updates:
            self.own[u.client] = u.state
        for state in server_states:
            self.global_state.update(state)
        return None

    def evaluate(self, ev):
        return evaluate_own_models(self, ev)

    def client_model(self, client):
        return {**self.global_state, **self.own.get(client, {})}

    def local_test_clients(self, clients):
        return [c for c in clients if c in self.own] if self.own else clients

    def global_model(self):
        return None


def evaluate_own_models(agg: Aggregator, ev) -> tuple[float, float, dict[str, float]]:
    """Test accuracy when every client keeps its own client-side model (PSL, EPSL, GAPSL).

    The reported ``test_accuracy`` (and loss) is the mean, over the round's participants, of
    each client's *composite* model -- its own client-side part followed by the shared
    server side -- on the global test set. GAPSL's paper does not say how it combines test
    accuracy across devices; this is raysfl's reading. Beside it (``OWN_MODEL_METRICS``):

    * ``test_accuracy_avg_client``: one model whose client-side part is the participants'
      client-side models averaged (weighted by their training sizes) *for evaluation only*
      -- what client aggregation would have given at this point, never trained on;
    * ``test_accuracy_label_mix``: each composite model's global-test accuracy with every
      class weighted by its client's training label mix, averaged over clients (how well
      each client serves its own distribution);
    * ``own_class_share``: the share of each composite model's global-test predictions that
      fall in its client's own classes, averaged (1 = it predicts only what it trains on).

    * ``eval_test_share``: the share of the test set each composite model was scored on. With
      more participants than ``--eval-passes``, each is scored on a seeded, class-stratified
      share of it, so that evaluation costs that many test passes whatever the number of
      clients (ours; the means above are then estimates, exact at share 1).

    With ``--local-test-fraction`` the runtime adds ``test_accuracy_local`` (each client's
    composite model on its own held-out samples).
    """
    nan = float("nan")
    if not agg.last_clients:
        acc, loss = ev(agg.global_state)
        return acc, loss, dict.fromkeys(OWN_MODEL_METRICS, nan)
    seen, rows = [], ev.shares(agg.last_clients)
    with ev.held():  # one module, its mode and layout set once for every client's pass
        for c in agg.last_clients:
            ev.load(agg.global_state, agg.own.get(c, {}))  # copies only the client-side part after the first
            seen.append(ev.for_client(ev.model, c, rows[c]))
    sizes = ev.views.histograms.sum(axis=1)
    owned = [(agg.own[c], float(sizes[c])) for c in agg.last_clients if c in agg.own]
    with ev.aside():  # a model for comparison, not the one reported: not in the metrics of your own
        avg = ev(weighted_average(owned, base=agg.global_state))[0] if owned else nan
    return (float(np.mean([r["accuracy"] for r in seen])), float(np.mean([r["loss"] for r in seen])),
            {"test_accuracy_avg_client": float(avg),
             "test_accuracy_label_mix": float(np.mean([r["label_mix"] for r in seen])),
             "own_class_share": float(np.mean([r["own_class_share"] for r in seen])),
             "eval_test_share": ev.test_share})
