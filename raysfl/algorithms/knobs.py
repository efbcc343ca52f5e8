"""An algorithm's knobs describe themselves: each field of its params dataclass carries its help,
its choices and its bounds where it is declared, ``knob(default, help, ...)``, and from them
come the flag's help in ``raysfl run --help`` and the one-line checks validation runs on every
algorithm's knobs, a plugin's included (:func:`check_knobs`)::

    @dataclass
    class ProxParams:
        prox_mu: float = knob(0.01, "weight of the proximal term (mu/2)||w - w_global||^2", at_least=0)
        mode: str = knob("paper", "paper (eq. 5 as written) | spread (ours)", choices=("paper", "spread"))

A field declared without ``knob`` still becomes a flag, with its name as its help and no check
but the type's. No torch here: the registry and the command line import it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from raysfl.errors import ConfigError, excerpt

_KEY = "raysfl.knob"


@dataclass(frozen=True)
class Knob:
    """What a knob means and which values it takes."""

    help: str
    choices: tuple | None = None
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    integer: bool = False
    unset: str | None = None  # what a None default means, for the flag's "(default: ...)"

    def bounds(self) -> str:
        """The allowed range in words: ``>= 0``, ``in [0, 1)``, ``> 0``."""
        low = self.at_least if self.at_least is not None else self.above
        high = self.at_most if self.at_most is not None else self.below
        if low is not None and high is not None:
            return (f"in {'[' if self.above is None else '('}{low:g}, {high:g}{']' if self.below is None else ')'}")
        if low is not None:
            return f"{'>=' if self.above is None else '>'} {low:g}"
        return f"{'<=' if self.below is None else '<'} {high:g}" if high is not None else ""

    def allows(self, v) -> bool:
        """Whether the number ``v`` is finite, an integer where it must be, and within bounds."""
        return (math.isfinite(v) and (not self.integer or isinstance(v, int))
                and (self.at_least is None or v >= self.at_least) and (self.above is None or v > self.above)
                and (self.at_most is None or v <= self.at_most) and (self.below is None or v < self.below))


def knob(default, help: str, *, choices=None, at_least=None, above=None, at_most=None, below=None, integer=False,
         unset=None):
    """A params dataclass field with its help, choices and bounds (see the module docstring)."""
    meta = Knob(help, tuple(choices) if choices is not None else None, at_least, above, at_most, below, integer,
                unset)
    return dataclasses.field(default=default, metadata={_KEY: meta})


def knob_of(field: dataclasses.Field) -> Knob:
    """A field's :class:`Knob` (its name as help where it was declared without one)."""
    return field.metadata.get(_KEY) or Knob(field.name.replace("_", " "))


def check_knobs(params) -> None:
    """Every knob of ``params`` against its declaration: one of its choices, an integer where it
    must be one, a finite number within its bounds; one line naming the knob, the value and what
    is allowed. A None left where the default is None means "unset" and is not checked."""
    for f in dataclasses.fields(params):
        k, v = knob_of(f), getattr(params, f.name)
        if v is None and f.default is None:
            continue
        if k.choices is not None:
            if v not in k.choices:
                raise ConfigError(f"unknown {f.name} {excerpt(v)}; allowed: {', '.join(map(str, k.choices))}")
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        what = "an integer" if k.integer else "a finite number"
        bounds = k.bounds()
        if not k.allows(v):
            raise ConfigError(f"{f.name} must be {what}{' ' + bounds if bounds else ''}, got {v}")
