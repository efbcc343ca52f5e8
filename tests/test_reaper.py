"""The reaper's adoption rule, without Ray: a process counts as a raylet's when it holds the
raylet's log file open -- also after the raylet died and the process was re-parented -- and
never when it started before the raylet or only shares a terminal or /dev/null with it."""

import subprocess
import sys
import time

import pytest

from raysfl.runtime import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads /proc")

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _spawn(stdout) -> subprocess.Popen:
    return subprocess.Popen(SLEEP, stdout=stdout, stderr=subprocess.DEVNULL)


def test_processes_holding_the_raylets_log_are_adopted_after_it_died(tmp_path):
    log = open(tmp_path / "raylet.out", "w")
    before = _spawn(log)  # holds the log, but started before the "raylet": never adopted
    time.sleep(0.05)  # start times are in clock ticks (10 ms)
    raylet = _spawn(log)
    time.sleep(0.05)
    agent = _spawn(log)  # an "agent": not the raylet's child, as after init adopted it
    stranger = _spawn(subprocess.DEVNULL)  # /dev/null is everybody's: never a mark
    procs = [before, raylet, agent, stranger]
    try:
        outputs = {tuple(f) for f in reaper._output_files(raylet.pid)}
        assert len(outputs) == 1  # its stdout; stderr is /dev/null and left out
        raylets = {raylet.pid: reaper._start_time(raylet.pid)}
        raylet.kill()
        raylet.wait()
        found = reaper._started_by(raylets, outputs)
        assert agent.pid in found
        assert before.pid not in found and stranger.pid not in found
        assert reaper._started_by(raylets, set()) == []  # no other mark: a dead raylet has no children
    finally:
        for p in procs:
            p.kill()
            p.wait()
        log.close()
