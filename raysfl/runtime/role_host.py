"""The servers and the fed server of a run in one process (``--co-host``, ours).

Every actor costs a process: Ray's worker, torch and raysfl, 1-1.5 s of CPU each, and on a
2-core machine the demo's six processes were most of its first round (docs/performance.md,
section 6). On one machine the servers and the fed server need not each have one: a
:class:`RoleHost` actor holds a :class:`~raysfl.runtime.server_actor.ServerActor` per server
and the :class:`~raysfl.runtime.fed_actor.FedActor` as plain objects, and runs each role's
calls in a Ray concurrency group of its own (one thread per role). So each role stays serial,
as its own actor was, and roles still wait on each other without deadlock (FLEX-SFL's fed
server calls the edge servers inside ``aggregate``; a server's step waits on its clients).

The rest of the runtime does not know: it holds a :class:`RoleHandle` per role, which answers
``role.method.remote(...)`` and ``role.method.options(num_returns=...)`` like an actor handle,
and travels to other actors like one. What changes is what a process's death takes with it:
every role the host holds. So ``auto`` co-hosts only where that cannot change a run's
results or its faults (:func:`raysfl.runtime.placement.resolve_co_host`).
"""

from __future__ import annotations

from raysfl.runtime.fed_actor import FedActor
from raysfl.runtime.probe import rss_bytes
from raysfl.runtime.server_actor import ServerActor

FED = "fed"


def server_role(index: int) -> str:
    return f"server-{index}"


class RoleHost:
    """One process hosting a run's servers and its fed server (each in its concurrency group)."""

    def __init__(self, num_servers: int, gpus: float = 0.0):
        self.roles = {server_role(j): ServerActor(j, gpus) for j in range(num_servers)}
        self.roles[FED] = FedActor(gpus)

    def call(self, role: str, method: str, *args, **kwargs):
        return getattr(self.roles[role], method)(*args, **kwargs)

    def serving(self) -> str | None:
        """The run its roles serve now (``cluster/chaos.py`` asks every named actor)."""
        return self.roles[FED].serving()

    def memory(self) -> int:
        """Resident set size of the process in bytes (soak benchmarks ask each named actor)."""
        return rss_bytes()


def concurrency_groups(num_servers: int) -> dict[str, int]:
    """One thread per role: each role's calls run in order, the roles side by side."""
    return {**{server_role(j): 1 for j in range(num_servers)}, FED: 1}


class RoleHandle:
    """An actor handle's face for one role of a :class:`RoleHost`."""

    def __init__(self, host, role: str):
        self.host, self.role = host, role

    def __getattr__(self, method: str) -> "_RoleMethod":
        if method.startswith("__") or method in ("host", "role"):  # pickle's probes; half-built copies
            raise AttributeError(method)
        return _RoleMethod(self.host, self.role, method, {})

    def __repr__(self) -> str:
        return f"RoleHandle({self.role})"


class _RoleMethod:
    def __init__(self, host, role: str, method: str, options: dict):
        self.host, self.role, self.method, self._options = host, role, method, options

    def options(self, **options) -> "_RoleMethod":
        return _RoleMethod(self.host, self.role, self.method, {**self._options, **options})

    def remote(self, *args, **kwargs):
        return self.host.call.options(concurrency_group=self.role, **self._options).remote(
            self.role, self.method, *args, **kwargs)
