"""What a tuning searches: a grid of knobs (a run setting such as ``lr``, ``server_lr`` or
``momentum``, or an algorithm's own knob such as FedProx's ``mu``), the values each takes, how
a grid widens once at its edge, and which knobs a run reads at all. No torch, no Ray.
"""

from __future__ import annotations

import dataclasses
import math

from raysfl.errors import ConfigError

LOG_KNOBS = ("lr", "server_lr")  # searched on a log scale: widened by the grid's own step at an edge
MIN_VALUES, MIN_DECADES = 4, 1.5   # a learning-rate grid: at least 4 values over at least 1.5 decades


def parse_values(knob: str, text: str) -> tuple[float, ...]:
    """``0.01,0.03,0.1`` or ``log:LOW:HIGH:N`` (N values evenly spaced in log between LOW and
    HIGH); one line naming the knob and what is allowed otherwise."""
    text = text.strip()
    try:
        if text.startswith("log:"):
            _, lo, hi, n = text.split(":")
            lo, hi, n = float(lo), float(hi), int(n)
            if not (lo > 0 and hi > lo and n >= 2):
                raise ValueError
            values = tuple(lo * (hi / lo) ** (i / (n - 1)) for i in range(n))
        else:
            values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"--grid {knob}={text}: allowed: comma-separated numbers (lr=0.01,0.03,0.1) or "
                          f"log:LOW:HIGH:N (lr=log:0.001:0.1:5)") from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"--grid {knob}={text}: give at least one finite value")
    if len(set(values)) != len(values):
        raise ConfigError(f"--grid {knob}={text} lists a value twice")
    return values


def parse_grid(items: list[str]) -> dict[str, tuple[float, ...]]:
    """``["lr=0.01,0.1", "momentum=0,0.9"]`` -> {knob: values}, in the order given."""
    grid: dict[str, tuple[float, ...]] = {}
    for item in items:
        knob, sep, values = item.partition("=")
        knob = knob.strip().replace("-", "_")
        if not sep or not knob:
            raise ConfigError(f"--grid {item!r}: allowed: KNOB=V1,V2,... (e.g. lr=0.01,0.03,0.1)")
        if knob in grid:
            raise ConfigError(f"--grid names '{knob}' twice")
        grid[knob] = parse_values(knob, values)
    if not grid:
        raise ConfigError("tune needs --grid KNOB=V1,V2,... (e.g. --grid lr=0.01,0.03,0.1,0.3)")
    return grid


def check_span(knob: str, values: tuple[float, ...]) -> None:
    """A learning-rate grid holds at least 4 values over at least 1.5 decades (a declared
    table's grid; ``raysfl tune`` takes any grid)."""
    if knob not in LOG_KNOBS:
        return
    lo, hi = min(values), max(values)
    if len(values) < MIN_VALUES or lo <= 0 or math.log10(hi / lo) < MIN_DECADES - 0.005:  # values at 3 digits
        raise ConfigError(f"the {knob} grid {list(values)} must hold at least {MIN_VALUES} positive values over "
                          f"at least {MIN_DECADES:g} decades")


def order(values: tuple[float, ...], first: float | None) -> tuple[float, ...]:
    """``values`` with ``first`` (the run's own setting, e.g. the paper's) first: the first
    trial of a row's successive halving is never stopped, so the setting the paper ran gets a
    whole run, and later ones are measured against it."""
    if first is None or first not in values:
        return tuple(values)
    return (first, *[v for v in values if v != first])


def widened(knob: str, values: tuple[float, ...], chosen: float) -> float | None:
    """The one value beyond the grid's edge where ``chosen`` sits on it (a log knob: the grid's
    own step, the ratio of the two values nearest that edge), else None."""
    if knob not in LOG_KNOBS or len(values) < 2:
        return None
    s = sorted(values)
    if chosen == s[-1]:
        return float(f"{s[-1] * (s[-1] / s[-2]):.3g}")
    if chosen == s[0]:
        return float(f"{s[0] / (s[1] / s[0]):.3g}")
    return None


def at_edge(knob: str, values: tuple[float, ...], chosen: float) -> bool:
    return knob in LOG_KNOBS and len(values) >= 2 and chosen in (min(values), max(values))


def reads(cfg, knob: str) -> bool:
    """Whether a run of ``cfg`` reads ``knob``: the server lr only where there is a server
    side (not FedAvg's whole-model clients); momentum only under SGD; an algorithm's knob only
    where it is that algorithm's."""
    from raysfl.algorithms import get_algorithm

    spec = get_algorithm(cfg.algo)
    if knob == "server_lr":
        return spec.make_planner(cfg).servers > 0
    if knob == "momentum":
        return cfg.optimizer == "sgd"
    if hasattr(cfg, knob) and knob not in ("algo_params", "devices", "resources"):
        return True
    return cfg.algo_params is not None and knob in {f.name for f in dataclasses.fields(cfg.algo_params)}


def known(cfg, knob: str) -> bool:
    """Whether ``knob`` names a number a run can be given: a run setting, or a knob of some
    registered algorithm."""
    from raysfl.algorithms import ALGORITHMS

    if knob in ("lr", "server_lr", "momentum", "weight_decay", "lr_decay"):
        return True
    return any(knob in {f.name for f in dataclasses.fields(cls.params_cls)} for cls in ALGORITHMS.values())


def apply(cfg, knobs: dict[str, float]):
    """``cfg`` with ``knobs`` set (run settings, or the algorithm's own), validated again."""
    from raysfl.resolve import validate

    top = {k: v for k, v in knobs.items() if k in {f.name for f in dataclasses.fields(cfg)}}
    own = {k: v for k, v in knobs.items() if k not in top}
    new = dataclasses.replace(cfg, **top)
    if own:
        new = dataclasses.replace(new, algo_params=dataclasses.replace(cfg.algo_params, **own))
    return validate(new)


def product(grid: dict[str, tuple[float, ...]]) -> list[dict[str, float]]:
    """Every combination of the grid's values, the first value of each knob first."""
    combos: list[dict[str, float]] = [{}]
    for knob, values in grid.items():
        combos = [{**c, knob: v} for c in combos for v in values]
    return combos
