"""A run's checkpoints written beside its next round (ours; issue 44: the driver off the
critical path).

Writing a checkpoint -- the clients' kept states that changed (PSL at 100 clients: 100 files
a round), the ``round_NNNN.pt`` file, the manifest, the pruning -- took the driver 56 ms of a
100-client PSL round on a 2-core machine, while every actor waited for the next round's calls.
The state it writes is fixed when the round ends (the snapshot's values, the counters and
metrics rows copied), so :class:`CheckpointWriter` writes it on a thread of its own while the
next round trains. One checkpoint is written at a time, in round order: the next one waits for
it. Every write still goes to a temporary name and is renamed (:mod:`raysfl.whole_files`), so a
process killed mid-write leaves the checkpoint before it to resume from, as before.

Whatever reads the checkpoints, or changes what one being written reads, waits for it first
(:meth:`wait`): the resume hint of a failed run, the end of a run, a checkpoint on the way out
of an interrupted run, and the federation's next snapshot or any load of the clients' kept
states (the fed server then lets go of kept-state files the checkpoint may still be linking;
:meth:`raysfl.runtime.federation.Federation.snapshot_at`). An error of a write is raised by the
next :meth:`wait` (the next checkpoint or snapshot, or the run's end).
"""

from __future__ import annotations

import sys
import threading


class CheckpointWriter:
    """Runs checkpoint writes on a thread, one at a time (module docstring)."""

    def __init__(self):
        self._thread: threading.Thread | None = None
        self._done = threading.Event()  # set when the write under way has ended
        self._error: BaseException | None = None
        self._what = ""

    def submit(self, write, what: str) -> None:
        """Start ``write()`` (``what``: e.g. "round 3's checkpoint") once the one before is done."""
        self.wait()
        done = threading.Event()
        thread = threading.Thread(target=self._run, args=(write, done), name="raysfl-checkpoint-writer")
        thread.start()  # it may fail (no thread to be had): nothing is then waited for
        self._what, self._done, self._thread = what, done, thread

    def _run(self, write, done: threading.Event) -> None:
        try:
            write()
        except BaseException as e:  # noqa: BLE001 - raised in the run's thread by wait()
            self._error = e
        finally:
            done.set()

    def wait(self, quiet: bool = False) -> None:
        """Wait for the write under way. Its error is raised, or with ``quiet`` (a run failing
        already, whose own error is the one to report) said in one line."""
        if self._thread is not None:
            # the write's end is waited for on an Event, not by Thread.join alone: a signal raised
            # while join waits (Ctrl-C) made CPython 3.11 mark the thread still writing as stopped
            # (its lock released on the way out of the interrupted join), so that the next wait
            # returned at once and a second checkpoint of the same round was written beside it:
            # both wrote its kept states, one rename failed, the round was left without a
            # checkpoint (met in 5 of 41 runs of the demo interrupted just after round 1, 3 of 9
            # on a busy machine). An interrupted Event.wait leaves the thread as it was.
            self._done.wait()
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            if not quiet:
                raise error
            print(f"raysfl: warning: {self._what} could not be written ({type(error).__name__}: "
                  f"{str(error).splitlines()[0] if str(error) else ''})", file=sys.stderr, flush=True)
