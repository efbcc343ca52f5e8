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


def first_line(err: BaseException, limit: int | None = EXCERPT_CHARS, empty: str | None = None) -> str:
    """The first line of an error's message, for a one-line report of it: its type's name when
    the message is empty (or ``empty``, when given), cut at a word boundary with ' ...' past
    ``limit`` characters (None: not cut)."""
    first = (str(err).strip().splitlines() or [type(err).__name__ if empty is None else empty])[0]
    if limit is None or len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else first[:limit]) + " ..."


def connect_error(host: str, port: int, timeout: float) -> str | None:
    """Why ``host:port`` takes no TCP connection within ``timeout`` seconds (``does not resolve
    (...)``, ``no answer within N s``, ``Connection refused``), or None when it does: a check of a
    server's address before a client that retries for minutes is pointed at it (``RAY_ADDRESS``,
    an MLflow server)."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"does not resolve ({e.strerror or e})"
    last: OSError | None = None
    for family, socktype, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, socktype, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(sockaddr)
            return None
        except OSError as e:
            last = e
    if isinstance(last, TimeoutError):
        return f"no answer within {timeout:g} s"
    return str(getattr(last, "strerror", None) or last or "no address")


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
