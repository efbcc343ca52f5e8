"""Ray's harmless lines, kept off the console.

Ray 2.60 says on every local ``ray.init`` "Token authentication is enabled for this Ray
cluster. Set RAY_AUTH_MODE=disabled to opt out ..." (a warning of its Python logger, which
reaches stderr when Ray's logging is not configured): :func:`hide_token_auth_line` filters
that one record (the warning that authentication is *disabled* still shows). And:

Creating an actor whose constructor arguments live in the object store, with
``max_restarts > 0``, makes Ray's core worker print (once per process, at ERROR level)
"... has constructor arguments in the object store and max_restarts > 0. If the arguments in
the object store go out of scope or are lost, the actor restart will fail" (ray-project/ray
issue 53727). raysfl's actors get the data set and the initial model that way on purpose --
put once, shared by every actor -- and the driver holds both references
(``Federation.ds_ref``, ``Federation.model_ref``) for the whole run, so they never go out of
scope while an actor may restart; when the driver itself is gone, so is the run. The line
therefore reports a risk raysfl has already closed, yet reads like a failure at the start of
every healthy run. :func:`without_line` drops it, and only it, while the actors are created.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import contextmanager

ACTOR_ARGS_LINE = "has constructor arguments in the object store and max_restarts > 0"


TOKEN_AUTH_LINE = "Token authentication is enabled for this Ray cluster"
TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


class _DropTokenLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return TOKEN_AUTH_LINE not in record.getMessage()


def hide_token_auth_line() -> None:
    """Drop Ray's "token authentication is enabled" record from now on (once per process)."""
    logger = logging.getLogger(TOKEN_AUTH_LOGGER)
    if not any(isinstance(f, _DropTokenLine) for f in logger.filters):
        logger.addFilter(_DropTokenLine())


_LOCK = threading.Lock()
_ACTIVE: dict = {"depth": 0, "filter": None}  # one filter per process, however many threads ask


@contextmanager
def without_line(fragment: str = ACTOR_ARGS_LINE):
    """Inside the block, lines written to this process's stderr (its file descriptor, so C++
    logging too) that contain ``fragment`` are dropped; every other line goes through
    unchanged. Threads may nest and overlap blocks (``raysfl compare`` starts runs side by
    side): the first installs the filter, the last removes it. Does nothing where stderr has
    no file descriptor (e.g. a captured stream)."""
    with _LOCK:
        if _ACTIVE["depth"] == 0:
            _ACTIVE["filter"] = _install(fragment.encode())
        _ACTIVE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _ACTIVE["depth"] -= 1
            if _ACTIVE["depth"] == 0 and _ACTIVE["filter"] is not None:
                _remove(*_ACTIVE["filter"])
                _ACTIVE["filter"] = None


def _install(needle: bytes):
    """Point stderr's descriptor at a pipe whose reader forwards every line without ``needle``
    to the original; returns (descriptor, original's copy, reader) or None."""
    try:
        fd = sys.stderr.fileno()
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        return None
    saved = os.dup(fd)
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)

    def pump() -> None:  # owns ``saved`` from here on: closes it when the pipe ends
        try:
            with os.fdopen(read_end, "rb") as lines:
                for line in lines:
                    if needle not in line:
                        try:
                            os.write(saved, line)
                        except OSError:
                            pass
        finally:
            os.close(saved)

    reader = threading.Thread(target=pump, name="raysfl-stderr-filter", daemon=True)
    reader.start()
    return fd, saved, reader


def _remove(fd: int, saved: int, reader: threading.Thread) -> None:
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(saved, fd)  # the pipe's write end closes: the reader forwards what is left and ends
    reader.join(timeout=5)
