"""SIGINT and SIGTERM end a run the same way (docs/reliability.md, "Signals").

While a run goes on (:func:`handling`), both signals raise :class:`Interrupted`, a
``KeyboardInterrupt``: the run stops where it is, the rounds that finished are checkpointed,
and the CLI prints one line and exits with 128 + the signal's number (130, 143). Three things
make that hold:

* ``ray.init`` replaces the driver's SIGTERM handler (with ``sys.exit``), and Ray's core worker
  puts a C-level handler under it that dumps stacks; :func:`reinstall` (called right after
  ``ray.init``) puts ours back, which removes both.
* ``timeout`` (and a terminal's Ctrl-C, Slurm's scancel) signals the driver's whole process
  group, Ray's processes included: a GCS and raylet killed with the driver leave it waiting a
  minute on them before it can record anything. The local Ray is started with SIGTERM blocked
  (:func:`children_spared`; the mask is inherited by every process it starts, as Ray itself does
  for SIGINT), so only the driver takes the signal, and it shuts Ray down itself.
* A shell starts a background job (``&``) of a non-interactive script with SIGINT ignored;
  :func:`handling` installs its handler anyway, so such a run can still be interrupted.
* Ray's start (``ray.init``) runs under :func:`held` as well: a SIGINT inside it could leave the
  driver deadlocked in Ray's C++ (a half-built GCS accessor's destructor waiting on its own
  thread, met once in 50 interrupted ``raysfl tune`` searches); the signal is raised once Ray is
  up, and a second one cuts the start short.
* The few statements that record a finished round (its metrics row, then its checkpoint) run
  under :func:`held`: a signal that arrives then is kept and raised once they are done, so a
  round whose line was printed is never left without its checkpoint.

Only the main thread can install handlers; elsewhere (a run in a thread) these are no-ops.
A handler of your own (one that is not Python's or Ray's default) is left alone.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT or SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_state = {"depth": 0, "held": 0, "pending": None, "saved": {}, "second_cuts": 0}


def _handler(signum, frame):  # noqa: ARG001 - the signal module's signature
    if _state["held"] and not (_state["second_cuts"] and _state["pending"] is not None):
        _state["pending"] = _state["pending"] or signum
        return
    # raised now, for a signal held before it too: one that came as the last held block ended
    # (after its count went down, before it read what was pending) would otherwise leave that
    # one pending, to be raised again by the next held block -- the way out's checkpoint
    _state["pending"] = None
    raise Interrupted(signum)


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


def _replaceable(h) -> bool:
    """Python's and Ray's defaults (and ours) may be replaced; a handler of the user's is kept."""
    if h in (None, signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler, _handler):
        return True
    return (getattr(h, "__module__", "") or "").split(".")[0] == "ray"


def _install() -> None:
    for s in SIGNALS:
        try:
            if _replaceable(signal.getsignal(s)):
                signal.signal(s, _handler)
        except (ValueError, OSError):  # not the main thread of the main interpreter
            pass


@contextmanager
def handling():
    """SIGINT and SIGTERM raise :class:`Interrupted` in the block; the handlers before it are put
    back after it (nested blocks share the outer one's)."""
    if not _main():
        yield
        return
    outer = _state["depth"] == 0
    if outer:
        _state["saved"] = {s: signal.getsignal(s) for s in SIGNALS}
        _state["pending"] = None
    _state["depth"] += 1
    _install()
    try:
        yield
    finally:
        _state["depth"] -= 1
        if outer:
            for s, h in _state["saved"].items():
                if signal.getsignal(s) is _handler and h is not None:
                    signal.signal(s, h)
            _state["saved"] = {}


def reinstall() -> None:
    """Put the handlers back after ``ray.init`` replaced SIGTERM's (inside :func:`handling`); the
    handler Ray left is what is restored when the block ends."""
    if _main() and _state["depth"]:
        _install()


@contextmanager
def children_spared():
    """Start processes in the block with SIGTERM blocked (a signal mask is inherited through
    fork and exec): a signal to the whole process group then reaches only this one. Ray blocks
    SIGINT in the processes it starts the same way; it stops them with SIGKILL when SIGTERM is
    not heeded within a second. A SIGTERM for this process meanwhile waits until the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        if signal.SIGTERM not in before:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@contextmanager
def held(second_cuts_short: bool = False):
    """Run the block to its end even if a signal comes; the signal is raised after it (unless
    the block raised something itself). ``second_cuts_short``: a second signal meanwhile is
    raised at once (for a block that may take long, such as Ray's start: a user who presses
    Ctrl-C again is not made to wait)."""
    if not (_main() and _state["depth"]):
        yield
        return
    _state["held"] += 1
    _state["second_cuts"] += second_cuts_short
    ok = False
    try:
        yield
        ok = True
    finally:
        _state["held"] -= 1
        _state["second_cuts"] -= second_cuts_short
        pending = _state["pending"]
        if not _state["held"] and pending is not None:
            _state["pending"] = None
            if ok:
                raise Interrupted(pending)
