"""Code of yours that raysfl imports by name (``module:function``): a metric, a metrics
aggregation, an lr schedule, a plugin module. One way to import it, with one-line errors naming
what asked for it: a module that is not there, one that raises while it is imported, one whose
import calls ``sys.exit()`` (a script's last line left at module level, which would otherwise
end raysfl with that status and nothing run), and a name that is not a function of it."""

from __future__ import annotations

import importlib
import sys
from typing import Callable

from raysfl.errors import ConfigError, excerpt


def guarded(module: str, load, what: str):
    """``load()`` (the import of a user's module), a ``sys.exit()`` in it a one-line ConfigError."""
    try:
        return load()
    except SystemExit as e:
        raise ConfigError(f"{what} {module}: importing it called sys.exit({excerpt(e.code)}), which would end "
                          f"raysfl with nothing run; a plugin module only defines and registers (put a script "
                          f"part under `if __name__ == \"__main__\":`)") from None


def function(module: str, qualname: str, what: str, hint: str) -> Callable:
    """The function ``qualname`` of ``module`` (``__main__``: the running script's), imported here;
    ConfigError in one line naming ``what`` (e.g. "lr-schedule m:f") otherwise, with ``hint``
    (what to give instead)."""
    if module == "__main__":
        mod = sys.modules.get("__main__")
    else:
        try:
            mod = guarded(module, lambda: importlib.import_module(module), what)
        except ModuleNotFoundError as e:
            raise ConfigError(f"{what}: cannot import {module} ({e}); {hint}") from None
        except ConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - the module's own error while importing
            raise ConfigError(f"{what}: importing {module} raised {type(e).__name__}: {e}") from None
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        raise ConfigError(f"{what}: module {module} has no function {qualname}; {hint}")
    return obj
