"""How a round's local steps are wired between the actors: the exchange shape of an algorithm.

The runtime hands every round to its planner's ``exchange``: it has dispatched the clients'
start states and will collect their updates; the exchange wires the steps in between. It
works on actor handles only (it never sees a tensor): each call returns ObjectRefs, which the
next call receives as a list and fetches itself, so a dead or late actor costs only its own
clients. The driver submits a whole round without waiting.

* :class:`SplitExchange` (SplitFed and every split algorithm): per step, ONE call per client
  actor (apply the previous step's gradients, forward the next batch of all its active
  clients; one payload per destination server) and ONE call per server (the group's smashed
  batches; one gradient payload per source actor) -- or, with ``--server-stream on`` where the
  server's step allows it (``Wiring.stream``), one call per source actor, each answered at once.
* :class:`SequentialExchange` (vanilla SL): the same, one client at a time, each starting
  from the previous one's model.
* :class:`LocalExchange` (FedAvg, FedProx): one call per client actor that runs every local
  step of its clients on the whole model; no server actors.

A paper whose clients talk another way writes its own in its package (FedPairing's
client-to-client exchange, :mod:`raysfl.algorithms.fed_pairing.peer_exchange`), calling its
client role's methods through ``ClientActor.call_role``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from raysfl.errors import ConfigError
from raysfl.simclock import round_time


def as_list(refs, n: int) -> list:
    """The refs of a call with ``num_returns=n`` as a list (Ray gives a bare ref for n = 1)."""
    return [refs] if n == 1 else list(refs)


@dataclass
class Wiring:
    """What an exchange may use: the run's actor handles and the round's bookkeeping."""

    clients: list                 # client actor handles (client k lives on actor k % len(clients))
    servers: list                 # server actor handles
    aux: list = field(default_factory=list)  # refs whose values are not needed but whose errors must surface
    stream: bool = False  # servers take a step one sender at a time (ServerActor.step_part; --server-stream)
    # kills after a local step (kill:ROLE:...:step=S): {("client", actor) or ("server", index): S}
    crashes: dict = field(default_factory=dict)
    crashed: list = field(default_factory=list)  # the refs of the crash calls sent (they fail, as meant)
    last: dict = field(default_factory=dict)  # with crashes: (kind, index) -> the refs of its last call sent

    def __post_init__(self):
        if self.crashes:  # the actors a kill after a step is wired for: their calls' refs kept (before)
            self.clients = [_Kept(h, self.last, ("client", i)) for i, h in enumerate(self.clients)]
            self.servers = [_Kept(h, self.last, ("server", j)) for j, h in enumerate(self.servers)]

    def before(self, kind: str, index: int, step: int | None = None) -> None:
        """Call it before sending client actor (``kind`` "client") or server ``index`` its call
        for step ``step`` (0-based), and with ``step`` None before its end of the round. A kill
        scheduled after local step S (:attr:`crashes`) is sent here, ahead of the call for step
        S (or of the end of the round, where the actor has fewer steps): the actor asks Ray to
        kill it (``RunActor.crash``) and runs its calls in order, so it dies after exactly S
        steps of work, whatever the timing. The crash takes the results of the actor's call
        before it as arguments, so Ray sends it only once they have reached the driver: a
        process killed sooner can take its last reply with it (a loaded machine lost a client
        actor's step that way, docs/reliability.md). With ``--direct-payloads on`` that reply is
        a reference to the actor's own object, which its death can still take before the
        server fetches it (docs/architecture.md, "Direct payloads")."""
        if (kind, index) in self.crashes and (step is None or step == self.crashes[(kind, index)]):
            del self.crashes[(kind, index)]
            actor = self.clients[index] if kind == "client" else self.servers[index]
            self.crashed.append(actor.crash.remote(*self.last.get((kind, index), ())))


class _Kept:
    """An actor handle whose calls' refs are kept as its slot's last (:meth:`Wiring.before`)."""

    def __init__(self, handle, last: dict, slot: tuple[str, int]):
        self.handle, self._last, self._slot = handle, last, slot

    def __getattr__(self, method: str) -> "_KeptMethod":
        if method.startswith("__") or method in ("handle", "_last", "_slot"):  # copy's and pickle's probes
            raise AttributeError(method)
        return _KeptMethod(getattr(self.handle, method), self._last, self._slot)


class _KeptMethod:
    def __init__(self, method, last: dict, slot: tuple[str, int]):
        self.method, self._last, self._slot = method, last, slot

    def options(self, **options) -> "_KeptMethod":
        return _KeptMethod(self.method.options(**options), self._last, self._slot)

    def remote(self, *args, **kwargs):
        refs = self.method.remote(*args, **kwargs)
        self._last[self._slot] = [] if refs is None else list(refs) if isinstance(refs, list) else [refs]
        return refs


class Exchange:
    """The steps of one round's group (``plans_by_actor``: {client actor: {client: plan}}), and
    the round's shape around them: which clients step together (:meth:`turns`), what becomes of
    a turn's updates (:meth:`hand_over`), how long the round lasts on the simulated clock
    (:meth:`round_time`) and which run settings the shape cannot honour (:meth:`check`)."""

    server_side: ClassVar[bool] = True     # runs server actors

    @classmethod
    def check(cls, cfg) -> None:
        """Raise ConfigError for settings this shape cannot honour (validation, before Ray starts)."""

    @classmethod
    def turns(cls, clients: list[int]) -> list[list[int]]:
        """The groups of the round's clients that step together, in order (default: all at once)."""
        return [list(clients)] if clients else []

    @classmethod
    def hand_over(cls, w: Wiring, fed, rnd: int, updates: list) -> bool:
        """After a turn: True when its ``updates`` went elsewhere than the round's aggregation
        (default: False, they are aggregated with the round's others)."""
        return False

    @classmethod
    def round_time(cls, client_times: list[float]) -> float:
        """The round's simulated seconds from its clients' (default: the slowest, all at once)."""
        return round_time(client_times)

    @classmethod
    def steps(cls, w: Wiring, plans_by_actor: dict[int, dict], server_of: dict[int, int],
              prev: dict[int, list]) -> list[list]:
        """Submit the steps; leave in ``prev[i]`` the refs client actor i must still apply at the
        end of the round. Call ``w.before("client", i, s)`` before client actor i's call for step
        ``s`` and ``w.before("server", d, s)`` before server d's: a kill after a step goes there
        (:meth:`Wiring.before`). Returns, per step, the refs whose completion ends that step (the
        driver waits on them for progress and for the kills it injects itself after a step)."""
        raise NotImplementedError


class SplitExchange(Exchange):
    """Client actors forward, servers step, gradients go straight back (module docstring)."""

    @classmethod
    def steps(cls, w, plans_by_actor, server_of, prev):
        actors = sorted(plans_by_actor)
        markers: list[list] = []
        for s in range(max(p.steps for group in plans_by_actor.values() for p in group.values())):
            sends: dict[tuple[int, int], object] = {}
            local_refs = []
            for i in actors:
                mine = plans_by_actor[i]
                routes = {c: server_of[c] for c, p in mine.items() if p.steps > s and not p.local}
                dests = sorted(set(routes.values()))
                if dests or any(p.local and p.steps > s for p in mine.values()):
                    w.before("client", i, s)
                if not dests:
                    if any(p.local and p.steps > s for p in mine.values()):  # only local work
                        local_refs.append(w.clients[i].step.remote(s, [], routes, prev[i]))
                        prev[i] = []
                    continue  # this actor's clients are done; its last grads wait for the end of the round
                refs = w.clients[i].step.options(num_returns=len(dests)).remote(s, dests, routes, prev[i])
                prev[i] = []
                for d, ref in zip(dests, as_list(refs, len(dests))):
                    sends[(i, d)] = ref
            for d in sorted({d for _, d in sends}):
                srcs = sorted(i for (i, dd) in sends if dd == d)
                w.before("server", d, s)
                if w.stream and len(srcs) > 1:  # each sender answered as soon as its batches are in
                    for k, i in enumerate(srcs):
                        prev[i].append(w.servers[d].step_part.remote(s, [sends[(i, d)]], k == len(srcs) - 1))
                    continue
                grads = w.servers[d].step.options(num_returns=len(srcs)).remote(
                    s, [sends[(i, d)] for i in srcs], srcs)
                for i, g in zip(srcs, as_list(grads, len(srcs))):
                    prev[i].append(g)
            markers.append([g for i in actors for g in prev[i]] + local_refs)
            w.aux.extend(local_refs)
        return markers


class SequentialExchange(SplitExchange):
    """Vanilla split learning: the split steps, one client at a time, each client's model
    aggregated into the next one's start; deadlines make no sense here."""

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.round_deadline_s or cfg.step_deadline_s or cfg.sim_deadline_s:
            raise ConfigError(f"deadlines (--round-deadline-s, --step-deadline-s, --sim-deadline-s) are not "
                              f"supported for the sequential algorithm '{cfg.algo}' (its clients take turns within "
                              f"one round)")

    @classmethod
    def turns(cls, clients):
        return [[c] for c in clients]

    @classmethod
    def hand_over(cls, w, fed, rnd, updates):
        w.aux.append(fed.aggregate.remote(rnd, None, [], updates))  # the next client starts from this one's model
        return True

    @classmethod
    def round_time(cls, client_times):
        return round_time(client_times, sequential=True)


class LocalExchange(Exchange):
    """Whole-model clients: one call per client actor runs all its clients' local steps."""

    server_side = False

    @classmethod
    def steps(cls, w, plans_by_actor, server_of, prev):
        for i in sorted(plans_by_actor):
            w.aux.append(w.clients[i].train_local.remote())
        return []
