"""Clients' kept states resident in their client actors: PSL's own models stop travelling
down each round (issue 44, item 1; ours, with ``--client-bank on``).

Where the aggregator keeps a client's update as it came and starts the client's next round
from it (``Aggregator.keeps_updates``: PSL, EPSL, GAPSL, FLEX-SFL between its intra-cluster
aggregations), the fed server used to send that state back down to the client actor that had
just sent it up: at 100 PSL clients on the digits CNN about 21 MB a round into Ray's object
store and out again (on one machine a few per cent of a core; between nodes, 21 MB over the
network before any client can start; docs/performance.md, section 11). The fed server still gets
every update (it evaluates the clients' models, snapshots and checkpoints them, and rebuilds a
client actor that was lost); only the way down goes, where it is safe to skip:

- **The client actor** keeps each update it sends under a new name (``ClientUpdate.token``,
  reported to the driver as ``ClientRoundStats.kept``), tagged with the round:
  :class:`KeptStates`. At the end of round ``r`` it drops what it kept before round ``r - 1``,
  so it holds at most two rounds' clients (memory grows with the clients in a round, not the
  population, item 4).
- **The fed server** notes the name of an update it stored unchanged
  (:meth:`raysfl.own_states.OwnStates.tag`); the name goes with that state and is dropped when
  the state is replaced, deleted or loaded from a snapshot (a retried round, a restarted fed
  server: those rounds send whole states).
- **The driver** mirrors what each client actor holds (:class:`KeptMirror`) from the round
  statistics it fetches anyway, and claims for a client only a state kept in the round before
  or this one, reported by a client actor it has heard from since: one that died, restarted
  or was late (its calls unseen) holds nothing in the mirror. The fed server's ``dispatch``
  sends a client only the name where the claim and its own tag agree, and the whole state
  otherwise.

So what a client actor is told to take is always there; were it not (a bug), the client
actor raises rather than train from anything else. Results are bit for bit those of sending
the states (``scripts/same_results.py``); bytes counted on the simulated link are unchanged.
"""

from __future__ import annotations

import uuid


def new_token() -> str:
    """A name no other kept state has."""
    return uuid.uuid4().hex


class KeptStates:
    """A client actor's kept updates: client -> (round, name, state)."""

    def __init__(self):
        self._kept: dict[int, tuple[int, str, dict]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, rnd: int, client: int, token: str, state: dict) -> None:
        self._kept[client] = (rnd, token, state)

    def drop(self, client: int) -> None:
        self._kept.pop(client, None)

    def end_round(self, rnd: int) -> None:
        """Round ``rnd``'s end: what was kept before round ``rnd - 1`` goes (the driver never
        claims it for a later round)."""
        self._kept = {c: e for c, e in self._kept.items() if e[0] >= rnd - 1}

    def take(self, client: int, token: str, where: str) -> dict:
        """The state kept under ``token`` for ``client``."""
        entry = self._kept.get(client)
        if entry is None or entry[1] != token:
            raise RuntimeError(f"raysfl internal error: {where} was told to start client {client} from its kept state "
                               f"{token[:8]}, which it does not hold ({'none' if entry is None else entry[1][:8]}); "
                               f"please report it (--client-bank off avoids resident states)")
        return entry[2]


class KeptMirror:
    """The driver's view of what each client actor keeps: client -> (round, name), never more
    than the client actor holds (module docstring)."""

    def __init__(self, actor_of):
        self.actor_of = actor_of  # client -> its client actor's index
        self._kept: dict[int, tuple[int, str]] = {}

    def claims(self, rnd: int, clients) -> dict[int, str]:
        """{client: name} of ``clients``' states kept for round ``rnd`` to start from."""
        out = {}
        for c in clients:
            entry = self._kept.get(c)
            if entry is not None and entry[0] >= rnd - 1:
                out[c] = entry[1]
        return out

    def observe(self, rnd: int, stats: list, unseen_actors) -> None:
        """Round ``rnd``'s statistics as the client actors reported them (every
        :class:`~raysfl.transport.ClientRoundStats` the driver fetched from a client actor);
        ``unseen_actors``: client actors whose report did not come (dead, late): they keep
        nothing in the mirror."""
        for st in stats:
            if st.kept:
                self._kept[st.client] = (rnd, st.kept)
            else:
                self._kept.pop(st.client, None)
        self.forget(unseen_actors)
        self._kept = {c: e for c, e in self._kept.items() if e[0] >= rnd - 1}

    def forget(self, actors) -> None:
        """Client actors that may hold nothing now (restarted, set up again, unseen)."""
        actors = set(actors)
        if actors:
            self._kept = {c: e for c, e in self._kept.items() if self.actor_of(c) not in actors}
