"""Ray's one harmless error-level line, kept off the console.

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

import os
import sys
import threading
from contextlib import contextmanager

ACTOR_ARGS_LINE = "has constructor arguments in the object store and max_restarts > 0"


@contextmanager
def without_line(fragment: str = ACTOR_ARGS_LINE):
    """Inside the block, lines written to this process's stderr (file descriptor 2, so C++
    logging too) that contain ``fragment`` are dropped; every other line goes through
    unchanged. Does nothing where stderr has no file descriptor (e.g. a captured stream)."""
    try:
        fd = sys.stderr.fileno()
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        yield
        return
    saved = os.dup(fd)
    read_end, write_end = os.pipe()
    os.dup2(write_end, fd)
    os.close(write_end)
    needle = fragment.encode()

    def pump() -> None:
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                if needle not in line:
                    os.write(saved, line)

    reader = threading.Thread(target=pump, name="raysfl-stderr-filter", daemon=True)
    reader.start()
    try:
        yield
    finally:
        try:
            sys.stderr.flush()
        finally:
            os.dup2(saved, fd)  # the pipe's last write end closes: the reader sees its end
            reader.join(timeout=5)
            os.close(saved)
