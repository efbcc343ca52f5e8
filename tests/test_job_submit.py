"""`ray job submit` of an example against a private `ray start --head` cluster.

The test starts its own head node (`ray start --head --block`) with free ports, a private
--temp-dir, the dashboard (the job server) on 127.0.0.1 and token authentication with a
token of its own (RAY_AUTH_TOKEN_PATH, so ~/.ray/auth_token is neither read nor written),
submits SCRIPT with the repository as --working-dir, and checks that the job succeeds.

Teardown never runs `ray stop` (that kills every Ray process on the machine): it
terminates the one `ray start --block` process it started and then kills, by PID, any
process still carrying this cluster's marker.

Nothing here calls ray.init() in the pytest process, and the session Ray of conftest.py
is not used.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# ---------------------------------------------------------------- what is submitted
SCRIPT = "examples/flex_sfl.py"      # relative to the repository root (the working dir)
SCRIPT_ARGS = ["--rounds", "2"]     # appended after SCRIPT: a short run of the headline example
EXPECTED_LINE = "final test accuracy"
# Logical CPUs of the head node: a user's first `ray start --head --num-cpus=2` on a 2-core
# laptop. With no resource flags the run sizes its actors' CPU shares to what the cluster has
# free (placement.fit_resources): FLEX-SFL's 2 client actors, 3 edge servers and fed server
# would ask for 4.5 CPUs at the defaults and get fractional shares summing to 2 instead.
NUM_CPUS = 2

REPO = Path(__file__).resolve().parent.parent
RAY_BIN = Path(sys.executable).parent / "ray"
# Belt and braces: Ray 2.60 already leaves out .git and .venv (unless
# RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES is set) and what .gitignore lists (unless
# RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1); this keeps the upload small whatever the environment.
UPLOAD_EXCLUDES = [".git", ".venv", "runs", "data", ".pytest_cache", ".ruff_cache", "*.egg-info",
                   "build", "dist", ".whl", "__pycache__"]
START_TIMEOUT_S = 180
JOB_TIMEOUT_S = 900
# AF_UNIX paths are limited to 107 bytes; Ray puts sockets in
# <temp-dir>/session_YYYY-MM-DD_HH-MM-SS_ffffff_PID/sockets/plasma_store (temp-dir + ~63).
MAX_TEMP_DIR_LEN = 40


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port_range(n: int, taken: set[int]) -> tuple[int, int]:
    """n consecutive free ports below the kernel's ephemeral range (32768+)."""
    for _ in range(200):
        lo = random.randrange(15000, 30000 - n)
        ports = range(lo, lo + n)
        if not taken.intersection(ports) and all(_port_free(p) for p in ports):
            return lo, lo + n - 1
    raise RuntimeError(f"no range of {n} free ports found")


def _pids_marked(marker: str, temp_dir: str) -> list[int]:
    """PIDs (not ours) whose environment has our marker or whose command line names temp_dir.

    Ray workers rename themselves (ray::IDLE, ray::ClientActor...), so the command line is
    not enough; the marker variable is inherited by everything the head node spawns.
    """
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:  # gone, or not ours to read
            continue
        if marker.encode() in env or temp_dir.encode() in cmd:
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _wait_ready(proc: subprocess.Popen, dashboard: str, token: str, log: Path) -> None:
    """Until the job server answers an authenticated request (the head's agent is up)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}:\n{log.read_text()[-5000:]}")
        req = urllib.request.Request(f"{dashboard}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = repr(e)
        time.sleep(1)
    raise RuntimeError(f"job server at {dashboard} not ready after {START_TIMEOUT_S}s ({last}):\n"
                       f"{log.read_text()[-5000:]}")


def _stop_head(proc: subprocess.Popen, marker: str, temp_dir: str) -> list[str]:
    """SIGTERM the `ray start --block` process, SIGKILL fallback; then kill stragglers by PID.

    Returns the command lines of processes that had to be killed after the head exited.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    # what `ray start --block` started goes down with it, give it a moment
    deadline = time.monotonic() + 20
    while _pids_marked(marker, temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    stragglers = []
    for pid in _pids_marked(marker, temp_dir):
        stragglers.append(f"{pid}: {_cmdline(pid)}")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while _pids_marked(marker, temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    return stragglers


@pytest.fixture
def ray_head(tmp_path):
    """A private head node; yields (dashboard URL, environment for `ray job` commands, temp dir)."""
    if shutil.which(str(RAY_BIN)) is None:
        pytest.skip(f"{RAY_BIN} not found")
    created = None
    temp_dir = tmp_path / "ray"
    if len(str(temp_dir)) > MAX_TEMP_DIR_LEN:
        created = temp_dir = Path(tempfile.mkdtemp(prefix="rsfl", dir="/tmp"))
    temp_dir.mkdir(exist_ok=True)
    token = secrets.token_hex(32)
    token_file = tmp_path / "auth_token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    marker = f"raysfl-job-submit-{uuid.uuid4().hex}"

    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                        "RAY_RUNTIME_ENV_IGNORE_GITIGNORE")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file), RAYSFL_JOB_SUBMIT_TEST=marker,
               # the job's `python` is looked up on the head node's PATH: make it this venv's
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))

    names = ["port", "dashboard-port", "ray-client-server-port", "node-manager-port",
             "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
             "runtime-env-agent-port", "metrics-export-port"]
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        p = _free_port()
        if p not in ports.values():
            ports[names[len(ports)]] = p
    lo, hi = _free_port_range(64, set(ports.values()))
    # (no --node-ip-address 127.0.0.1: `ray start` resolves it to the machine's address anyway)
    cmd = [str(RAY_BIN), "start", "--head", "--block", "--num-cpus", str(NUM_CPUS), "--num-gpus", "0",
           "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
           "--temp-dir", str(temp_dir), "--min-worker-port", str(lo), "--max-worker-port", str(hi),
           "--disable-usage-stats"]
    for name, p in ports.items():
        cmd += [f"--{name}", str(p)]
    log = tmp_path / "ray_start.log"
    dashboard = f"http://127.0.0.1:{ports['dashboard-port']}"
    stragglers: list[str] = []
    try:
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(tmp_path))
            try:
                _wait_ready(proc, dashboard, token, log)
                yield dashboard, env, temp_dir
            finally:
                stragglers = _stop_head(proc, marker, str(temp_dir))
    finally:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
    survivors = _pids_marked(marker, str(temp_dir))
    assert not survivors, f"processes of the test cluster survived SIGKILL: {survivors}"
    if stragglers:
        # killed by PID above; worth knowing, not worth failing the run
        warnings.warn("after `ray start --block` exited these were still running and were killed: "
                      + "; ".join(stragglers), stacklevel=1)


def _job(env: dict, *args: str, timeout: float = JOB_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(RAY_BIN), "job", *args], check=False, env=env, cwd=str(REPO),
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        out = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                      for x in (e.stdout, e.stderr))
        pytest.fail(f"`ray job {args[0]}` still running after {timeout}s (do its actors fit in "
                    f"NUM_CPUS={NUM_CPUS}?):\n{out[-6000:]}")


def _submit(dashboard: str, env: dict, *entrypoint: str) -> subprocess.CompletedProcess:
    runtime_env = json.dumps({"excludes": UPLOAD_EXCLUDES})
    return _job(env, "submit", "--address", dashboard, "--working-dir", str(REPO),
                "--runtime-env-json", runtime_env, "--", *entrypoint)


def _uploaded_dirs(temp_dir: Path) -> list[Path]:
    return sorted((temp_dir / "session_latest" / "runtime_resources" / "working_dir_files").glob("*/"))


def test_job_submit_example(ray_head):
    dashboard, env, temp_dir = ray_head

    # Without RAY_AUTH_MODE=token the client sends no token and the job server refuses it.
    no_auth = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
    refused = _job(no_auth, "list", "--address", dashboard, timeout=120)
    assert refused.returncode != 0, refused.stdout + refused.stderr

    # Which raysfl a job imports: the uploaded working dir (on PYTHONPATH for the driver and
    # for every worker), not the editable install in .venv. sys.path[0] is dropped so the
    # driver sees what `python examples/<script>.py` sees (its own dir, not the root).
    probe = ("import sys; sys.path.pop(0); import ray, raysfl; print('DRIVER', raysfl.__file__); "
             "ray.init(); f = ray.remote(num_cpus=0)(lambda: __import__('raysfl').__file__); "
             "print('WORKER', ray.get(f.remote()))")
    where = _submit(dashboard, env, "python", "-c", probe)
    assert where.returncode == 0, where.stdout + where.stderr
    paths = dict(line.split(" ", 1) for line in where.stdout.splitlines()
                 if line.startswith(("DRIVER ", "WORKER ")))
    uploaded = [d.resolve() for d in _uploaded_dirs(temp_dir)]
    assert uploaded, where.stdout
    for role in ("DRIVER", "WORKER"):
        assert role in paths, where.stdout
        f = Path(paths[role]).resolve()
        assert any(d in f.parents for d in uploaded), f"{role} imported {f}, not the uploaded copy {uploaded}"
        assert REPO not in f.parents

    # The upload holds the code and none of the heavy or private directories.
    pkg = uploaded[0]
    assert (pkg / SCRIPT).is_file() and (pkg / "raysfl" / "__init__.py").is_file()
    for name in (".venv", "runs", "data", ".git", ".pytest_cache"):
        assert not (pkg / name).exists(), f"{name} was uploaded"
    assert not list(pkg.glob("*.egg-info"))

    # The example itself.
    t0 = time.monotonic()
    done = _submit(dashboard, env, "python", SCRIPT, *SCRIPT_ARGS)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-8000:]
    assert "succeeded" in out, out[-8000:]
    assert any(line.startswith(EXPECTED_LINE) for line in done.stdout.splitlines()), out[-8000:]
    print(f"job ran in {time.monotonic() - t0:.1f}s")
