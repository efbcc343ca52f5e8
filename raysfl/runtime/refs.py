"""Fetching the results of other actors when some of them may be dead or late.

Round calls pass each other's results as *lists* of ObjectRefs, which Ray does not resolve
before the call. The receiving actor (or the driver) fetches them here and goes on with
whatever arrived: a ref whose actor died gives :data:`DEAD`, one still running when the
deadline passes gives :data:`LATE`. A genuine error in our own code is *not* swallowed:
it is re-raised, so a bug never turns into a silently smaller round.
"""

from __future__ import annotations

import time


class _Missing:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __bool__(self) -> bool:
        return False


DEAD = _Missing("DEAD")
LATE = _Missing("LATE")


class ActorReset(RuntimeError):
    """A call reached an actor that Ray restarted and that is not set up for the run again yet
    (it comes back bare): for the caller, as good as dead."""


def require_run(actor) -> None:
    """Raise :class:`ActorReset` in an actor method that needs the run it was set up with."""
    if getattr(actor, "run_name", None) is None:
        raise ActorReset(f"{type(actor).__name__} holds no run (restarted by Ray, not set up again yet)")


def is_death(err: BaseException) -> bool:
    """True for errors that mean "an actor, worker or node went away" (not a bug)."""
    import ray.exceptions as rex

    death = (rex.RayActorError, rex.ObjectLostError, rex.OwnerDiedError, rex.WorkerCrashedError,
             rex.NodeDiedError, rex.LocalRayletDiedError, rex.TaskCancelledError)
    if isinstance(err, (death, ActorReset)):
        return True
    cause = getattr(err, "cause", None)
    return isinstance(err, rex.RayTaskError) and cause is not None and is_death(cause)


def fetch(refs: list, deadline: float | None = None) -> list:
    """Values of ``refs`` in order; DEAD for a dead producer, LATE past ``deadline`` (epoch s)."""
    import ray

    refs = list(refs)
    if not refs:
        return []
    ready = None
    if deadline is not None:
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.time()),
                           fetch_local=False)
        ready = set(done)
    return _values(refs, ready)


def _values(refs: list, ready: set | None, expected: list[bool] | None = None) -> list:
    """Each ref's value: None where not ``expected``, LATE where not in ``ready`` (None: every
    ref is ready), DEAD where its producer died; any other error is raised."""
    import ray

    out = []
    for i, r in enumerate(refs):
        if expected is not None and not expected[i]:
            out.append(None)
        elif ready is not None and r not in ready:
            out.append(LATE)
        else:
            try:
                value = ray.get(r)
                if isinstance(value, ray.ObjectRef):  # a payload handed off directly (hand_off)
                    value = ray.get(value)
                out.append(value)
            except Exception as e:  # noqa: BLE001 - classified here
                if not is_death(e):
                    raise
                out.append(DEAD)
    return out


def gather(refs: list, expected: list[bool], deadline: float | None = None,
           window: float | None = None) -> list:
    """The values of a server step's payloads as they arrive in time.

    Waits for the first of the ``expected`` refs (until ``deadline``, epoch s), then at most
    ``window`` seconds more for the other expected ones, never past ``deadline``. An expected
    ref still running then is LATE, a dead producer's is DEAD; refs not expected are not
    waited for or fetched (None). So one slow sender costs the others at most ``window``.
    """
    import ray

    refs = list(refs)
    waiting = [r for r, e in zip(refs, expected) if e]
    ready: set = set()
    if waiting:
        first, _ = ray.wait(waiting, num_returns=1, fetch_local=False,
                            timeout=None if deadline is None else max(0.0, deadline - time.time()))
        if first:
            ends = [t for t in (deadline, time.time() + window if window is not None else None) if t is not None]
            end = min(ends) if ends else None
            done, _ = ray.wait(waiting, num_returns=len(waiting), fetch_local=False,
                               timeout=None if end is None else max(0.0, end - time.time()))
            ready = set(done)
    return _values(refs, ready, expected)


def hand_off(payloads: list, direct: bool) -> list:
    """A round call's payloads as they leave the actor, one per return of the call (smashed
    data, gradients, FedPairing's peer messages, the models a round starts from, the updates).

    Not ``direct``: as they are -- Ray returns them through the caller, the driver, which then
    passes them on (inline up to ``--inline-object-kb``: the fastest on one machine, but every
    byte goes through the driver). ``direct`` (``--direct-payloads``): each is put into the object
    store by this actor, and the driver passes on only the reference; the receiving actor fetches
    the payload from this actor's node (:func:`fetch` and :func:`gather` unwrap it), so the bytes
    through the driver grow with the clients, not with the samples. Such a payload belongs to
    this actor (Ray's ownership): if the actor dies before it is fetched, Ray soon reports it
    lost and the fetch gives DEAD, as for a sender that died before sending."""
    if not direct:
        return payloads
    import ray

    return [ray.put(p) for p in payloads]


def unwrap(value):
    """A value passed as a call's argument, fetched if it was handed off (:func:`hand_off`)."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def ping_all(actors: list, sent: list | None = None) -> list[str]:
    """Incarnation ids of ``actors``: one round trip when all answer at once (the usual case),
    otherwise :func:`ping_until_alive` for each, waiting for restarts. ``sent``: their pings'
    refs, where the caller asked for them already."""
    import ray

    try:
        return ray.get(sent if sent is not None else [a.ping.remote() for a in actors])
    except Exception as e:  # noqa: BLE001 - classified
        if not is_death(e):
            raise
    return [ping_until_alive(a) for a in actors]


def ping_until_alive(actor, timeout: float = 300.0, dead_for: float = 5.0) -> str:
    """The actor's incarnation id, waiting while Ray restarts it.

    Calls to a restarting actor fail at once (``ActorUnavailableError``), and a call in
    flight when it was killed fails with ``ActorDiedError`` even if it will come back; so
    only an actor that keeps answering "died" for ``dead_for`` seconds counts as dead for
    good, and then ``RayActorError`` is raised.
    """
    import ray
    import ray.exceptions as rex

    give_up = time.time() + timeout
    died_since = None
    while True:
        try:
            return ray.get(actor.ping.remote())
        except rex.ActorUnavailableError:
            died_since = None
            if time.time() > give_up:
                raise
        except rex.RayActorError:
            died_since = died_since or time.time()
            if time.time() - died_since > dead_for or time.time() > give_up:
                raise
        time.sleep(0.2)


def alive_within(actor, timeout: float, dead_for: float = 5.0) -> str | None:
    """The actor's incarnation id if it answers within ``timeout`` seconds, else None: Ray is
    still restarting it, or has no node with room to place it on (its placement-group bundle
    waits for one: a lost node, no spare capacity). Raises ``RayActorError`` for an actor that
    keeps answering "died" for ``dead_for`` seconds, as :func:`ping_until_alive` does."""
    import ray
    import ray.exceptions as rex

    give_up = time.time() + timeout
    died_since = None
    ref = actor.ping.remote()
    while True:
        try:
            return ray.get(ref, timeout=max(0.0, give_up - time.time()))
        except rex.GetTimeoutError:
            return None
        except rex.ActorUnavailableError:
            died_since = None
        except rex.RayActorError:
            died_since = died_since or time.time()
            if time.time() - died_since > dead_for:
                raise
        if time.time() > give_up:
            return None
        time.sleep(0.2)
        ref = actor.ping.remote()
