"""The processes of a Ray a test started in a subprocess, found by a marker (its RAY_TMPDIR) so
that they can be checked for and killed by id -- never `ray stop`, which ends every Ray on the
machine. Imported by the tests that start Ray in a process of their own."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def ours(marker: str) -> list[int]:
    """Processes of the test's Ray: the marker (its RAY_TMPDIR) in their environment or open files."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes() or any(
                    os.readlink(fd).startswith(marker) for fd in (proc / "fd").iterdir()):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def kill_ours(marker: str) -> None:
    """SIGKILL whatever is left of the test's Ray."""
    for pid in ours(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
