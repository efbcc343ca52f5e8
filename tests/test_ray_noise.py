"""Ray's harmless 'constructor arguments in the object store' line is dropped, nothing else."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import os, sys
from raysfl.runtime.ray_noise import ACTOR_ARGS_LINE, without_line
os.write(2, b"before\\n")
with without_line():
    os.write(2, ("[E core_worker.cc] Actor A " + ACTOR_ARGS_LINE + ". See issue 53727\\n").encode())
    os.write(2, b"a real error inside\\n")
    print("python stderr inside", file=sys.stderr)
os.write(2, b"after\\n")
"""


def test_only_the_actor_argument_line_is_dropped():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["before", "a real error inside", "python stderr inside", "after"]


THREADS = """
import os, sys, threading, time
from raysfl.runtime.ray_noise import ACTOR_ARGS_LINE, without_line

def run(i):
    for k in range(20):
        with without_line():
            os.write(2, ("noise " + ACTOR_ARGS_LINE + "\\n").encode())
            time.sleep(0.001 * (i + 1))
threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print("still writable", file=sys.stderr, flush=True)
"""


def test_overlapping_blocks_in_threads_leave_stderr_as_it_was():
    """compare starts runs in threads: overlapping blocks must not leave stderr on a dead pipe."""
    out = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == ["still writable"]
