"""A watchdog that cleans up the local Ray of a driver that died.

When raysfl starts a local Ray, Ray ties its own processes (GCS, raylet, monitors) to the
driver's life with the kernel's parent-death signal. Two processes the raylet starts, the
dashboard agent and the runtime-env agent, are not: they notice the raylet is gone within
a couple of seconds, then try to report it to the (dead) GCS with a hard-coded 60 s
timeout before exiting. So a SIGKILLed driver leaves ~200 MB of orphans for a minute or
more, and longer on a loaded machine.

This module runs as a separate process (started with the script's path, so it imports
nothing but the standard library). The driver holds the write end of a pipe to its stdin
and sends it, one JSON line at a time, the process ids to watch: Ray's processes, and the
raylet, whose agents and workers it adopts as they appear (they carry the raylet's pid in
their environment, ``RAY_RAYLET_PID``, so they are found even after init adopted them). When the driver exits,
however it exits, the kernel closes the pipe; the reaper then gives the processes a grace
period to exit on their own (a normal ``ray.shutdown()`` has stopped them already) and
SIGKILLs what is left -- only the processes it recorded, each checked by its start time so
that a reused process id is never hit.

Reading /proc makes this Linux-only; elsewhere :func:`start` does nothing.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

GRACE_S = 2.0  # after the driver is gone, how long processes get to exit by themselves


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or
    None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def _started_by(raylets: dict[int, str]) -> list[int]:
    """Processes a watched raylet started (its agents and workers): its children while it lives
    (the reaper looks every few seconds), and any process carrying its pid in ``RAY_RAYLET_PID``
    (which survives the raylet's death and the process's adoption by init). Only processes that
    started after that raylet count (a reused pid never does)."""
    marks = {f"RAY_RAYLET_PID={pid}".encode(): int(start) for pid, start in raylets.items()}
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        ppid = _parent(int(name))
        if ppid in raylets and _start_time(ppid) == raylets[ppid]:  # a child of a live raylet (some Ray
            out.append(int(name))                                    # versions pass no RAY_RAYLET_PID)
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for mark, raylet_start in marks.items():
            if mark in env:
                st = _start_time(int(name))
                if st is not None and int(st) >= raylet_start:
                    out.append(int(name))
                break
    return out


def _parent(pid: int) -> int | None:
    """The parent's process id (field 4 of /proc/PID/stat), or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[1])


def _alive(pid: int, start: str) -> bool:
    st = _start_time(pid)
    return st is not None and st == start and _state(pid) != "Z"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return "X"
    return stat[stat.rindex(")") + 2:].split()[0]


def watch(stream=None) -> None:
    """The reaper's loop: record what the driver names and what its raylets start, and at the
    end of the stream kill what is left."""
    stream = stream if stream is not None else sys.stdin.buffer
    fd = stream.fileno()
    known: dict[int, str] = {}  # pid -> start time
    raylets: dict[int, str] = {}
    buf = b""
    since = time.monotonic()

    def adopt() -> None:
        if not raylets:
            return
        for pid in _started_by(raylets):
            if pid not in known:
                st = _start_time(pid)
                if st is not None:
                    known[pid] = st

    while True:
        interval = 0.5 if time.monotonic() - since < 20 else 3.0  # agents and workers appear early
        ready, _, _ = select.select([fd], [], [], interval)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # the driver is gone (or shut Ray down and let go of us)
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                for key in ("watch", "raylets"):  # [pid, start time] pairs, read by the driver while
                    for pid, st in msg.get(key, []):  # they ran: the driver may be gone before we look
                        known[int(pid)] = str(st)
                        if key == "raylets":
                            raylets[int(pid)] = str(st)
        adopt()
    adopt()  # what appeared since the last look (found by its raylet's pid, whoever its parent is now)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and any(_alive(p, s) for p, s in known.items()):
        time.sleep(0.1)
    for pid, st in known.items():
        if _alive(pid, st):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


_REAPER: subprocess.Popen | None = None


def start(watch_pids: list[int], raylets: list[int]) -> None:
    """Start the reaper for this driver (once per process) and hand it ``watch_pids`` (killed
    if they outlive the driver) and ``raylets`` (whose agents and workers it adopts)."""
    global _REAPER
    if not sys.platform.startswith("linux"):
        return
    if _REAPER is None or _REAPER.poll() is not None:
        _REAPER = subprocess.Popen([sys.executable, "-S", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                   close_fds=True)
    def stamped(pids):
        return [[pid, st] for pid in pids if (st := _start_time(pid)) is not None]

    msg = {"watch": stamped(watch_pids), "raylets": stamped(raylets)}
    _REAPER.stdin.write((json.dumps(msg) + "\n").encode())
    _REAPER.stdin.flush()


def stop() -> None:
    """After a normal ``ray.shutdown()``: let the reaper kill any leftovers and exit."""
    global _REAPER
    if _REAPER is None:
        return
    try:
        _REAPER.stdin.close()
    except OSError:
        pass
    _REAPER = None  # it exits by itself after the grace period; not waited for


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the driver's business
    watch()
