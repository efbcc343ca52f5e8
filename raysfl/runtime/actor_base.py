"""What every raysfl actor does besides its role: it has an identity that changes when Ray
restarts it (``ping``), serves one run at a time and goes back to the pool between runs
(``serving``, ``teardown``), warms its model up before round 1, and says where it runs and how
much memory it holds. :class:`~raysfl.runtime.client_actor.ClientActor`,
:class:`~raysfl.runtime.server_actor.ServerActor` and :class:`~raysfl.runtime.fed_actor.FedActor`
add their role's calls.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import ClassVar

from raysfl.runtime.placement import actor_location, device_for_actor
from raysfl.runtime.probe import rss_bytes, warm_up


class RunActor:
    """The lifecycle the three actor kinds share."""

    # what a run sets on the actor (``setup``), dropped by ``teardown``
    run_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, gpus: float, what: str):
        self.gpus = gpus
        self.device = device_for_actor(gpus, what)
        self.run_name: str | None = None  # the run it serves (cluster/chaos.py asks)
        self.incarnation = uuid.uuid4().hex  # changes when Ray restarts the actor

    def teardown(self) -> None:
        """Drop the run (:attr:`run_fields`) and wait for the next one."""
        for name in self.run_fields:
            self.__dict__.pop(name, None)
        self.run_name = None

    def ping(self) -> str:
        return self.incarnation

    def crash(self, *after) -> None:
        """Fault injection (``kill:ROLE:round=R``): end this actor's process here; Ray restarts
        the actor (``--max-restarts``). The driver sends it among the round's calls to this
        actor -- ahead of them all (as the round starts), or ahead of its call for the step after
        ``step=S`` (:meth:`raysfl.algorithms.roles.exchange.Wiring.before`) -- and an actor runs
        one caller's calls in order, so the actor dies at exactly that point whatever the timing
        (the driver's ``ray.kill`` raced with the calls: docs/reliability.md). ``after``: the
        results of this actor's call before it, unused: as arguments they hold the crash back
        until they have reached the driver, so the kill cannot take that call's reply with it.

        It asks Ray to kill it (as the driver's ``ray.kill`` did: Ray reports an intended kill,
        not a crash) and waits for it here, so that no later call starts in this process."""
        import ray

        ray.kill(ray.get_runtime_context().current_actor, no_restart=False)
        time.sleep(60)
        os._exit(1)  # not killed by then: end it anyway

    def serving(self) -> str | None:
        """The run this actor serves now (None: idle in the pool)."""
        return self.run_name

    def stamped_state(self, after=None) -> tuple[dict, dict | None]:
        """(stamp, state), called with two returns for a snapshot: the driver fetches the small
        stamp -- this incarnation and the run it serves -- at once, the state only when it needs
        it (a checkpoint, a restore). A state given by an incarnation other than the one that
        ended the round (Ray restarted the actor in between) is not that round's state, and a
        restarted actor that was not set up again has none: the stamp shows both
        (:meth:`raysfl.runtime.federation.Federation.confirm_snapshot`). ``after``: an object
        Ray resolves before the call runs and that is not used -- the aggregation that hands a
        server its merged state, when the snapshot is asked for before that aggregation's
        answer (``--run-ahead``, :mod:`raysfl.runtime.rounds`)."""
        stamp = {"incarnation": self.incarnation, "serving": self.run_name}
        return stamp, (self.get_state() if self.run_name is not None else None)

    def warm_up(self, batch: int) -> float:
        """Before round 1 (:func:`raysfl.runtime.probe.warm_up`); seconds taken."""
        model, input_shape, device = self.warm_target()
        return warm_up(model, input_shape, batch, device)

    def warm_target(self) -> tuple:
        """(model, input shape, device) that :meth:`warm_up` runs."""
        return self.model, self.ds.input_shape, self.device

    def where(self) -> dict:
        """Node, GPU ids and device of this actor (``placement.json``)."""
        return actor_location()

    def memory(self) -> int:
        """Resident set size in bytes (soak benchmarks)."""
        return rss_bytes()
