"""Your own model or data set, known by name in this process while a run uses it.

``raysfl.run(cfg, model=..., data=...)`` registers the objects under ``custom-<name>`` so that
the config (which holds names only) validates and every actor gets the object itself. Runs
in threads of one process (``raysfl compare``) may share an object; two different objects
under one name are refused.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

from raysfl.errors import ConfigError


class RunRegistry:
    """Name -> (object, runs using it), reference-counted."""

    def __init__(self, kind: str, pass_again: str, rename: str):
        self.kind, self.pass_again, self.rename = kind, pass_again, rename  # words of the error messages
        self._lock = threading.Lock()
        self._held: dict[str, tuple[object, int]] = {}

    @contextmanager
    def registered(self, obj):
        """Make ``obj`` known by ``obj.name`` while the block runs (nested and concurrent runs
        with the same object are fine; another object under the same name is not)."""
        with self._lock:
            held = self._held.get(obj.name)
            if held is not None and held[0] is not obj:
                raise ConfigError(f"another run in this process uses a different {self.kind} named '{obj.name}'; "
                                  f"give this one another name ({self.rename})")
            self._held[obj.name] = (obj, (held[1] if held else 0) + 1)
        try:
            yield obj
        finally:
            with self._lock:
                o, n = self._held[obj.name]
                if n == 1:
                    del self._held[obj.name]
                else:
                    self._held[obj.name] = (o, n - 1)

    def lookup(self, name: str):
        """The registered object ``name``, or None."""
        held = self._held.get(name)
        return held[0] if held else None

    def missing(self, name: str) -> ConfigError:
        """The error for an object that is not given to this run (e.g. a resumed one)."""
        return ConfigError(f"{self.kind} '{name}' is your own {self.kind}: pass it again, {self.pass_again}")
