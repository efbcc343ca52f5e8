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
raylet, whose agents and workers it adopts as they appear. Adoption must survive the raylet's death
(its children are then re-parented to init), so a process counts as the raylet's by any of three
marks: it is a live raylet's child; it carries the raylet's pid in its environment
(``RAY_RAYLET_PID``; not always readable: a process title may overwrite the environment); or it
holds the raylet's own log files open (the agents inherit the raylet's stdout and stderr).
The last mark is what finds the agents of a driver killed in the moment they start. When the driver exits,
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
import stat
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


def _output_files(pid: int) -> list[list[int]]:
    """[device, inode] of the regular files the process writes its stdout and stderr to (a raylet's
    log files, which its agents inherit); terminals, /dev/null and pipes are shared too widely to
    mark anything, so they are left out."""
    out = []
    for fd in (1, 2):
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append([st.st_dev, st.st_ino])
    return out


def _holds(pid: int, files: set[tuple[int, int]]) -> bool:
    """Whether the process has one of ``files`` ((device, inode) pairs) open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in files:
            return True
    return False


def _started_by(raylets: dict[int, str], outputs: set[tuple[int, int]]) -> list[int]:
    """Processes a watched raylet started (its agents and workers): its children while it lives,
    any process carrying its pid in ``RAY_RAYLET_PID``, and any process holding one of its log
    files open (``outputs``); the last two survive the raylet's death and the process's adoption by
    init. Only processes that started after the raylet count (a reused pid never does)."""
    marks = {f"RAY_RAYLET_PID={pid}".encode(): int(start) for pid, start in raylets.items()}
    earliest = min(int(start) for start in raylets.values())
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        ppid = _parent(pid)
        if ppid in raylets and _start_time(ppid) == raylets[ppid]:  # a child of a live raylet
            out.append(pid)
            continue
        st = _start_time(pid)
        if st is None or int(st) < earliest:
            continue
        if outputs and _holds(pid, outputs):
            out.append(pid)
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for mark, raylet_start in marks.items():
            if mark in env:
                if int(st) >= raylet_start:
                    out.append(pid)
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
    outputs: set[tuple[int, int]] = set()  # the raylets' log files, as (device, inode)
    buf = b""
    since = time.monotonic()

    def adopt(final: bool = False) -> None:
        if not raylets:
            return
        # while the driver lives its raylet does too, and its children are found by their parent;
        # the log-file mark (a scan of every new process's fds) is needed only once it is gone
        for pid in _started_by(raylets, outputs if final else set()):
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
                outputs.update((int(dev), int(ino)) for dev, ino in msg.get("outputs", []))
        adopt()
    adopt(final=True)  # what appeared since the last look, whoever its parent is now
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

    msg = {"watch": stamped(watch_pids), "raylets": stamped(raylets),
           "outputs": [f for pid in raylets for f in _output_files(pid)]}  # read here: the raylet is alive
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
