"""A warm federation: the actors of one run kept for the next run of the same process.

Starting a run's actors costs a process each (Ray's worker, torch, raysfl: about a second of
CPU apiece, several seconds for a run's set on 2 cores). A sweep -- ``raysfl compare``, the
benchmarks, ``raysfl.run`` called again in one process -- would pay that for every run. So
when a run ends, its actors are not killed: they drop the run (``teardown``) and wait here,
with their placement groups, for the next run whose *shape* is the same -- the same number
of client actors and servers, the same resources per role, placement and restart settings.
That run sets them up with its own config, algorithm, data and model (``setup``) and starts
its rounds at once. Runs of another shape evict the idle sets (their processes end, their
resources go back to Ray) and start their own.

The pool lives as long as the process and its Ray: a Ray that raysfl started is shut down
when the process exits (``atexit``; the reaper, if the process dies); one it joined is left
alone. Concurrent runs (``compare --parallel``) each take a set of their own.

Actors are named after the run that started them (``raysfl:<run>:client-<i>``); a later run
that reuses them records the names in its ``placement.json``, and ``cluster/chaos.py`` asks an
actor which run it serves (``run_name``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

_LOCK = threading.Lock()


@dataclass
class ActorSet:
    """The actors of one run: client actors, servers, the fed server, their placement groups."""

    shape: tuple
    clients: list
    servers: list
    fed: object
    groups: tuple
    names: list = field(default_factory=list)   # actor names, in the order clients + servers + [fed]
    session: str = ""                            # the Ray session they live in
    processes: list | None = None                # the actor handles, where servers and fed share one
                                                 # (raysfl.runtime.role_host); None: one actor per role

    def all(self) -> list:
        """The actors' processes (what ``ray.kill`` ends)."""
        return self.processes if self.processes is not None else self.clients + self.servers + [self.fed]


_IDLE: list[ActorSet] = []


def session_id() -> str:
    """The Ray session this process is connected to (pooled actors belong to one)."""
    import ray

    ctx = ray.get_runtime_context()
    return f"{ctx.gcs_address}/{ray.get_runtime_context().get_job_id()}"


def take(shape: tuple) -> ActorSet | None:
    """An idle set of this shape in this Ray session, or None (idle sets of another shape, or of
    a Ray that is gone, are dropped: their resources go back to Ray)."""
    now = session_id()
    with _LOCK:
        for i, s in enumerate(_IDLE):
            if s.shape == shape and s.session == now:
                return _IDLE.pop(i)
        stale = [s for s in _IDLE if s.session != now]
        for s in stale:
            _IDLE.remove(s)
    return None


def evict(keep: tuple | None = None) -> int:
    """Kill the idle sets (all, or all but those of shape ``keep``); returns how many went."""
    with _LOCK:
        gone = [s for s in _IDLE if s.shape != keep]
        for s in gone:
            _IDLE.remove(s)
    for s in gone:
        destroy(s)
    return len(gone)


def give_back(s: ActorSet) -> None:
    """A finished run's actors (torn down) wait for the next run of their shape."""
    with _LOCK:
        _IDLE.append(s)


def idle() -> list[ActorSet]:
    with _LOCK:
        return list(_IDLE)


def held_cpus() -> float:
    """CPUs the idle sets reserve (they go back to Ray when evicted)."""
    total = 0.0
    for s in idle():
        total += s.shape[-1]
    return total


def destroy(s: ActorSet) -> None:
    """Kill a set's actors and remove its placement groups (errors of an already dead Ray ignored)."""
    try:
        import ray
        from ray.util.placement_group import remove_placement_group

        for a in s.all():
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for g in s.groups:
            if g is not None:
                try:
                    remove_placement_group(g)
                except Exception:  # noqa: BLE001 - already gone
                    pass
    except Exception:  # noqa: BLE001 - Ray itself is gone: so are the actors
        pass


def clear() -> None:
    """Forget (and kill) every idle set: before Ray shuts down."""
    evict(keep=None)
