"""Callbacks: your code, called by the driver as a run goes (``raysfl.run(cfg, callbacks=[...])``).

A callback is either a plain function of the round's metrics row (the dict that becomes one
row of ``metrics.parquet``) or an object with any of the three methods of :class:`Callback`.
Returning ``True`` from ``on_round`` (or from the function) stops the run after that round:
it ends cleanly, with that round's checkpoint written (unless ``--checkpoint-every 0``), its
rows in ``metrics.parquet`` and ``RunResult.stopped`` set; ``--resume`` continues it.

    def stop_at_90(row):
        return row["test_accuracy"] >= 0.9

    raysfl.run(cfg, callbacks=[stop_at_90, raysfl.trackers.MLflowLogger("sqlite:///mlflow.db")])

Callbacks run in the driver, between rounds (the next round starts when they return), and
in the order given; an exception in one ends the run like any other error, after every
callback's ``on_run_end`` saw it.
"""

from __future__ import annotations

from pathlib import Path

from raysfl.errors import ConfigError


class Callback:
    """Override what you need; every method is optional."""

    def on_run_start(self, run_dir: Path, config: dict) -> None:
        """Once, after the run directory and ``config.json`` exist and before Ray starts
        (``config``: the run's settings as in ``config.json``)."""

    def on_round(self, row: dict) -> bool | None:
        """After every round, with its metrics row. Return True to stop the run here."""

    def on_model(self, state_dict: dict) -> None:
        """Once, after a run that did not fail and before ``on_run_end``: the trained global
        model as a ``state_dict`` (torch tensors, in your own model's keys for a model you
        brought); not called where the algorithm keeps no global model (PSL, GAPSL, FLEX-SFL)."""

    def on_run_end(self, run_dir: Path, rows: list[dict], error: BaseException | None) -> None:
        """Once, when the run ends: finished, stopped, or failed (``error``)."""


class _Function(Callback):
    def __init__(self, fn):
        self.fn = fn

    def on_round(self, row: dict) -> bool | None:
        return self.fn(row)


def as_callbacks(callbacks) -> list[Callback]:
    """Functions and Callback-like objects as a list of Callbacks (ConfigError for anything else)."""
    if callbacks is None:
        return []
    if callable(callbacks) or isinstance(callbacks, Callback):
        callbacks = [callbacks]
    out = []
    for cb in callbacks:
        if any(hasattr(cb, m) for m in ("on_run_start", "on_round", "on_run_end")):
            out.append(cb)
        elif callable(cb):
            out.append(_Function(cb))
        else:
            raise ConfigError(f"a callback must be a function of the metrics row or an object with on_round / "
                              f"on_run_start / on_run_end; got {type(cb).__name__}")
    return out


class Callbacks:
    """The run's callbacks, called together."""

    def __init__(self, callbacks=None):
        self.items = as_callbacks(callbacks)

    def start(self, run_dir: Path, config: dict) -> None:
        for cb in self.items:
            if hasattr(cb, "on_run_start"):
                cb.on_run_start(run_dir, config)

    def round(self, row: dict) -> bool:
        """Every callback sees the row; True if any asked to stop."""
        stop = False
        for cb in self.items:
            if hasattr(cb, "on_round") and cb.on_round(dict(row)) is True:
                stop = True
        return stop

    def model(self, state_dict_of) -> None:
        """Hand the trained model (``state_dict_of()``, asked only if a callback wants it) to
        every callback with an ``on_model``."""
        wanting = [cb for cb in self.items if callable(getattr(cb, "on_model", None))
                   and type(cb).on_model is not Callback.on_model]
        state = state_dict_of() if wanting else None
        if state is not None:
            for cb in wanting:
                cb.on_model(state)

    def end(self, run_dir: Path, rows: list[dict], error: BaseException | None) -> None:
        first = None
        for cb in self.items:
            if hasattr(cb, "on_run_end"):
                try:
                    cb.on_run_end(run_dir, list(rows), error)
                except Exception as e:  # noqa: BLE001 - every callback gets its end; the first error is raised
                    first = first or e
        if first is not None and error is None:
            raise first
