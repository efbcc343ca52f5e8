"""The federation: a run's actors and the actor calls of one round.

:mod:`raysfl.runtime.rounds` decides what a round does (plan, faults, retries, metrics);
this module carries it out over the actors: dispatch models -> local steps -> aggregate ->
evaluate.

A local step is a group exchange: every client actor forwards its active clients' batches
in ONE call, every server receives the smashed batches routed to it in ONE call, and the
gradients go straight back to the client actors. The driver only wires ObjectRefs
together: it submits a whole round of calls without waiting and then fetches the small
per-client statistics and the evaluation -- no tensor passes through it.

Faults: results cross actor boundaries as *lists* of ObjectRefs, which each receiver
fetches itself (:mod:`raysfl.runtime.refs`), so a dead or late actor costs only its own
clients and the round goes on with the survivors. Actors restart (``--max-restarts``);
the driver notices a restart by the actor's incarnation id at the next round and puts a
server or fed server back to the last checkpointed state (:meth:`Federation.recover`).
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from raysfl.algorithms.roles import Wiring
from raysfl.algorithms.roles.aggregator import FAILURES
from raysfl.data import landing
from raysfl.errors import ConfigError, RunFailed
from raysfl.models.blob import ModelBlob
from raysfl.runtime.client_actor import ClientActor
from raysfl.runtime import node_faults, pool
from raysfl.runtime.fed_actor import ClientViews, FedActor
from raysfl.runtime.placement import actor_options, host_resources, reserve, role_resources
from raysfl.runtime.pool import ActorSet
from raysfl.runtime.planning import ClientPlan
from raysfl.runtime.refs import DEAD, LATE, alive_within, fetch, is_death, ping_all, ping_until_alive
from raysfl.runtime.resident import KeptMirror
from raysfl.runtime.role_host import FED, RoleHandle, RoleHost, concurrency_groups, server_role
from raysfl.runtime.server_actor import ServerActor
from raysfl.transport import ClientRoundStats


@dataclass
class RoundResult:
    """What the driver learnt from one pass of a round (no tensors): the facts the actors
    reported, and -- decided in one place, :func:`raysfl.runtime.rounds.classify` -- which
    clients failed and which were late."""

    stats: dict[int, ClientRoundStats]
    failed: set[int] = field(default_factory=set)       # clients whose actor or server died, or lost their server
    late: set[int] = field(default_factory=set)         # clients dropped at the real-time deadline
    dead_clients: set[int] = field(default_factory=set)  # client actor indices that died
    dead_servers: set[int] = field(default_factory=set)
    late_actors: set[int] = field(default_factory=set)   # client actors whose results missed the round deadline
    fed_restarted: bool = False
    restarted: int = 0  # servers Ray restarted during the round (put back to the snapshot)
    server_metrics: dict[str, float] = field(default_factory=dict)  # round means of the server roles' records
    aggregator_metrics: dict[str, float] = field(default_factory=dict)  # ... and of the aggregator's, aggregating


@dataclass
class RoundInFlight:
    """A round submitted to the actors and not yet aggregated: what :meth:`Federation.aggregate`
    needs to finish it."""

    rnd: int
    result: RoundResult
    updates: list = field(default_factory=list)        # (client actor, ref of its updates)
    server_states: list = field(default_factory=list)  # one ref per server
    sync: bool = True                                   # the servers' states are aggregated this round
    agg_weights: dict = field(default_factory=dict)     # the weight each client's server chose (BESplit's EA)
    carried: list | None = None  # late updates to keep for the next round (None: this pass's own)

    def on_time(self) -> list:
        return [u for a, u in self.updates if a not in self.result.late_actors]

    def late_updates(self) -> list:
        """Updates of client actors that missed the round's deadline (taken next round by
        aggregators that want them); a simulated-clock replay keeps its first pass's."""
        if self.carried is not None:
            return self.carried
        return [u for a, u in self.updates if a in self.result.late_actors]


@dataclass
class Submitted:
    """A round's calls, submitted and not yet waited for (:meth:`Federation.submit_round`):
    what :meth:`Federation.collect_round` needs to wait for them and read their facts."""

    flight: RoundInFlight
    wiring: Wiring
    markers: list          # per step, the refs that show it done
    stats_refs: list       # per client actor of the round, its end_round's stats
    stats_actor: list      # ... and which client actor it is
    server_stats: list     # per server, its end_round's stats
    server_metrics: list   # ... and the round means of its role's records
    crashed: list          # refs of the kills at the round's start (fetched: DEAD, as meant)
    later: list            # kills after a step, injected while the round runs
    kills: list            # every kill of the round
    deadline: float | None

    def refs(self) -> list:
        """Every ref of the round whose end the driver waits for."""
        return [*self.wiring.aux, *self.stats_refs, *self.server_stats, *self.server_metrics,
                *[r for step in self.markers for r in step]]


def failures(res: RoundResult, aggregated: list[int] | None) -> dict[int, str]:
    """The round's clients that trained without an update in its aggregation, and why (one of
    the aggregator's ``FAILURES``): its actor or server died or it lost its server's answer
    (``failed``), it missed the real-time deadline (``late``), or the simulated deadline
    dropped it (``past_sim_deadline``)."""
    failed, late, past_sim_deadline = FAILURES
    keep = set(res.stats) if aggregated is None else set(aggregated)
    out = {c: failed for c in res.failed}
    out.update({c: late for c in res.late})
    out.update({c: past_sim_deadline for c in res.stats if c not in keep and c not in out})
    return dict(sorted(out.items()))


def step_window(cfg) -> float | None:
    """How long (real seconds) a server step waits for the other clients' smashed data once the
    first batch of the step is in: ``--step-deadline-s``, else a quarter of
    ``--round-deadline-s`` (so a straggler costs the others a quarter of the round at most),
    else no limit."""
    if cfg.step_deadline_s:
        return cfg.step_deadline_s
    return cfg.round_deadline_s / 4 if cfg.round_deadline_s else None


def _as_list(refs, n: int) -> list:
    return [refs] if n == 1 else list(refs)


class SnapshotLost(RunFailed):
    """A confirmed snapshot (a round's state, in Ray's object store) could not be fetched: the
    run stops rather than checkpoint or restore another round's state under its name."""


class FedServerLost(Exception):
    """The fed server (or a single-server round's server) died during a round: the round's
    aggregation is lost (retry it). ``counted``: the death is already in the round's failures."""

    def __init__(self, what: str, counted: bool = False):
        super().__init__(what)
        self.counted = counted


def actor_shape(cfg, num_actors: int, num_servers: int) -> tuple:
    """What makes a run's actors reusable by another run (:mod:`raysfl.runtime.pool`): how many of
    each role, their resources and placement, their restart budget; last, the CPUs they hold."""
    res = {kind: tuple(sorted(role_resources(cfg, kind).items())) for kind in ("client", "server", "fed")}
    r = cfg.resources
    cpus = (num_actors * dict(res["client"]).get("CPU", 0.0) + num_servers * dict(res["server"]).get("CPU", 0.0)
            + dict(res["fed"]).get("CPU", 0.0))
    return (num_actors, num_servers, res["client"], res["server"], res["fed"], r.client_placement, r.server_placement,
            cfg.max_restarts, r.co_host, cpus)


def start_actors(cfg, num_actors: int, num_servers: int, run_name: str) -> ActorSet:
    """A set of actors for a run of this shape: an idle one of the pool (a warm federation), or
    new ones (their processes start in the background; they are set up by :class:`Federation`).
    Idle sets of another shape are evicted first, so their resources are free."""
    import ray

    from raysfl.runtime.ray_noise import without_line

    shape = actor_shape(cfg, num_actors, num_servers)
    warm = pool.take(shape)
    if warm is not None:
        return warm
    pool.evict(keep=shape)
    # Ray's actor and placement-group names are cluster-wide, and pooled actors keep theirs while
    # they serve later runs: a suffix keeps a second run of the same name (a sweep's runs at once)
    # from colliding with them (cluster/chaos.py asks each actor which run it serves)
    tag = f"{run_name}.{uuid.uuid4().hex[:6]}"
    groups = reserve(cfg, num_actors, num_servers, tag)  # fails here if the cluster is too small
    names = []

    def spawn(remote_cls, role: str, res: dict, pg, bundle: int, *args):
        names.append(f"raysfl:{tag}:{role}")
        return remote_cls.options(name=names[-1], max_restarts=cfg.max_restarts, max_task_retries=0,
                                  **actor_options(res, pg, bundle)).remote(*args, res.get("GPU", 0.0))

    with without_line():
        clients = [spawn(ray.remote(ClientActor), f"client-{i}", role_resources(cfg, "client"), groups[0], i, i)
                   for i in range(num_actors)]
        if cfg.resources.co_host == "on":  # the servers and the fed server in one process
            host = spawn(ray.remote(concurrency_groups=concurrency_groups(num_servers))(RoleHost), "host",
                         host_resources(cfg, num_servers), groups[1], 0, num_servers)
            names += names[-1:] * num_servers  # each server's actor and the fed server's is the host
            servers = [RoleHandle(host, server_role(j)) for j in range(num_servers)]
            return ActorSet(shape, clients, servers, RoleHandle(host, FED), tuple(groups), names, pool.session_id(),
                            processes=clients + [host])
        server = role_resources(cfg, "server")
        servers = [spawn(ray.remote(ServerActor), f"server-{j}", server, groups[1], j, j) for j in range(num_servers)]
        fed = spawn(ray.remote(FedActor), "fed", role_resources(cfg, "fed"), groups[1], num_servers)
    return ActorSet(shape, clients, servers, fed, tuple(groups), names, pool.session_id())


def set_up(calls) -> list[str]:
    """Run the actors' ``setup`` calls (each a thunk) and wait for them: their incarnation ids. A
    setting an actor refuses where it runs (a node whose ``--data-root`` lacks the data set,
    :mod:`raysfl.data.landing`) is the one line it raised, not Ray's traceback around it."""
    import ray

    try:
        return ray.get([call() for call in calls])
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, ConfigError):
            raise ConfigError(str(e.cause)) from None
        raise


class Federation:
    """The actors of one run and the round protocol over them."""

    def __init__(self, cfg, spec, planner, ctx, shared, dataset, parts: list[np.ndarray], num_actors: int,
                 run_name: str = "run", local_tests: list[np.ndarray] | None = None, *, model,
                 actors: ActorSet | None = None, on_ready=None):
        """Set the run's actors up (``actors``: started by :func:`start_actors`, possibly
        while the driver was still preparing; started here otherwise). Actors are named
        ``raysfl:<run>:client-<i>``, ``...:server-<j>`` and ``...:fed`` after the run that started
        them, so operators (and tests) can find them with ``ray.get_actor``.

        ``spec``: the algorithm (its roles are built in the actors from ``cfg``, ``ctx`` and the
        planner's ``shared`` facts); ``model``: the run's initial :class:`~raysfl.models.SplitModel`
        (a zoo model built from the seed, or your own); every actor starts from a copy of this
        object, never from a name, like the data set. ``on_ready(up, total)`` hears how many of
        the actors' processes are up while they start."""
        import ray

        from raysfl.runtime.ray_noise import without_line

        self.cfg, self.spec, self.planner, self.num_actors = cfg, spec, planner, num_actors
        self.run_name = run_name
        self.run_dir = None  # where the run's checkpoints are (the driver sets it): kept states to fall back on
        self.checkpoints_written = lambda: None  # waits for a checkpoint being written (the driver sets it;
        # runtime/checkpoint_writer.py): before anything changes the kept-state files it may be linking
        self.exchange = planner.exchange
        self.num_blocks = ctx.num_blocks
        self.actors = actors or start_actors(cfg, num_actors, planner.servers, run_name)
        self.clients, self.servers, self.fed = self.actors.clients, self.actors.servers, self.actors.fed
        if on_ready is not None:  # say how the start goes (processes: Ray's worker, torch, raysfl)
            pending = [a.ping.remote() for a in self._all()]
            total = len(pending)
            while pending:
                _, pending = ray.wait(pending, num_returns=1, timeout=1.0, fetch_local=False)
                on_ready(total - len(pending), total)
        # loaded once, shared; kept alive for actor restarts. A file-backed set on a cluster: the set
        # to read on each actor's node instead (raysfl.data.landing)
        self.ds_ref = ray.put(landing.for_actors(dataset, cfg.data_root, cfg.validation))
        self.model_ref = ray.put(ModelBlob(model))  # likewise (sealed: no tensor crosses a Ray boundary)
        views = ClientViews(local_tests or [], ctx.histograms)
        parts_of = [{k: parts[k] for k in range(len(parts)) if k % num_actors == i} for i in range(num_actors)]
        # what each actor is set up with (again after Ray restarts it: it comes back bare)
        self._setup_calls = (
            [(lambda a=a, i=i: a.setup.remote(run_name, cfg, spec, ctx, shared, self.ds_ref, parts_of[i],
                                              self.model_ref)) for i, a in enumerate(self.clients)]
            + [(lambda a=a: a.setup.remote(run_name, cfg, spec, ctx, shared, dataset.input_shape, self.model_ref))
               for a in self.servers]
            + [lambda: self.fed.setup.remote(run_name, cfg, spec, ctx, shared, self.ds_ref, views, self.model_ref)])
        with without_line():  # Ray's warning about object-store arguments: the refs live as long as we do
            self.incarnations = set_up(self._setup_calls)
        self._first = list(self.incarnations)  # an actor Ray restarted during the run is not pooled
        self._snap: dict | None = None  # the state to go back to after a failure: values ...
        self._snap_refs: dict | None = None  # ... or the refs of a snapshot not fetched yet (snapshot_at)
        self._before: tuple | None = None  # (refs, round) of the snapshot before one not yet confirmed
        self.snapshot_round: int | None = None  # the round the snapshot is the end of (0: the start)
        self._clean = False  # the last round saw no death, restart or straggler: the next needs no ping
        self.died: set[int] = set()  # client actors that died last round (restarting now)
        self.away: set[int] = set()  # ... and of those, ones Ray has not placed again (recover)
        self._carry: list = []  # late update refs waiting for the next aggregation (the aggregator's late_updates)
        self.late_applied = 0
        self._deferred: int | None = None  # a round whose evaluation waits for the next round's dispatch (--eval-overlap)
        self._deferred_ref = None  # ... its evaluation, once submitted
        self.kept = KeptMirror(self.actor_of)  # what each client actor keeps of its clients' updates (resident.py)
        # --server-stream: whether every server's step may take its senders one at a time (asked once)
        self.streams = (cfg.resources.server_stream == "on" and bool(self.servers)
                        and all(ray.get([s.streams.remote() for s in self.servers])))
        # --update-sums: whether client actors may send their clients' updates summed (rounds without real-time
        # deadlines; the simulated one is fine: the pass it aggregates includes every client that ran and did not
        # fail, rounds.without_sim_stragglers)
        self.sums = cfg.resources.update_sums == "on" and spec.aggregator.takes_sums()

    def warm_up(self) -> None:
        """Every actor's first forward/backward, before round 1 (all at once)."""
        import ray

        ray.get([a.warm_up.remote(self.cfg.batch_size) for a in self._all()])

    @property
    def snapshot_round(self) -> int | None:
        """The round the snapshot is the end of (0: the start); a pending snapshot counts."""
        return self._snap_round_pending if self._snap_refs is not None else self._snap_round

    @snapshot_round.setter
    def snapshot_round(self, rnd: int | None) -> None:
        self._snap_round = rnd

    @property
    def ended_clean(self) -> bool:
        """The last round saw no death, restart or straggler, and no client actor is away."""
        return self._clean and not self.died and not self.away

    @property
    def late_updates(self) -> bool:
        """The aggregator takes updates that missed the real-time deadline in the next round."""
        return self.spec.aggregator.late_updates

    def placement(self) -> list[dict]:
        """Where each actor runs: role, actor name, node, GPU ids, device (``placement.json``)."""
        import ray

        roles = ([f"client-{i}" for i in range(len(self.clients))] + [f"server-{j}" for j in range(len(self.servers))]
                 + ["fed"])
        here = [i for i in range(len(roles)) if i not in self.away]  # an actor not placed again is nowhere
        where = ray.get([self._all()[i].where.remote() for i in here])
        return [{"role": roles[i], "actor": self.actors.names[i], **loc} for i, loc in zip(here, where)]

    def _all(self) -> list:
        return self.clients + self.servers + [self.fed]

    def actor_of(self, client: int) -> int:
        return client % self.num_actors

    def release(self, keep: bool = True) -> None:
        """The run is over: its actors drop it and wait in the pool for the next run of their
        shape (``keep``), or are killed (``keep=False``: after a failure, or when the pool is off)."""
        import ray

        if keep and not self.away and self.incarnations == self._first:  # a restarted actor has spent part of its restarts
            try:
                ray.get([a.teardown.remote() for a in self._all()], timeout=30)
                pool.give_back(self.actors)
                return
            except Exception:  # noqa: BLE001 - an actor that cannot drop the run is not reused
                pass
        self._remove_own_files()
        pool.destroy(self.actors)

    def _remove_own_files(self) -> None:
        """Actors killed, not torn down: delete the directory of the clients' kept states the
        last snapshot names, where it is on this node (raysfl.own_states)."""
        import shutil

        from raysfl.own_states import OwnManifest

        try:
            own = ((self.snapshot or {}).get("fed") or {}).get("own")
        except Exception:  # noqa: BLE001 - no snapshot at hand: nothing known to delete
            return
        if isinstance(own, OwnManifest) and own.directory and own.directory.startswith(tempfile.gettempdir()):
            shutil.rmtree(own.directory, ignore_errors=True)

    # ------------------------------------------------------------------ failures
    def _set_up_again(self, indices: list[int]) -> None:
        """Actors Ray restarted come back bare: set them up for this run again (indices into
        clients + servers + [fed])."""
        self.kept.forget([i for i in indices if i < len(self.clients)])
        if indices:
            set_up([self._setup_calls[i] for i in indices])

    # ------------------------------------------------------------------ snapshots
    def snapshot_at(self, rnd: int, after=None) -> None:
        """Keep the fed server's and servers' state at the end of round ``rnd`` to go back to. It
        is not fetched: the actors return it into Ray's object store (each after the round's
        calls it has queued, before the next round's), and the driver holds the refs; it is
        fetched only when needed (a checkpoint, a restore). Each actor also returns a small
        stamp, which :meth:`confirm_snapshot` fetches: a snapshot is that round's or none. A
        checkpoint being written is waited for first: the fed server's new manifest lets go of
        kept-state files the one before named, which that checkpoint may still be linking.
        ``after``: the round's aggregation, asked for and not yet answered (``--run-ahead``): the
        servers' states wait for it, since it hands them their merged state."""
        self.checkpoints_written()
        self._before = (self._snap_refs, self._snap_round_pending if self._snap_refs is not None else None)
        calls = [self.fed.stamped_state.options(num_returns=2).remote()]
        calls += [a.stamped_state.options(num_returns=2).remote(after) for a in self.servers]
        self._snap_refs = {"stamps": [stamp for stamp, _ in calls], "fed": calls[0][1],
                           "servers": [state for _, state in calls[1:]]}
        self._snap_round_pending = rnd

    def confirm_snapshot(self) -> None:
        """Check the pending snapshot before its round counts as done: every state came from the
        incarnation that ended the round (the one the round's closing ping and the aggregation
        saw). An actor that died or was restarted after that -- after the evaluation, during
        ``get_state`` -- took the round's state with it: the snapshot is dropped (the one before
        stays) and :class:`FedServerLost` is raised, so the round is redone from the round
        before rather than its loss going unseen (issue 45: a checkpoint that held round N-1's
        weights under round N's name)."""
        import ray

        if self._snap_refs is None:
            return
        expected = [self.incarnations[-1]] + self.incarnations[len(self.clients):-1]
        names = ["fed server"] + [f"server {j}" for j in range(len(self.servers))]
        try:
            stamps = ray.get(self._snap_refs["stamps"])
        except Exception as e:  # noqa: BLE001 - classified
            if not is_death(e):
                raise
            stamps = [None] * len(names)  # which one died: the retry's ping finds out
            what = "an actor died"
        else:
            lost = [n for n, st, inc in zip(names, stamps, expected) if st["incarnation"] != inc or not st["serving"]]
            what = f"the {', '.join(lost)} restarted" if lost else ""
        if what:
            rnd = self._snap_round_pending
            self.drop_unconfirmed()
            self._clean = False
            raise FedServerLost(f"{what} before giving round {rnd}'s state")
        self._before = None

    def drop_unconfirmed(self) -> None:
        """The snapshot asked for last, not confirmed (its round failed): the one before it is
        the state to go back to again -- its refs, where it was not fetched (on one node it is
        fetched only when needed), else the values fetched. Once a snapshot is confirmed, the
        one before is let go."""
        if self._before is not None:
            refs, rnd = self._before
            self._before = None
            self._snap_refs = refs
            if refs is not None:
                self._snap_round_pending = rnd

    @property
    def snapshot(self) -> dict | None:
        """The snapshot's values ({"round": r, "fed": state, "servers": [state, ...]}), fetched if
        need be. Fetching is retried; a snapshot that cannot be fetched is an error (a round's
        state is never silently replaced by the one before)."""
        import ray

        if self._snap_refs is not None:
            refs, rnd = self._snap_refs, self._snap_round_pending
            for attempt in range(3):
                try:
                    fed, *servers = ray.get([refs["fed"]] + refs["servers"])
                    break
                except Exception as e:  # noqa: BLE001 - classified
                    if not is_death(e):
                        raise
                    if attempt == 2:
                        self._snap_refs = None
                        raise SnapshotLost(f"the state of round {rnd} could not be fetched from the object "
                                           f"store ({type(e).__name__}); its actors' node may be gone") from None
                    time.sleep(0.5 * (attempt + 1))
            self._snap_refs = None
            self._snap, self.snapshot_round = {"round": rnd, "fed": fed, "servers": servers}, rnd
        return self._snap

    @snapshot.setter
    def snapshot(self, state: dict | None) -> None:
        self._snap, self._snap_refs, self._before = state, None, None

    def recover(self) -> dict[str, int]:
        """Before a round: find actors Ray restarted, set them up again and put servers / the fed
        server back to the last snapshot. Returns counts {"restarts": n}; client actors not back are
        :attr:`away`.
        A client actor that died is waited for as long as placing an actor may take
        (``--placement-timeout-s``) the first time, and not at all after that: one Ray cannot place
        again (its node lost, no room left on the others) is "away", and its clients sit the
        round out until a node with room takes it (ours, docs/reliability.md). A permanently dead
        actor raises. After a round that ended clean (no death, restart or straggler: its closing
        ping saw every server and the fed server as they were) there is nothing to look for."""
        import ray

        if self._clean and not self.died:
            return {"restarts": 0}
        n_clients, n_servers = len(self.clients), len(self.servers)
        actors = self._all()
        others = [i for i in range(len(actors)) if i not in self.died]
        pings = {i: actors[i].ping.remote() for i in others}
        # A client actor still busy with a late straggler is not waited for (checked next round)
        busy_ok = [pings[i] for i in others if i < n_clients]
        ready, _ = ray.wait(busy_ok, num_returns=len(busy_ok), timeout=0.25, fetch_local=True)
        ready = set(ready)
        now = list(self.incarnations)
        for i in others:
            if i >= n_clients or pings[i] in ready:
                now[i] = self._incarnation(actors[i], pings[i])  # raises if an actor is gone for good
        got, away = self._clients_back(self.died)  # client actors that died: restarting, or waiting for room
        for i, inc in got.items():
            now[i] = inc
        self.died, self.away = set(away), away
        restarted = [i for i, (a, b) in enumerate(zip(self.incarnations, now)) if a != b]
        self.incarnations = now
        self._set_up_again(restarted)
        loads = []
        for i in restarted:
            if n_clients <= i < n_clients + n_servers and self.snapshot is not None:
                j = i - n_clients
                loads.append(self.servers[j].load_state.remote(self.snapshot["servers"][j]))
            elif i == n_clients + n_servers and self.snapshot is not None:
                self.checkpoints_written()  # loading a manifest deletes the files it does not name
                loads.append(self.fed.load_state.remote(self.snapshot["fed"]))
        ray.get(loads)
        return {"restarts": len(restarted)}

    def _clients_back(self, indices) -> tuple[dict[int, str], set[int]]:
        """({index: incarnation} of the client actors ``indices`` that answer, the set of those
        that do not): each is given what is left of ``--placement-timeout-s`` (the time placing
        an actor may take), one already away a quarter of a second."""
        until = time.time() + self.cfg.resources.placement_timeout_s
        got, away = {}, set()
        for i in sorted(indices):
            inc = alive_within(self.clients[i], 0.25 if i in self.away else max(0.25, until - time.time()))
            if inc is None:
                away.add(i)
            else:
                got[i] = inc
        return got, away

    @staticmethod
    def _incarnation(actor, ref) -> str:
        import ray
        import ray.exceptions as rex

        try:
            return ray.get(ref)
        except rex.RayActorError:  # restarting (or dead for good: ping_until_alive raises)
            return ping_until_alive(actor)

    def restore_restarted_servers(self, incarnations: list[str]) -> int:
        """Right after a round: servers Ray restarted during it (``incarnations`` = their ids
        now) are set up again and go back to their last snapshot, not their fresh initial
        weights, before anything reads their state."""
        import ray

        n = len(self.clients)
        back = []
        for j, inc in enumerate(incarnations):
            if inc != self.incarnations[n + j]:
                self.incarnations[n + j] = inc
                back.append(j)
        self._set_up_again([n + j for j in back])
        if back and self.snapshot is not None:
            ray.get([self.servers[j].load_state.remote(self.snapshot["servers"][j]) for j in back])
        return len(back)

    def hold_snapshot(self) -> None:
        """Right after a round: by value (``--snapshot-refs off``, a cluster's default) the
        snapshot taken at the end of the round before is fetched into the driver, so that it
        outlives the node of the fed server that gave it. On one node (``on``) that node is the
        driver's: the snapshot is fetched only when needed (a restart, a rollback, a checkpoint),
        which a run without checkpoints (a tuning trial) never pays."""
        if self.cfg.resources.snapshot_refs != "on":
            self.snapshot  # noqa: B018 - the property fetches it

    def rollback(self) -> int:
        """Put every server and the fed server back to the snapshot (a round is retried).
        Returns how many actors were found restarted. Client actors Ray has not placed again
        are left :attr:`away` (the retry runs without their clients)."""
        n = len(self.clients)
        now = list(self.incarnations)
        now[n:] = ping_all(self.servers + [self.fed])  # waits for restarts
        got, away = self._clients_back(range(n))
        for i, inc in got.items():
            now[i] = inc
        self.died, self.away = (self.died - set(got)) | away, away
        restarted = [i for i, (a, b) in enumerate(zip(self.incarnations, now)) if a != b]
        self.incarnations = now
        if len(now) - 1 in restarted:  # a deferred evaluation went with the fed server: asked again, of the snapshot
            self._deferred_ref = None
        self._set_up_again(restarted)
        if self.snapshot is not None:
            self.load_state(self.snapshot)
        return len(restarted)

    def restore(self) -> int:
        """Put the servers and the fed server back to the snapshot, without waiting for the
        client actors: they hold nothing across rounds, and may still be busy with a straggler's
        work (a round that included nobody, a simulated-clock replay). Returns how many of them
        were found restarted."""
        n = len(self.clients)
        now = ping_all(self.servers + [self.fed])  # waits for restarts
        restarted = [n + i for i, (a, b) in enumerate(zip(self.incarnations[n:], now)) if a != b]
        self.incarnations[n:] = now
        self._set_up_again(restarted)
        if self.snapshot is not None:
            self.load_state(self.snapshot)
        return len(restarted)

    def kill(self, role: str, index: int, first: bool = False):
        """Fault injection: ``ray.kill`` one actor, letting Ray restart it; or, for role
        ``node``, remove the ``index``-th worker node holding the run's actors, every process on
        it (``runtime/node_faults.py``; Ray restarts its actors on the nodes left).

        ``first``: the round's calls are not sent yet. The actor is then asked to end its own
        process (:meth:`RunActor.crash`) ahead of them, so that it dies before any of the round's
        work; ``ray.kill`` at that point would race with the calls sent just after it (whether
        a killed client actor's first smashed data reached its server depended on timing).
        Returns that call's ref (None otherwise)."""
        import ray

        if role == "node":
            placed = self.placement()
            nodes = node_faults.worker_nodes(placed)
            if nodes:  # none left (every worker node already gone): nothing to remove
                node = nodes[index % len(nodes)]
                node_faults.kill_node(node)
                held = ", ".join(p["role"] for p in placed if p.get("node_id") == node)
                print(f"raysfl: fault: removed node {node} with {held}; Ray restarts them on the nodes left",
                      file=sys.stderr, flush=True)
            return
        _, actor = self._fault_target(role, index)
        if first and not isinstance(actor, RoleHandle):  # co-hosted roles go together: ray.kill, as before
            return actor.crash.remote()
        ray.kill(actor, no_restart=False)
        return None

    def _fault_target(self, role: str, index: int) -> tuple[tuple[str, int], object]:
        """(slot, actor handle) a fault of ``role`` (not a node) with ``index`` names: the slot is
        ("client", actor), ("server", index) -- the main server is server 0 -- or ("fed", 0)."""
        if role == "fed":
            return ("fed", 0), self.fed
        if role == "client":
            return ("client", index), self.clients[index]
        j = 0 if role == "server" else index
        return ("server", j), self.servers[j]

    def _crash_slot(self, role: str, index: int) -> tuple[str, int] | None:
        """Where a kill after a local step goes among the round's calls (:class:`Wiring`'s
        ``crashes``): ("client", actor) or ("server", index); None where the driver kills it
        after waiting for the step instead (a node, the fed server, which has no calls in a
        step, and a server that shares its process with other roles)."""
        if role == "node":
            return None
        slot, actor = self._fault_target(role, index)
        return None if slot[0] == "fed" or isinstance(actor, RoleHandle) else slot

    # ------------------------------------------------------------------ one round
    def run_round(self, rnd: int, plans: dict[int, ClientPlan], server_of: dict[int, int],
                  kills: list[tuple[str, int, int]] = (), deadline: float | None = None, on_step=None,
                  timed: bool = True) -> RoundInFlight:
        """Submit round ``rnd`` and collect its facts (aggregation is :meth:`aggregate`).

        ``kills`` = (role, actor index, after step) faults to inject; ``deadline`` (epoch s)
        drops clients whose results are not in by then; ``timed=False`` turns the step
        deadlines off too (a replay of a round's in-time clients, :mod:`raysfl.runtime.rounds`).
        """
        return self.collect_round(self.submit_round(rnd, plans, server_of, kills, deadline, timed), on_step)

    def submit_round(self, rnd: int, plans: dict[int, ClientPlan], server_of: dict[int, int],
                     kills: list[tuple[str, int, int]] = (), deadline: float | None = None, timed: bool = True,
                     after=None) -> Submitted:
        """Submit round ``rnd``'s calls (:meth:`run_round`'s first half). ``after``: the round
        before's aggregation, not yet answered (``--run-ahead``): the servers' first calls wait
        for it, since it hands them their merged state from the fed server's process."""
        at_start = [k for k in kills if k[2] == 0]
        crashed = [self.kill(role, index, first=True) for role, index, _ in at_start]  # before any of its calls
        turns = self.exchange.turns(list(plans))
        # after step S: sent among the round's calls, ahead of the actor's call for step S + 1
        # (Wiring.before), where the steps run once (not vanilla SL's turns) and the actor is its own
        exact: dict[tuple[str, int], tuple] = {}
        for k in sorted(kills, key=lambda k: k[2]):
            slot = self._crash_slot(k[0], k[1]) if k[2] > 0 and len(turns) == 1 else None
            if slot is not None and slot not in exact:
                exact[slot] = k
        later = [k for k in kills if k not in at_start and k not in exact.values()]
        window = step_window(self.cfg) if timed else None
        deadline = deadline if timed else None
        flight = RoundInFlight(rnd, RoundResult(stats={}))
        w = Wiring(self.clients, self.servers, stream=self.streams and window is None and deadline is None,
                   crashes={slot: k[2] for slot, k in exact.items()})
        for p in plans.values():  # clients whose late updates are taken finish their work
            p.deadline = None if self.late_updates else deadline
        weights = {c: float(p.samples if p.weight is None else p.weight) for c, p in plans.items()}
        for j, srv in enumerate(self.servers):
            mine = {c: p for c, p in plans.items() if server_of[c] == j and not p.local}
            w.aux.append(srv.begin_round.remote(
                {c: p.cut for c, p in mine.items()}, self.cfg.server_lr_at(rnd), deadline, rnd,
                {c: (self.actor_of(c), p.steps) for c, p in mine.items()}, window, after))
        stats_refs, stats_actor, markers = [], [], []
        # updates summed by server: the driver's verdict drops a dead server's clients together (rounds.classify)
        sum_by = ({c: -1 if p.local else server_of.get(c, -1) for c, p in plans.items()}
                  if self.sums and window is None and deadline is None else None)
        for turn in turns:  # SL: one client at a time
            u, st, actors, m = self._run_group(w, {c: plans[c] for c in turn}, server_of, rnd, sum_by)
            stats_refs += st
            stats_actor += actors
            markers += m
            if not self.exchange.hand_over(w, self.fed, rnd, u):
                flight.updates += list(zip(actors, u))
        for kind, i in [slot for slot in w.crashes if slot[0] == "client"]:  # an actor with no client this round
            w.before(kind, i)
        self._submit_deferred()  # a round nobody trains in: the evaluation goes now
        flight.sync = self.planner.sync_servers(rnd)
        server_stats, server_metrics = [], []
        for j, srv in enumerate(self.servers):
            w.before("server", j)  # a kill after a step this server never reached: before its end of the round
            state_ref, st_ref, m_ref = srv.end_round.options(num_returns=3).remote(weights, flight.sync)
            flight.server_states.append(state_ref)
            server_stats.append(st_ref)
            server_metrics.append(m_ref)
        return Submitted(flight, w, markers, stats_refs, stats_actor, server_stats, server_metrics, crashed, later,
                         list(kills), deadline)

    def collect_round(self, sub: Submitted, on_step=None) -> RoundInFlight:
        """Wait for a submitted round, injecting its later kills, and read its facts
        (:meth:`run_round`'s second half)."""
        import ray

        flight, w, markers, deadline, kills = sub.flight, sub.wiring, sub.markers, sub.deadline, sub.kills
        crashed, stats_refs, stats_actor = sub.crashed, sub.stats_refs, sub.stats_actor
        server_stats, server_metrics, rnd = sub.server_stats, sub.server_metrics, flight.rnd
        for role, index, step in sorted(sub.later, key=lambda k: k[2]):
            if step > 0 and markers:
                ray.wait(markers[min(step, len(markers)) - 1], num_returns=len(markers[min(step, len(markers)) - 1]),
                         timeout=None if deadline is None else max(0.0, deadline - time.time()), fetch_local=False)
            self.kill(role, index)
        for k, refs in enumerate(markers):  # progress: wait for each step without fetching it
            timeout = None if deadline is None else max(0.0, deadline - time.time())
            ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
            if on_step:
                on_step(k + 1, len(markers))
        result = flight.result
        fetch([ref for ref in crashed if ref is not None] + w.crashed)  # DEAD, as meant: fetched so Ray does not report it
        fetch(w.aux, deadline)  # re-raises a bug in begin_round & co (deaths/lateness are seen below)
        server_out = fetch(server_stats)  # servers stop waiting at the deadline themselves
        # the closing ping (below), asked for once the servers have ended their round, while the
        # client actors still end theirs: its round trip is off the path to the aggregation
        pings = [a.ping.remote() for a in self.servers + [self.fed]]
        client_out = fetch(stats_refs, deadline)
        per_server = [m for m in fetch(server_metrics) if m]
        result.server_metrics = {k: float(np.mean([m[k] for m in per_server if k in m]))
                                 for k in sorted({k for m in per_server for k in m})}
        result.dead_clients = {a for a, out in zip(stats_actor, client_out) if out is DEAD}
        result.late_actors = {a for a, out in zip(stats_actor, client_out) if out is LATE}
        self.died |= result.dead_clients
        self.kept.observe(rnd, [st for out in client_out if out and out is not DEAD and out is not LATE for st in out],
                          result.dead_clients | result.late_actors | self.died)
        result.dead_servers = {j for j, out in enumerate(server_out) if out is DEAD}
        for out in client_out + server_out:
            if not out:
                continue
            for st in out:
                if st.client in result.stats:
                    result.stats[st.client].merge(st)
                else:
                    result.stats[st.client] = st
        # a server or fed server that Ray restarted during the round lost its state: it counts as dead
        tail = ping_all(self.servers + [self.fed], pings)
        for j, inc in enumerate(tail[:-1]):
            if inc != self.incarnations[len(self.clients) + j]:
                result.dead_servers.add(j)
        result.fed_restarted = tail[-1] != self.incarnations[-1]
        result.restarted = self.restore_restarted_servers(tail[:-1])
        self.hold_snapshot()
        self._clean = not (kills or result.dead_clients or result.dead_servers or result.late_actors
                           or result.fed_restarted or result.restarted)
        flight.agg_weights = {c: st.agg_weight for c, st in result.stats.items() if st.agg_weight == st.agg_weight}
        return flight

    def abandon(self, sub: Submitted) -> None:
        """A round submitted ahead (``--run-ahead``) that will not count, since the round before
        it failed after all: its calls are waited for, unread, so that the retry's rollback and
        calls come after them; the next round looks at every actor again (:meth:`recover`)."""
        import ray

        refs = sub.refs()
        if refs:
            ray.wait(refs, num_returns=len(refs), fetch_local=False)
        self._clean = False
        self._deferred = self._deferred_ref = None  # asked of a round that does not count yet

    def aggregate(self, flight: RoundInFlight, aggregated: list[int] | None, evaluate: bool, void: bool = False,
                  defer: bool = False, then=None):
        """Aggregate the round's completed updates of the ``aggregated`` clients; evaluate.

        ``void``: the round included nobody; the servers and the fed server go back to the
        snapshot (the round's start state) and nothing is aggregated. Returns (acc, loss,
        extras) or None. Raises :class:`FedServerLost` if the fed server died (the caller rolls
        back and retries the round). ``defer``: the evaluation is not asked for now (None is
        returned); once the round counts, :meth:`defer_evaluation` leaves it to the next round.
        ``then(ref)``: called with the aggregation's ref once it is asked for, before its answer
        is waited for (``--run-ahead``: the snapshot and the next round go behind it).
        """
        import ray

        late_now = flight.late_updates() if self.late_updates else []
        if void:
            self.restore()
            self.late_applied = 0
            self._carry = late_now
            return self.evaluate(evaluate, flight.rnd)

        states = flight.server_states if flight.sync else []
        late = []
        if self._carry:  # earlier rounds' stragglers that have finished by now
            late, _ = ray.wait(self._carry, num_returns=len(self._carry), timeout=0, fetch_local=False)
        ok = self.fed.aggregate.remote(flight.rnd, aggregated, states, flight.on_time(), late, flight.agg_weights,
                                       self.servers if flight.sync else [], failures(flight.result, aggregated))
        eval_ref = self.fed.evaluate.remote(flight.rnd) if evaluate and not defer else None
        if then is not None:
            then(ok)
        try:
            self.late_applied, incarnation, flight.result.aggregator_metrics = ray.get(ok)
            result = ray.get(eval_ref) if eval_ref is not None else None
        except Exception as e:  # noqa: BLE001 - classified
            self._clean = False
            if is_death(e):
                raise FedServerLost(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
            raise
        if incarnation != self.incarnations[-1]:  # it aggregated, but Ray had restarted it: from fresh state
            self._clean = False
            raise FedServerLost("the fed server was restarted during the round")
        self._carry = late_now  # only once aggregation succeeded
        return result

    def defer_evaluation(self, rnd: int) -> None:
        """Round ``rnd`` (aggregated with ``defer``, snapshotted and confirmed) is evaluated by the
        next round's :meth:`run_round`, just after its first dispatch, so that the fed server
        evaluates while that round trains (``--eval-overlap``); :meth:`deferred_result` waits
        for it."""
        self._deferred, self._deferred_ref = rnd, None

    def _submit_deferred(self) -> None:
        """Ask the fed server for the deferred evaluation, once. Its calls run in the order they
        were asked for, so the evaluation sees the models as the round before left them: it
        comes after this round's dispatch (which reads them) and before any call that changes
        them (vanilla SL's hand-overs, the aggregation, a rollback's ``load_state``)."""
        if self._deferred is not None and self._deferred_ref is None:
            self._deferred_ref = self.fed.evaluate.remote(self._deferred)

    @property
    def deferred(self) -> int | None:
        """The round whose evaluation is deferred and not yet collected, or None."""
        return self._deferred

    def deferred_result(self, timeout: float | None = None):
        """The deferred round's evaluation, (acc, loss, extras), waited for (asked for now if it
        has not been). Raises :class:`FedServerLost` if the fed server died meanwhile: after the
        rollback that follows, the next :meth:`run_round` asks again, of the round's snapshot."""
        import ray

        self._submit_deferred()
        try:
            result = ray.get(self._deferred_ref, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - classified
            if is_death(e):
                self._deferred_ref, self._clean = None, False
                raise FedServerLost(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
            raise
        self._deferred = self._deferred_ref = None
        return result

    def evaluate(self, evaluate: bool, rnd: int):
        """Round ``rnd``'s evaluation without aggregation (a round that included nobody): (acc,
        loss, extras) or None."""
        import ray

        if not evaluate:
            return None
        try:
            return ray.get(self.fed.evaluate.remote(rnd))
        except Exception as e:  # noqa: BLE001 - classified
            if is_death(e):
                raise FedServerLost(str(e).splitlines()[0] if str(e) else type(e).__name__) from e
            raise

    @property
    def carrying(self) -> bool:
        """Late updates of earlier rounds wait to be aggregated (the aggregator's ``late_updates``)."""
        return bool(self._carry)

    def _run_group(self, w: Wiring, plans: dict[int, ClientPlan], server_of: dict[int, int], rnd: int,
                   sum_by: dict[int, int] | None = None):
        """Dispatch the group's start states, let the exchange wire its steps, and end its round
        on every client actor: (update refs, stats refs, client actors, step markers). ``sum_by``:
        {client: group} whose updates a client actor sums (``--update-sums``), or None."""
        by_actor: dict[int, dict[int, ClientPlan]] = {}
        for c, p in plans.items():
            by_actor.setdefault(self.actor_of(c), {})[c] = p
        actors = sorted(by_actor)
        dispatch = [{c: p.blocks for c, p in by_actor[i].items()} for i in actors]
        held = self.kept.claims(rnd, plans)
        models = _as_list(self.fed.dispatch.options(num_returns=len(actors)).remote(dispatch, held), len(actors))
        self._submit_deferred()  # the round before's evaluation, behind this dispatch and before anything that changes the models
        for i, m in zip(actors, models):
            w.aux.append(self.clients[i].begin_round.remote(by_actor[i], m))
        prev: dict[int, list] = {i: [] for i in actors}
        markers = self.exchange.steps(w, by_actor, server_of, prev)
        update_refs, stats_refs = [], []
        for i in actors:
            mine = None if sum_by is None else {c: sum_by[c] for c in by_actor[i]}
            w.before("client", i)  # a kill after a step its clients never reached: before its end of the round
            u, st = self.clients[i].end_round.options(num_returns=2).remote(prev[i], mine)
            update_refs.append(u)
            stats_refs.append(st)
        if not markers:
            markers.append(stats_refs)
        return update_refs, stats_refs, actors, markers

    def measure(self, batch: int) -> dict[int, tuple[float, float]]:
        """(memory GB, latency s) per virtual client, measured once by its client actor
        (clients sharing an actor share its measurement)."""
        import ray

        out = ray.get([a.probe.remote(self.servers[0], batch) for a in self.clients])
        return {k: (out[self.actor_of(k)]["memory_gb"], out[self.actor_of(k)]["latency_s"])
                for k in range(self.cfg.clients)}

    # ------------------------------------------------------------------ checkpoints
    def load_state(self, state: dict) -> None:
        import ray

        self.checkpoints_written()  # loading a manifest deletes the kept-state files it does not name
        servers = [s.load_state.remote(st) for s, st in zip(self.servers, state["servers"])]
        try:
            ray.get(self.fed.load_state.remote(state["fed"]))
        except ray.exceptions.RayTaskError as e:
            from raysfl.own_states import OwnStatesMissing
            from raysfl.own_state_files import states_in_checkpoints

            if not isinstance(e, OwnStatesMissing) and not isinstance(getattr(e, "cause", None), OwnStatesMissing):
                raise
            # the fed server came back on another node than its kept states' files: the
            # checkpoint of the same round has them (--checkpoint-every 1, the default)
            own = states_in_checkpoints(self.run_dir, state["fed"]["own"]) if self.run_dir else None
            if own is None:
                raise SnapshotLost(f"{getattr(e, 'cause', e)}; no checkpoint of round {state.get('round', '?')} holds them "
                                   f"(--checkpoint-every)") from None
            ray.get(self.fed.load_state.remote({**state["fed"], "own": own}))
        ray.get(servers)
