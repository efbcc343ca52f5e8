"""Errors raised for bad user input.

Every message is one line naming the bad value and what is allowed; the CLI prints it
and exits with status 2 (no traceback).
"""


class ConfigError(ValueError):
    """A configuration value, CLI flag, data set or file that cannot be used."""


class RunFailed(RuntimeError):
    """A run stopped part-way (an actor died, the cluster went away); finished rounds are
    kept in the run directory and the message says how to resume."""


class Diverged(RunFailed):
    """Training diverged: a client's loss became NaN or inf in round ``round`` (that round's
    metrics row is kept, its loss not finite; the run's checkpoints stop before it)."""

    def __init__(self, message: str, round: int):
        super().__init__(message)
        self.round = round


EXCERPT_CHARS = 160  # the most characters of a user's value an error message echoes (a path fits)


def excerpt(value, limit: int = EXCERPT_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for an error message that names a
    user's value: a string as ``'abc...' (1,000,000 characters)``, a list or mapping by its
    first items and its size. Built with :mod:`reprlib`, so a huge or self-referring value
    (a YAML alias bomb, a 100k-element list) is never walked whole, and every message stays one
    short line."""
    import os
    import reprlib

    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value):,} characters)"
    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 2, 4, 4, 4, 4
    r.maxstring = r.maxother = r.maxlong = limit
    try:
        text = r.repr(value)
    except ValueError:  # an integer too long for str() (Python's 4300-digit limit)
        return f"an integer of {value.bit_length():,} bits"
    except Exception:  # noqa: BLE001 - a user object whose repr fails
        return f"a {type(value).__name__}"
    if len(text) > limit:
        cut = text[:limit].rsplit(", ", 1)[0]
        text = (cut if len(cut) > limit // 2 else text[:limit]) + ", ..."
    try:
        size = len(value) if isinstance(value, (list, tuple, dict, set)) else None
    except TypeError:
        size = None
    return f"{text} (a {type(value).__name__} of {size:,} items)" if size is not None and size > 4 else text
