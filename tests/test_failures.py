"""A dead actor stops the run with one clear line naming a command that continues it; finished
rounds are kept and resumable; a killed driver leaves no Ray processes behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raysfl


def chaos():
    """cluster/chaos.py as a module: how an operator finds a run's actors."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("chaos", Path(__file__).resolve().parents[1] / "cluster" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path):
    """Read the file in one go: the run replaces it atomically while we poll."""
    return pq.read_table(pa.BufferReader(path.read_bytes())).to_pylist()


@pytest.mark.slow  # two runs; CI runs the slow tests
def test_killed_server_gives_run_failed_and_resume_continues(quick, ray_session, tmp_path):
    ray = ray_session
    # its own process (co-hosted, the kill would take the fed server too: tests/test_co_host.py)
    cfg = quick(algo="splitfed_v2", rounds=200, name="victim", resources={"client_actors": 2, "co_host": "off"})
    run_dir = tmp_path / "runs" / "victim"
    outcome = {}

    def target():
        try:
            raysfl.run(cfg)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e

    t = threading.Thread(target=target)
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until two rounds are on disk
        path = run_dir / "metrics.parquet"
        if path.exists() and len(_rows(path)) >= 2:
            break
        time.sleep(0.2)
    victim = [a for a in chaos().raysfl_actors("victim", "server")]  # the run's actors, reused or not
    assert len(victim) == 1, victim
    ray.kill(ray.get_actor(victim[0]["name"], namespace=victim[0]["namespace"]))
    t.join(timeout=120)
    err = outcome.get("error")
    assert isinstance(err, raysfl.errors.RunFailed), err
    msg = str(err)
    assert "\n" not in msg and "--resume" in msg and str(run_dir) in msg
    done = _rows(run_dir / "metrics.parquet")
    assert len(done) >= 2 and [r["round"] for r in done] == list(range(1, len(done) + 1))
    resumed = raysfl.run(raysfl.resume_config(run_dir, {"rounds": len(done) + 1}))
    assert [r["round"] for r in resumed.metrics] == list(range(1, len(done) + 2))


@pytest.mark.slow  # a run that gives up, then its resume; CI runs the slow tests
def test_give_up_names_a_resume_command_that_works(quick):
    """A run that gives up after a lost server names the command that continues it; that
    command (more retries; the same fault fires again and is survived) works."""
    import shlex

    from raysfl.cli import main

    cfg = quick(algo="splitfed_v2", rounds=3, faults="kill:server:round=2", max_round_retries=0, name="gives-up")
    with pytest.raises(raysfl.errors.RunFailed) as e:
        raysfl.run(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "giving up" in msg
    argv = shlex.split(msg.split("continue from its last checkpoint with: ")[1])
    assert argv[:3] == ["raysfl", "run", "--resume"] and "--max-round-retries" in argv
    assert main(argv[1:] + ["--no-progress"]) == 0
    rows = _rows(Path(argv[3]) / "metrics.parquet")
    assert [r["round"] for r in rows] == [1, 2, 3] and rows[1]["retries"] == 1


DRIVER = """
import sys, time
from raysfl import config_from_kwargs
from raysfl.resolve import validate
from raysfl.runtime.placement import init_ray
init_ray(validate(config_from_kwargs(algo="splitfed_v2", resources={"num_cpus": 2})), 2, 1)
print("READY", flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # ~15 s: a driver process and its Ray, killed; CI runs the slow tests
def test_killed_driver_leaves_no_ray_processes(tmp_path):
    """SIGKILL a driver that started its local Ray: within seconds no process of that Ray is
    left (Ray's agents would otherwise wait a minute or more on the dead GCS)."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    marker = tempfile.mkdtemp(prefix="rsfk", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_TMPDIR": marker, "RAYSFL_TEST_MARKER": marker}
    env.pop("RAY_ADDRESS", None)

    def ours(proc: Path) -> bool:
        """A process of the test's Ray: the marker in its environment, or a file of its session
        open (an agent's process title may overwrite the environment where the marker was)."""
        if marker.encode() in (proc / "environ").read_bytes():
            return True
        for fd in (proc / "fd").iterdir():
            try:
                if os.readlink(fd).startswith(marker):
                    return True
            except OSError:
                pass
        return False

    def leftovers() -> list[str]:
        out = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                try:
                    if ours(proc):
                        out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:80])
                except OSError:
                    pass
        return out

    try:
        driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        assert driver.stdout.readline().strip() == "READY"
        deadline = time.time() + 240  # a loaded machine starts them slowly
        while time.time() < deadline and not any("Agent" in p for p in leftovers()):
            time.sleep(0.5)  # the raylet's agents are up
        assert any("Agent" in p for p in leftovers()), leftovers()
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline and leftovers():
            time.sleep(0.5)
        assert not leftovers(), leftovers()
    finally:
        for proc in Path("/proc").iterdir():  # whatever is left (never `ray stop`: others' Rays)
            try:
                if proc.name.isdigit() and int(proc.name) != os.getpid() and ours(proc):
                    os.kill(int(proc.name), signal.SIGKILL)
            except OSError:
                pass
