"""The Ray workers' output on the driver's console, less Ray's crash noise.

Under load a Ray worker process now and then dies in native code (``Fatal Python error:
Aborted``, ``Mutex corrupt``, a faulthandler stack dump); Ray restarts it and, where the
actor restarts or the round is retried, the run goes on. Ray forwards the dying worker's
stderr to the driver (``log_to_driver``), where the text lands in the middle of a healthy
run's progress lines. :func:`install` replaces Ray's printer of the workers' output with one
that drops such a crash's lines and says, once per crashed process, one line instead::

    raysfl: note: a Ray worker (pid 1234) crashed (Fatal Python error: Aborted); Ray restarts it and the run goes on (its log: /tmp/ray/session_latest/logs)

Every other line is printed as Ray prints it. A crash that does stop the run still ends it
with raysfl's own error.
"""

from __future__ import annotations

import functools
import re
import sys
import threading

CRASH = re.compile(r"Fatal Python error|Mutex corrupt|\*\*\* SIG[A-Z]+ received|Aborted \(core dumped\)")
# the rest of a crash report: faulthandler's stack dump and its trailer
REPORT = re.compile(r"^\s*(File \".*\", line \d+|Thread 0x[0-9a-f]+|Current thread 0x|Extension modules:|"
                    r"\(most recent call first\)|<no Python frame>|Stack \(most recent call first\)|"
                    r"Total modules:|Aborted|\[\d+ more frames?\]|\*\*\* .*|@ +0x|\s*$)")
_HANDLER = "ray_print_logs"
_lock = threading.Lock()
_crashed: set = set()


def crash_lines(lines: list[str], in_report: bool) -> tuple[list[str], str | None, bool]:
    """(the lines to print, the first crash line seen or None, whether a crash report is still
    going on at the end) for one batch of a worker's lines; ``in_report``: a report of this
    process was going on at the end of its previous batch."""
    keep, first = [], None
    for line in lines:
        if CRASH.search(line):
            first = first or line.strip()
            in_report = True
        elif in_report and REPORT.match(line):
            continue
        else:
            in_report = False
            keep.append(line)
            continue
    return keep, first, in_report


def _filtered(print_batch, data: dict, ignore_prefix: bool, session_dir: str) -> None:
    pid = data.get("pid")
    lines = list(data.get("lines") or [])
    with _lock:
        going = pid in _crashed
    keep, first, going_on = crash_lines(lines, going)
    with _lock:
        (_crashed.add if going_on else _crashed.discard)(pid)
    if first is not None:
        where = f" (its log: {session_dir}/logs)" if session_dir else ""
        print(f"raysfl: note: a Ray worker (pid {pid}) crashed ({first[:80]}); Ray restarts it and the run goes "
              f"on{where}", file=sys.stderr, flush=True)
    if keep:
        print_batch({**data, "lines": keep}, ignore_prefix=ignore_prefix)


def install() -> bool:
    """Swap Ray's printer of the workers' output (present where ``ray.init(log_to_driver=True)``
    ran in this process) for the filtered one; False where there is none."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - Ray moved it
        return False
    dispatcher = getattr(ray_worker, "global_worker_stdstream_dispatcher", None)
    handlers = dict(getattr(dispatcher, "handlers", None) or [])  # [(name, handler)]
    current = handlers.get(_HANDLER)
    if current is None:
        return False
    if getattr(current, "raysfl_filtered", False):
        return True
    ignore = current.keywords.get("ignore_prefix", False) if isinstance(current, functools.partial) else False
    try:
        session_dir = ray_worker.global_worker.node.get_session_dir_path()
    except Exception:  # noqa: BLE001 - a driver connected to a remote cluster has no local node
        session_dir = ""
    handler = functools.partial(_filtered, ray_worker.print_to_stdstream, ignore_prefix=ignore,
                                session_dir=session_dir)
    handler.raysfl_filtered = True
    dispatcher.remove_handler(_HANDLER)
    dispatcher.add_handler(_HANDLER, handler)
    return True
