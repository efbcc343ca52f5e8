"""The checkpoint writer (runtime/checkpoint_writer.py): a round's checkpoint is written on a
thread while the next round trains, one at a time and in order; a failed write is raised at the
next checkpoint or the run's end, or said in one line on a run failing already."""

from __future__ import annotations

import threading
import time

import pytest

from raysfl.runtime.checkpoint_writer import CheckpointWriter


def test_writes_run_one_at_a_time_in_order_beside_the_caller():
    writer, done, running = CheckpointWriter(), [], []
    release = threading.Event()

    def write(k):
        def go():
            running.append(k)
            assert len(running) - len(done) == 1  # never two at once
            if k == 1:
                release.wait(5)
            done.append(k)
        return go

    writer.submit(write(1), "round 1's checkpoint")
    time.sleep(0.05)
    assert running == [1] and done == []  # the caller goes on while round 1's is written
    release.set()
    writer.submit(write(2), "round 2's checkpoint")  # waits for round 1's first
    writer.submit(write(3), "round 3's checkpoint")
    writer.wait()
    assert done == [1, 2, 3]


def test_a_failed_write_is_raised_later_or_said_in_one_line(capsys):
    writer = CheckpointWriter()

    def full():
        raise OSError(28, "No space left on device")

    writer.submit(full, "round 4's checkpoint")
    with pytest.raises(OSError, match="No space left"):
        writer.submit(lambda: None, "round 5's checkpoint")
    writer.wait()  # raised once
    writer.submit(full, "round 6's checkpoint")
    writer.wait(quiet=True)
    assert capsys.readouterr().err.strip() == ("raysfl: warning: round 6's checkpoint could not be written "
                                               "(OSError: [Errno 28] No space left on device)")


def test_a_wait_cut_short_by_a_signal_still_waits_for_the_write_the_next_time():
    """Ctrl-C while the run waits for a checkpoint being written (a snapshot waits so): the
    next wait still waits for it, and the next checkpoint starts after it. Before, the wait
    was ``Thread.join``, which CPython 3.11 leaves believing the thread stopped when a signal
    interrupts it: the way out of the interrupted run then wrote the same round's checkpoint
    beside it, both wrote its kept states, and the round was left with none."""
    import os
    import signal

    from raysfl.runtime import interrupts

    writer, order, release = CheckpointWriter(), [], threading.Event()

    def first():
        release.wait(10)
        order.append("round 1's")

    writer.submit(first, "round 1's checkpoint")
    signal_soon = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
    signal_soon.start()
    with pytest.raises(interrupts.Interrupted):
        with interrupts.handling():
            writer.wait()  # the signal arrives while the write goes on
    signal_soon.join()
    threading.Timer(0.3, release.set).start()
    writer.submit(lambda: order.append("round 2's"), "round 2's checkpoint")
    writer.wait()
    assert order == ["round 1's", "round 2's"]


def test_a_write_whose_thread_could_not_start_is_not_waited_for(monkeypatch):
    """Where no thread is to be had, ``submit`` raises and leaves nothing to wait for: the run's
    end (``wait`` in a ``finally``) does not hang on a write that never began, and the next
    checkpoint goes as usual."""
    writer, wrote = CheckpointWriter(), []

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as m:
        m.setattr(threading.Thread, "start", no_thread)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            writer.submit(lambda: wrote.append(1), "round 1's checkpoint")
    waiting = threading.Thread(target=writer.wait, daemon=True)
    waiting.start()
    waiting.join(10)
    assert not waiting.is_alive() and wrote == []
    writer.submit(lambda: wrote.append(2), "round 2's checkpoint")
    writer.wait()
    assert wrote == [2]
