"""Learning-rate schedules over rounds (``--lr-schedule``; ours, docs/schedules.md).

A schedule gives each round ``t`` (1-based) a multiplier ``m(t)``; round ``t`` trains with
``lr * m(t)`` on the client side and ``server_lr * m(t)`` on the server side
(:meth:`raysfl.config.Config.lr_at`, :meth:`~raysfl.config.Config.server_lr_at`: the one
place a round's learning rate is computed; within a round it is constant). It is written as
text, so a run's ``config.json`` records it and a resume runs it again:

=====================================  =====================================================
``constant``                           ``m(t) = 1``
``exp:gamma=G``                        ``G^(t-1)``; ``--lr-decay G`` is this schedule
``step:every=E:gamma=G``               ``G^floor((t-1)/E)`` (torch's StepLR, a step a round);
                                       ``gamma`` defaults to 0.1
``cosine[:floor=F][:rounds=T]``        ``F + (1-F)(1+cos(pi (t-1)/T))/2`` for ``t <= T``, then
                                       ``F`` (torch's CosineAnnealingLR, ``eta_min = F lr``);
                                       ``T``: the run's rounds (after any warm-up), recorded
                                       in config.json as a number, so a resume with more
                                       rounds keeps the curve; ``F`` defaults to 0
``warmup:rounds=W``                    linear warm-up, then constant
``module:function``                    your function of the round, returning the multiplier
                                       (a number >= 0), imported by its module path
=====================================  =====================================================

Every named schedule also takes ``warmup=W``: rounds ``1..W`` use ``t/(W+1)``, and round
``W+s`` uses the schedule's round ``s`` (``cosine:warmup=2:floor=0.01``). Keys follow the
name after ``:`` (``,`` works too); the recorded text writes every key.

A function given from Python (``Config(lr_schedule=fn)``) is recorded by its module path: a
function defined at the top level of a module (or of the script that runs, ``__main__``); a
lambda or a nested function has no path a resume could import, and is refused. The round's
learning rate is computed in the driver only: the function never travels to an actor.

Nothing here imports torch: validation runs before anything heavy is loaded.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

from raysfl import user_code
from raysfl.errors import ConfigError, excerpt

# name -> {key: (type, default; None: required)}
NAMES: dict[str, dict[str, tuple[type, object]]] = {
    "constant": {},
    "exp": {"gamma": (float, None)},
    "step": {"every": (int, None), "gamma": (float, 0.1)},
    "cosine": {"rounds": (int, None), "floor": (float, 0.0)},  # rounds: the run's, filled by canonical()
    "warmup": {"rounds": (int, None)},
}
ALLOWED = ("constant, exp:gamma=G, step:every=E[:gamma=G], cosine[:floor=F][:rounds=T], warmup:rounds=W "
           "(each may add :warmup=W), or module:function (your function of the round, returning a multiplier "
           "of --lr)")


EXAMPLES = {"exp": "exp:gamma=0.98", "step": "step:every=10:gamma=0.5", "cosine": "cosine:rounds=50",
            "warmup": "warmup:rounds=3"}


def _num(v) -> str:
    """A key's value as recorded: ``0.5``, ``2``, ``0.9999975`` (repr: no digit lost)."""
    r = repr(v) if isinstance(v, int) else repr(float(v))
    return r[:-2] if r.endswith(".0") else r


@dataclass(frozen=True)
class Named:
    """A named schedule with every key resolved."""

    name: str
    keys: tuple  # ((key, value), ...) in NAMES' order
    warmup: int = 0

    def text(self) -> str:
        if self.name == "warmup":
            return f"warmup:rounds={self.warmup}"
        parts = [self.name] + [f"{k}={_num(v)}" for k, v in self.keys] + ([f"warmup={self.warmup}"] if self.warmup else [])
        return ":".join(parts)

    def at(self, rnd: int) -> float:
        """The multiplier of round ``rnd`` (1-based)."""
        w = self.warmup
        if rnd <= w:
            return rnd / (w + 1)
        s, k = rnd - w, dict(self.keys)
        if self.name == "exp":
            return k["gamma"] ** (s - 1)
        if self.name == "step":
            return k["gamma"] ** ((s - 1) // k["every"])
        if self.name == "cosine":
            t, floor = k["rounds"], k["floor"]
            return floor + (1 - floor) * (1 + math.cos(math.pi * (min(s, t + 1) - 1) / t)) / 2
        return 1.0  # constant, and warmup after its rounds


@dataclass(frozen=True)
class Function:
    """Your function of the round (``module:qualname``), returning the round's multiplier;
    imported when first asked (a run's validation), not where a recorded config is only read
    (``raysfl export``, ``load_run``)."""

    path: str

    def text(self) -> str:
        return self.path

    @functools.cached_property
    def fn(self):
        module, _, qualname = self.path.partition(":")
        return resolve(module, qualname)

    def at(self, rnd: int) -> float:
        fn = self.fn
        try:
            value = fn(rnd)
        except Exception as e:  # noqa: BLE001 - the user's code: its error, in one line
            from raysfl.errors import first_line

            raise ConfigError(f"lr-schedule {self.path}({rnd}) raised {type(e).__name__}: {first_line(e)}") from None
        try:
            m = float(value)
        except (TypeError, ValueError):
            m = None
        if isinstance(value, bool) or m is None or not math.isfinite(m) or m < 0:
            raise ConfigError(f"lr-schedule {self.path}({rnd}) returned {excerpt(value)}; it must return the "
                              f"round's multiplier of --lr, a finite number >= 0")
        return m


def _value(name: str, key: str, raw: str, kind: type):
    what = f"lr-schedule {name}: {key}={raw}"
    try:
        v = kind(raw)
    except ValueError:
        raise ConfigError(f"{what} is not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(v):
        raise ConfigError(f"{what} must be a finite number")
    if key == "gamma" and not 0 < v <= 1:
        raise ConfigError(f"{what} must be in (0, 1] (1 = constant)")
    if key == "floor" and not 0 <= v < 1:
        raise ConfigError(f"{what} must be in [0, 1): the last multiplier, a share of --lr")
    if key in ("every", "rounds") and v < 1:
        raise ConfigError(f"{what} must be >= 1")
    if key == "warmup" and v < 0:
        raise ConfigError(f"{what} must be >= 0 (0 = no warm-up)")
    return v


def parse(text: str, rounds: int | None = None) -> Named | Function:
    """The schedule ``text`` names (ConfigError naming the bad value and what is allowed).
    ``rounds``: the run's, for ``cosine``'s default length and the warm-up's bound."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"lr-schedule {excerpt(text)} is not a schedule; allowed: {ALLOWED}")
    raw = text.strip()
    head, sep, rest = raw.replace(",", ":").partition(":")
    name = head.strip().lower()
    if name not in NAMES:
        module, _, qualname = raw.partition(":")
        if sep and all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in qualname.split(".")):
            return Function(f"{module}:{qualname}")
        raise ConfigError(f"unknown lr-schedule {excerpt(text)}; allowed: {ALLOWED}")
    spec = NAMES[name]
    takes = (*spec, "warmup") if name != "warmup" else tuple(spec)
    given: dict[str, object] = {}
    for item in (p.strip() for p in rest.split(":")) if sep else ():
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or key not in takes:
            raise ConfigError(f"lr-schedule {excerpt(text)}: {excerpt(item)} is not a key of {name}; {name} takes "
                              f"{', '.join(k + '=' for k in takes)}")
        if key in given:
            raise ConfigError(f"lr-schedule {excerpt(text)} gives {key} twice")
        given[key] = _value(name, key, value.strip(), int if key in ("every", "rounds", "warmup") else float)
    missing = [k for k, (_, default) in spec.items() if k not in given and default is None and
               not (name == "cosine" and rounds is not None)]
    if missing:
        raise ConfigError(f"lr-schedule {excerpt(text)} needs {missing[0]}=...; e.g. {EXAMPLES[name]}")
    warmup = int(given.pop("rounds") if name == "warmup" else given.pop("warmup", 0))
    if rounds is not None and warmup >= rounds:
        raise ConfigError(f"lr-schedule {excerpt(text)}: the warm-up ({warmup} rounds) must be shorter than the "
                          f"run ({rounds} rounds)")
    if name == "warmup":
        return Named("warmup", (), warmup)
    if name == "cosine" and "rounds" not in given:
        given["rounds"] = rounds - warmup  # the run's rounds after the warm-up
    return Named(name, tuple((k, given.get(k, default)) for k, (_, default) in spec.items()), warmup)


def resolve(module: str, qualname: str):
    """The function ``module:qualname`` (``__main__``: the running script's), importing its module
    from the Python path (``--lr-schedule`` on the command line puts the current directory on
    it, as ``--plugin`` does)."""
    where = f"lr-schedule {module}:{qualname}"
    if module == "__main__" and not callable(getattr(sys.modules.get("__main__"), qualname, None)):
        raise ConfigError(f"{where} is a function of the script that started the run, which this process is "
                          f"not; run that script (raysfl.run(raysfl.resume_config(run_dir)) to resume), or "
                          f"give module:function of an importable module")
    return user_code.function(module, qualname, where, "give module:function importable from here (the current "
                                                       "directory is on the path with --lr-schedule), a function of "
                                                       "the round returning a multiplier of --lr, or a named schedule")


def recorded_module(text) -> str | None:
    """The module a recorded function schedule (``module:function``) is imported from, or None
    for a named schedule or a script's own function (``__main__``: the script gives it again)."""
    if not isinstance(text, str) or ":" not in text or text.partition(":")[0].strip().lower() in NAMES:
        return None
    module = text.partition(":")[0]
    return None if module == "__main__" else module


def reference(fn) -> str:
    """``module:qualname`` of a function given from Python, checked to name it (ConfigError for a
    lambda or a nested function: nothing could import it again to resume the run)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise ConfigError(f"lr_schedule {excerpt(fn)} has no import path a resume could use (a lambda or a nested "
                          f"function); define it with def at the top level of a module or script, or give a "
                          f"named schedule: {ALLOWED}")
    found = resolve(module, qualname)
    if found is not fn:
        raise ConfigError(f"lr_schedule {excerpt(fn)}: {module}:{qualname} names another object; define the "
                          f"function with def at the top level of its module")
    return f"{module}:{qualname}"


def canonical(value, rounds: int) -> str:
    """The text a run records for ``value`` (a schedule's text or a function), every key written."""
    if callable(value):
        return reference(value)
    return parse(value, rounds).text()


@functools.lru_cache(maxsize=64)
def compiled(text: str) -> Named | Function:
    """The schedule of a recorded text (cached: a run asks once per round and role)."""
    return parse(text)


def factor(lr_schedule: str | None, lr_decay: float, rnd: int) -> float:
    """The multiplier of round ``rnd``: ``lr_schedule``'s, or without one ``--lr-decay``'s
    (``exp:gamma=lr_decay``)."""
    if lr_schedule is None:
        return lr_decay ** (rnd - 1)
    return compiled(reference(lr_schedule) if callable(lr_schedule) else lr_schedule).at(rnd)


def check(lr_schedule: str | None, rounds: int) -> None:
    """A function's multiplier for every round of the run is a number >= 0 (ConfigError naming
    the first round that is not), before anything starts; a named schedule's are by construction."""
    if lr_schedule is None:
        return
    s = compiled(lr_schedule)
    if isinstance(s, Function):
        for rnd in range(1, rounds + 1):
            s.at(rnd)
