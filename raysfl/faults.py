"""Fault schedules: what to break, when, and how (parsed, validated, planned per round).

A schedule is a list of items ``ACTION:ROLE[:key=value...]`` (``--faults`` takes them
comma-separated; a config file takes a list of such strings or of mappings):

=============  ================================================================================
kill           Ray kills an actor of ROLE (it restarts): ``round=R`` (or ``rounds=A-B``) and
               optionally ``step=S`` (after that local step; default: as the round starts), or
               ``p=P`` (each round with probability P); ``index=I`` picks the actor (default:
               drawn with the run's seed). The actor dies at that point of its calls exactly
               (docs/reliability.md says where the driver's clock decides instead).
delay          make clients stragglers: each selected client with probability ``p`` (or every
               client in ``round``/``rounds``) is late by ``seconds=X`` or ``seconds=A-B``
               (uniform); ``clock=real`` sleeps in the client actor, ``clock=sim`` (default)
               only adds to the simulated clock.
unavailable    the server of ROLE cannot be reached in ``rounds=A-B`` (or ``round=R``); its
               clients fall back (the algorithm's ``on_server_down``; default: they sit the
               round out). ``unavailable:client`` is churn (ours): clients that cannot join a
               round -- each client independently with probability ``p=P`` per round, or the
               client ``index=K`` (with ``p``: with that probability), or every client -- in
               every round or only in ``rounds=A-B``. Selection picks among the others
               (:func:`unavailable_clients`, drawn before selection).
=============  ================================================================================

ROLE is ``client`` (a client actor), ``edge`` (an edge server: algorithms with several server
actors), ``server`` (the main server of single-server algorithms), ``fed`` (the fed
server) or, for kill only, ``node``: a whole worker node of a cluster, every process on it
(its raylet is killed; ``index=I`` picks the I-th node holding the run's actors, the head and
the driver's node never; ours: runtime/node_faults.py). Every random choice is drawn from the run's seed, so a faulty run is reproducible.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from raysfl.errors import ConfigError, excerpt

ACTIONS = ("kill", "delay", "unavailable")
ROLES = ("client", "edge", "server", "fed", "node")
CLOCKS = ("sim", "real")
_KEYS = {"round", "rounds", "step", "p", "seconds", "index", "clock"}
# The keys each action takes (any other is refused, not silently dropped).
_APPLIES = {"kill": {"round", "rounds", "step", "p", "index"},
            "delay": {"round", "rounds", "p", "seconds", "clock"},
            "unavailable": {"round", "rounds", "index", "p"}}  # p: refused below, with why


@dataclass
class Fault:
    action: str
    role: str
    rounds: tuple[int, int] | None = None  # inclusive window; round=R is (R, R)
    step: int | None = None
    p: float | None = None
    seconds: tuple[float, float] | None = None
    index: int | None = None
    clock: str = "sim"

    def text(self) -> str:
        parts = [self.action, self.role]
        if self.rounds:
            a, b = self.rounds
            parts.append(f"round={a}" if a == b else f"rounds={a}-{b}")
        for k in ("step", "p", "index"):
            if getattr(self, k) is not None:
                parts.append(f"{k}={getattr(self, k)}")
        if self.seconds:
            a, b = (np.format_float_positional(x, trim="-") for x in self.seconds)
            parts.append(f"seconds={a}" if a == b else f"seconds={a}-{b}")
        if self.action == "delay":
            parts.append(f"clock={self.clock}")
        return ":".join(parts)

    def active(self, rnd: int) -> bool:
        return self.rounds is None or self.rounds[0] <= rnd <= self.rounds[1]


def _range(item: str, key: str, value: str, cast) -> tuple:
    try:
        parts = re.split(r"(?<=[0-9.])-", value.strip(), maxsplit=1)  # "1e-5" is a number, "1-3" a range
        if len(parts) == 2:
            out = (cast(parts[0]), cast(parts[1]))
        else:
            out = (cast(value), cast(value))
    except (ValueError, OverflowError):
        raise ConfigError(f"fault {excerpt(item)}: {key}={excerpt(value)} is not a number or a range A-B") from None
    if not all(math.isfinite(x) for x in out):
        raise ConfigError(f"fault {excerpt(item)}: {key}={value} must be finite")
    if out[0] > out[1]:
        raise ConfigError(f"fault {excerpt(item)}: {key}={value} is an empty range")
    return out


def parse_fault(item) -> Fault:
    """One item: ``"kill:client:round=3"`` or ``{"action": "kill", "role": "client", "round": 3}``."""
    if isinstance(item, dict):
        d = {str(k).replace("-", "_"): v for k, v in item.items()}
        if "action" not in d or "role" not in d:
            raise ConfigError(f"fault {excerpt(item)} needs 'action' and 'role'")
        text = ":".join([str(d.pop("action")), str(d.pop("role"))] + [f"{k}={v}" for k, v in d.items()])
    elif isinstance(item, str):
        text = item.strip()
    else:
        raise ConfigError(f"fault {excerpt(item)} must be a string ACTION:ROLE[:key=value...] or a mapping")
    parts = text.split(":")
    if len(parts) < 2:
        raise ConfigError(f"fault {excerpt(text)} must look like ACTION:ROLE[:key=value...], e.g. kill:client:round=3")
    action, role = parts[0].strip().lower(), parts[1].strip().lower()
    if action not in ACTIONS:
        raise ConfigError(f"fault {excerpt(text)}: unknown action {excerpt(action)}; allowed: {', '.join(ACTIONS)}")
    if role not in ROLES:
        raise ConfigError(f"fault {excerpt(text)}: unknown role {excerpt(role)}; allowed: {', '.join(ROLES)}")
    f = Fault(action, role)
    seen: set[str] = set()
    for kv in parts[2:]:
        if "=" not in kv:
            raise ConfigError(f"fault {excerpt(text)}: {excerpt(kv)} is not key=value; keys: {', '.join(sorted(_KEYS))}")
        k, v = (s.strip() for s in kv.split("=", 1))
        if k not in _KEYS:
            raise ConfigError(f"fault {excerpt(text)}: unknown key {excerpt(k)}; allowed: {', '.join(sorted(_KEYS))}")
        if k not in _APPLIES[action]:
            raise ConfigError(f"fault {excerpt(text)}: key {excerpt(k)} does not apply to {action}; {action} takes "
                              f"{', '.join(sorted(_APPLIES[action]))}")
        same = {k} | ({"round", "rounds"} if k in ("round", "rounds") else set())
        if seen & same:
            raise ConfigError(f"fault {excerpt(text)}: {excerpt(k)} is given twice (or with {'/'.join(sorted(same - {k}))}); "
                              f"give each key once")
        seen.add(k)
        if k in ("round", "rounds"):
            f.rounds = _range(text, k, v, int)
            continue
        if k == "seconds":
            f.seconds = _range(text, k, v, float)
            continue
        try:
            if k == "step":
                f.step = int(v)
            elif k == "index":
                f.index = int(v)
            elif k == "p":
                f.p = float(v)
            elif k == "clock":
                f.clock = v.lower()
        except ValueError:
            raise ConfigError(f"fault {excerpt(text)}: {k}={excerpt(v)} is not a number") from None
    _check(f, text)
    return f


def _check(f: Fault, text: str) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ConfigError(f"fault {excerpt(text)}: {msg}")

    if f.rounds is not None:
        need(f.rounds[0] >= 1, "rounds are numbered from 1")
    if f.p is not None:
        need(0 < f.p <= 1, f"p must be in (0, 1], got {f.p}")  # NaN fails this too
    if f.step is not None:
        need(f.action == "kill" and f.step >= 0, "step=S (>= 0) applies to kill only")
    if f.index is not None:
        need(f.index >= 0 and f.role in ("client", "edge", "node"),
             "index=I (>= 0) picks a client actor (a client for unavailable:client), an edge server or a worker node")
    if f.role == "node":
        need(f.action == "kill", "a node can only be killed (kill:node:...)")
    need(f.clock in CLOCKS, f"clock must be one of {', '.join(CLOCKS)}, got {excerpt(f.clock)}")
    if f.action == "kill":
        need(f.rounds is not None or f.p is not None, "kill needs round=R, rounds=A-B or p=P")
    elif f.action == "delay":
        need(f.role == "client", "only clients can be delayed (delay:client:...)")
        need(f.seconds is not None and f.seconds[0] >= 0, "delay needs seconds=X or seconds=A-B (>= 0)")
        need(f.rounds is not None or f.p is not None, "delay needs p=P, round=R or rounds=A-B")
    elif f.role == "client":  # churn: p, index or a window (or several) say who and when
        need(f.p is not None or f.index is not None or f.rounds is not None,
             "unavailable:client needs p=P (each client, each round), index=K (one client) or rounds=A-B (every "
             "client in those rounds)")
    else:
        need(f.role in ("server", "edge"), "only clients, a server or an edge server can be unavailable")
        need(f.rounds is not None, "unavailable needs round=R or rounds=A-B")
        need(f.p is None, "unavailable takes a window (rounds=A-B), not p")


def parse_faults(value) -> list[Fault]:
    """A whole schedule: a comma-separated string, a list of items, or None/empty."""
    if value is None or value == "" or value == []:
        return []
    if isinstance(value, str):
        items = [s for s in (x.strip() for x in value.split(",")) if s]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ConfigError(f"faults must be a comma-separated string or a list, got {type(value).__name__}")
    return [parse_fault(i) for i in items]


@dataclass
class RoundFaults:
    """What the schedule does in one round (drawn by :func:`plan_faults`)."""

    kills: list[tuple[str, int, int]] = field(default_factory=list)  # (role, actor index, after step)
    delays: dict[int, tuple[float, str]] = field(default_factory=dict)  # client -> (seconds, clock)
    down_servers: set[int] = field(default_factory=set)


def plan_faults(faults: list[Fault], rnd: int, seed: int, clients: list[int], num_client_actors: int,
                num_servers: int) -> RoundFaults:
    """The faults that fire in round ``rnd``: a pure function of the schedule and the seed."""
    out = RoundFaults()
    for i, f in enumerate(faults):
        if not f.active(rnd):
            continue
        rng = np.random.default_rng([seed, rnd, i, 0xFA17])
        if f.action == "kill":
            if f.p is not None and rng.random() >= f.p:
                continue
            if f.role == "client":
                index = f.index if f.index is not None else int(rng.integers(num_client_actors))
            elif f.role == "edge":
                index = f.index if f.index is not None else int(rng.integers(num_servers))
            elif f.role == "node":  # taken modulo the worker nodes that hold actors when it fires
                index = f.index if f.index is not None else int(rng.integers(1 << 30))
            else:
                index = 0
            out.kills.append((f.role, index, f.step or 0))
        elif f.action == "delay":
            lo, hi = f.seconds
            for c in clients:
                hit = rng.random() < f.p if f.p is not None else True
                secs = float(rng.uniform(lo, hi)) if hi > lo else lo
                if hit:
                    d, _ = out.delays.get(c, (0.0, f.clock))
                    out.delays[c] = (d + secs, f.clock)
        elif f.role == "client":
            continue  # churn: drawn before selection (unavailable_clients)
        else:
            if f.role == "server":
                out.down_servers.add(0)
            elif f.index is not None:
                out.down_servers.add(f.index)
            else:
                out.down_servers.update(range(num_servers))
    return out


def unavailable_clients(faults: list[Fault], rnd: int, seed: int, num_clients: int) -> set[int]:
    """Clients that cannot join round ``rnd`` (``unavailable:client`` items: churn, ours).

    Drawn before selection (which picks among the others), as a pure function of the schedule,
    the round and the run's seed, so the same seed gives the same churn and a resume re-plans
    it. With ``p=P`` every client draws independently each round (one draw per client, round
    and item); ``index=K`` narrows the item to client K; without ``p`` the item's clients are
    unavailable in every round of its window."""
    out: set[int] = set()
    for i, f in enumerate(faults):
        if f.action != "unavailable" or f.role != "client" or not f.active(rnd):
            continue
        who = [f.index] if f.index is not None else range(num_clients)
        if f.p is None:
            out.update(who)
            continue
        hit = np.random.default_rng([seed, rnd, i, 0xC4A2]).random(num_clients) < f.p
        out.update(c for c in who if hit[c])
    return out


def check_rounds(faults: list[Fault], rounds: int) -> None:
    """Refuse faults that could never fire: a window that starts after the run's last round."""
    for f in faults:
        if f.rounds is not None and f.rounds[0] > rounds:
            raise ConfigError(f"fault {excerpt(f.text())} is scheduled after the last round (rounds={rounds}); "
                              f"allowed: rounds 1..{rounds}")


def check_steps(faults: list[Fault], steps: int, how: str) -> None:
    """Refuse a kill at a step the round never reaches (``steps``: the most local steps a client
    takes in a round; ``how``: where that number comes from)."""
    for f in faults:
        if f.step is not None and f.step > steps:
            raise ConfigError(f"fault {excerpt(f.text())}: step={f.step} is past the round's last local step ({steps}, "
                              f"{how}); allowed: step=0..{steps}")


def server_kills(faults: list[Fault]) -> list[Fault]:
    """The faults that kill a server, an edge server or the fed server (``--co-host`` puts them
    all in one process, which such a kill would end)."""
    return [f for f in faults if f.action == "kill" and f.role != "client"]


def check_roles(faults: list[Fault], num_servers: int, algo: str, num_client_actors: int, num_clients: int) -> None:
    """Refuse faults aimed at roles this run does not have (``num_clients``: the range of
    ``unavailable:client:index=K``)."""
    for f in faults:
        if f.role in ("server", "edge") and num_servers == 0:
            raise ConfigError(f"fault {excerpt(f.text())}: algorithm {excerpt(algo)} has no server actors (its clients train "
                              f"the whole model, alone or with a partner)")
        if f.role == "edge" and num_servers < 2:
            raise ConfigError(f"fault {excerpt(f.text())}: algorithm {excerpt(algo)} has no edge servers; use role 'server'")
        if f.role == "server" and num_servers > 1:
            raise ConfigError(f"fault {excerpt(f.text())}: algorithm {excerpt(algo)} has {num_servers} edge servers; use role "
                              f"'edge' (or 'fed' for the central server)")
        if f.index is not None:
            churn = f.action == "unavailable" and f.role == "client"
            limit = num_clients if churn else num_client_actors if f.role == "client" else num_servers
            if f.index >= limit:
                what = "clients" if churn else "client actors" if f.role == "client" else "edge servers"
                raise ConfigError(f"fault {excerpt(f.text())}: index {f.index} out of range; this run has {limit} "
                                  f"{what} (index=0..{limit - 1})")
