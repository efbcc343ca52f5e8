"""Metrics of your own (ours; the counterpart of Flower's ``evaluate_metrics_aggregation_fn``):
functions of (predictions, targets) run on every evaluated round's test pass of the model the
run reports (``test_<name>``) and on each client's local test split (``test_<name>_local``,
with ``--local-test-fraction``), written to every sink -- ``metrics.parquet``, TensorBoard,
MLflow, callbacks.

    def mae(outputs, targets):          # torch tensors on the CPU: the model's outputs, the targets
        return (outputs - targets).abs().mean()

    raysfl.run(cfg, data=(x, y), loss="mse", metrics={"mae": mae})
    raysfl run ... --metric my_metrics:mae --metric r2=my_metrics:r2_score

A function sees one whole pass at a time (the whole test set, or one client's local split), so
R², F1 and per-class figures are exact; it returns a number or a dict of numbers
(``{"f1": ..., "recall": ...}``: columns ``test_<name>_<key>``). Passes of several models
(one per client where clients keep their own) or several clients are combined by their sample
counts, or by your ``metrics_aggregation(list of (samples, value)) -> value``.

The config records each as ``name=module:function`` (importable: the driver imports it, the
function object travels to the actors, and a resume imports it again) or as ``name`` alone (a
function handed to ``raysfl.run``, as a loss of yours is: pass it again to resume).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from typing import Callable

from raysfl.errors import ConfigError, excerpt, first_line
from raysfl import user_code
from raysfl.run_registry import RunRegistry

METRIC_ERROR = "metric_error"  # the evaluation's key of a metric that failed on the fed server (its message)
SAMPLES = "samples"  # the default metrics_aggregation: a mean weighted by sample counts
RESERVED = ("accuracy", "loss")  # test_accuracy*, test_loss*: raysfl's own columns
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_RUNS = RunRegistry("metric", "raysfl.run(cfg, metrics={...})", "raysfl.run(cfg, metrics={'other_name': fn})")
FORM = ("name=module:function, module:function, or the name of a function given to raysfl.run(cfg, "
        "metrics={name: fn})")


@dataclass(eq=False)
class Named:
    """A function known to this process by ``name`` while a run uses it (``raysfl.run(cfg, metrics=...)``)."""

    name: str
    fn: Callable


@dataclass(eq=False)
class UserMetrics:
    """The run's metric functions (column stem -> function) and how passes are combined.
    ``keys``: what each returned at the run's start (None: a number; else its dict's keys),
    filled by :meth:`probe`, so every row has the same columns."""

    fns: dict[str, Callable]
    aggregate: Callable | None = None
    keys: dict[str, tuple | None] = field(default_factory=dict)

    def compute(self, outputs, targets) -> dict[str, float]:
        """{column stem: value} of one pass (``outputs``, ``targets``: torch tensors on the CPU);
        ConfigError naming the metric for one that raises or gives no finite number."""
        out = {}
        for name, fn in self.fns.items():
            out.update(self._values(name, _call(name, fn, outputs, targets)))
        return out

    def _values(self, name: str, value) -> dict[str, float]:
        if name not in self.keys:
            raise ConfigError(f"metric '{name}' was not probed before the run")  # raysfl's own slip
        known = self.keys[name]
        if isinstance(value, dict):
            if known is None or set(map(str, value)) != set(known):
                raise ConfigError(f"metric '{name}' returned keys {excerpt(sorted(map(str, value)))}, but "
                                  f"{'a number' if known is None else excerpt(list(known))} at the start of the run; "
                                  f"a metric gives the same keys every time")
            return {f"{name}_{k}": _number(f"{name}[{k!r}]", v) for k, v in value.items()}
        if known is not None:
            raise ConfigError(f"metric '{name}' returned {excerpt(value)}, but a dict at the start of the run")
        return {name: _number(name, value)}

    def probe(self, outputs, targets) -> None:
        """Call every function once (the driver, before anything starts: a bad one stops the run
        at once, in one line) and remember what each returns, so every row has the same columns."""
        for name, fn in self.fns.items():
            value = _call(name, fn, outputs, targets)
            if isinstance(value, dict):
                bad = [k for k in value if not isinstance(k, str) or not re.match(r"[A-Za-z0-9_]+$", k)]
                if bad or not value:
                    raise ConfigError(f"metric '{name}' returned {'key ' + excerpt(bad[0]) if bad else 'an empty dict'}"
                                      f"; its keys name columns (test_{name}_<key>): letters, digits and _")
            self.keys[name] = tuple(value) if isinstance(value, dict) else None
            self._values(name, value)

    def columns(self, suffix: str = "") -> list[str]:
        """The metrics columns of the test pass (``suffix`` "_local": of the local splits)."""
        out = []
        for name in self.fns:
            keys = self.keys.get(name)
            out += [f"test_{name}{suffix}"] if keys is None else [f"test_{name}_{k}{suffix}" for k in keys]
        return out

    def combine(self, passes: list[tuple[int, dict[str, float]]], suffix: str = "") -> dict[str, float]:
        """{column: value} of several passes ((samples, values of :meth:`compute`)): by sample
        count, or the run's ``metrics_aggregation``; NaN for a column no pass has."""
        out = {}
        for stem in [c[len("test_"):len(c) - len(suffix)] for c in self.columns(suffix)]:
            pairs = [(int(n), v[stem]) for n, v in passes if stem in v and n > 0]
            if not pairs:
                value = float("nan")
            elif self.aggregate is None:
                value = sum(n * v for n, v in pairs) / sum(n for n, _ in pairs)
            else:
                try:
                    value = self.aggregate(pairs)
                except Exception as e:  # noqa: BLE001 - the user's code
                    raise ConfigError(f"metrics_aggregation raised {type(e).__name__} on metric '{stem}': "
                                      f"{first_line(e)}") from None
                value = _number(f"metrics_aggregation of {stem}", value)
            out[f"test_{stem}{suffix}"] = value
        return out


def _call(name: str, fn, outputs, targets):
    try:
        return fn(outputs, targets)
    except Exception as e:  # noqa: BLE001 - the user's code: one line naming it
        raise ConfigError(f"metric '{name}' raised {type(e).__name__}: {first_line(e)}") from None


def _number(name: str, value) -> float:
    """``value`` (a Python or NumPy number, a one-element tensor or array) as a finite float."""
    if not isinstance(value, numbers.Real) and callable(getattr(value, "item", None)):
        size = value.numel() if callable(getattr(value, "numel", None)) else getattr(value, "size", 0)
        if size == 1:
            value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        shape = getattr(value, "shape", None)
        shown = f"a {type(value).__name__} of shape {tuple(shape)}" if shape is not None else \
            f"{excerpt(value)} ({type(value).__name__})"
        raise ConfigError(f"metric '{name}' returned {' '.join(shown.split())}; a metric returns a number (a "
                          f"one-element tensor) or a dict of numbers")
    if not math.isfinite(value):
        raise ConfigError(f"metric '{name}' returned {value}; a metric returns a finite number")
    return float(value)


# ----------------------------------------------------------------- the config's names
def parse(text: str) -> list[tuple[str, str | None]]:
    """``cfg.metrics`` ("a=mod:fn,mod:g,b") as [(name, "module:function" or None: one given to
    raysfl.run)]; ConfigError naming an entry that is none of these."""
    out: list[tuple[str, str | None]] = []
    for entry in [e.strip() for e in str(text or "").split(",") if e.strip()]:
        name, _, path = entry.rpartition("=") if "=" in entry else ("", "", entry)
        if ":" in path:
            module, _, attr = path.partition(":")
            if not module or not attr or not all(p.isidentifier() for p in module.split(".")) \
                    or not all(p.isidentifier() for p in attr.split(".")):
                raise ConfigError(f"metric {excerpt(entry)} is not {FORM}")
            name = name or attr.split(".")[-1]
        elif name:
            raise ConfigError(f"metric {excerpt(entry)} is not {FORM}")
        else:
            name, path = path, None
        _check_name(name, f"metric {excerpt(entry)}: its name")
        if any(name == n for n, _ in out):
            raise ConfigError(f"metric name {excerpt(name)} is given twice; give each metric once")
        out.append((name, path))
    return out


def _check_name(name, what: str) -> None:
    """A metric's name makes its columns (``test_<name>``): an identifier that is not raysfl's own."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"{what} {excerpt(name)} names columns (test_<name>): letters, digits and _, not first "
                          f"a digit")
    if name.startswith(RESERVED):
        raise ConfigError(f"{what} {excerpt(name)} would make columns raysfl writes itself (test_accuracy, "
                          f"test_loss, ...): name it otherwise, e.g. my_{name}")


def parse_aggregation(text: str) -> str | None:
    """``cfg.metrics_aggregation``: None for :data:`SAMPLES`, else the module:function or name."""
    text = str(text or SAMPLES).strip()
    if text == SAMPLES:
        return None
    if ":" not in text and not _NAME.match(text):
        raise ConfigError(f"metrics-aggregation {excerpt(text)} is not '{SAMPLES}', module:function or the name of "
                          f"a function given to raysfl.run(cfg, metrics_aggregation=fn)")
    return text


def imported(path: str, what: str) -> Callable:
    """The function ``module:function`` names, imported here; ConfigError in one line if it is not there."""
    module, _, attr = path.partition(":")
    if not module or not attr or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ConfigError(f"{what} {excerpt(path)} is not module:function")
    return user_code.function(module, attr, f"{what} {excerpt(path)}",
                              "give a module importable from here (the current directory is on the path)")


def _given(name: str, what: str) -> Callable:
    held = _RUNS.lookup(name)
    if held is None:
        raise ConfigError(f"{what} '{name}' is a function of yours given to raysfl.run: pass it again "
                          f"(raysfl.run(cfg, metrics={{'{name}': fn}})), or name it as module:function")
    return held.fn


def of_config(cfg) -> UserMetrics | None:
    """The run's metrics, imported or taken from those given to ``raysfl.run`` (None: none)."""
    entries = parse(getattr(cfg, "metrics", ""))
    if not entries:
        return None
    fns = {name: imported(path, "metric") if path else _given(name, "metric") for name, path in entries}
    agg = parse_aggregation(getattr(cfg, "metrics_aggregation", SAMPLES))
    if agg is not None:
        agg = imported(agg, "metrics-aggregation") if ":" in agg else _given(_AGG + agg, "metrics-aggregation")
    return UserMetrics(fns, agg)


def modules(cfg) -> list[str]:
    """The modules the config's metrics are imported from (a resume imports them again)."""
    out = [path.partition(":")[0] for _, path in parse(getattr(cfg, "metrics", "")) if path]
    agg = parse_aggregation(getattr(cfg, "metrics_aggregation", SAMPLES))
    return list(dict.fromkeys(out + ([agg.partition(":")[0]] if agg and ":" in agg else [])))


_AGG = "aggregation:"  # the registry name of a metrics_aggregation given to raysfl.run


def registered(cfg, metrics, aggregation):
    """``raysfl.run(cfg, metrics=..., metrics_aggregation=...)``: the functions registered in this
    process while the run goes, ``cfg.metrics`` (and ``cfg.metrics_aggregation``) set to name them.
    ``metrics``: {name: function or "module:function"}, or a list of functions (named by their
    ``__name__``). Returns an ExitStack to enter."""
    from contextlib import ExitStack

    stack = ExitStack()
    if metrics is not None:
        if callable(metrics):
            metrics = [metrics]
        if isinstance(metrics, (list, tuple)):
            metrics = {getattr(fn, "__name__", ""): fn for fn in metrics}
        if not isinstance(metrics, dict):
            raise ConfigError(f"metrics must be {{name: function}} or a list of functions, got {excerpt(metrics)}")
        entries = []
        for name, fn in metrics.items():
            _check_name(name, "metric name")
            if isinstance(fn, str):
                entries.append(f"{name}={fn}")
            elif callable(fn):
                stack.enter_context(_RUNS.registered(Named(name, fn)))
                entries.append(name)
            else:
                raise ConfigError(f"metric '{name}' must be a function (outputs, targets) -> number, got "
                                  f"{type(fn).__name__}")
        cfg.metrics = ",".join(entries)
    if aggregation is not None:
        if isinstance(aggregation, str):
            cfg.metrics_aggregation = aggregation
        elif callable(aggregation):
            name = re.sub(r"\W", "_", getattr(aggregation, "__name__", "") or "fn").strip("_") or "fn"
            name = name if _NAME.match(name) else "fn_" + name
            stack.enter_context(_RUNS.registered(Named(_AGG + name, aggregation)))
            cfg.metrics_aggregation = name
        else:
            raise ConfigError(f"metrics_aggregation must be a function (list of (samples, value)) -> value, got "
                              f"{type(aggregation).__name__}")
    return stack
