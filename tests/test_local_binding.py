"""The local Ray raysfl starts listens on the loopback interface only, with no metrics export,
and one that does not start says why in one line (docs/scaling.md, docs/reliability.md).

The sockets are read from /proc (``/proc/net/tcp{,6}`` and each process's ``fd/``) for the
processes of one driver: the Ray it started (GCS, raylet, their agents and workers) and the
driver itself, never another Ray on the machine."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raysfl.errors import RunFailed

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the sockets from /proc")

ROOT = Path(__file__).resolve().parents[1]

# A driver that starts the run's Ray as raysfl does, says where it is, and waits for stdin to close.
DRIVER = """
import json, os, sys
import ray
import raysfl
from raysfl.runtime import placement

cfg = raysfl.config_from_kwargs(clients=2, rounds=1, progress=False, resources={"client_actors": 1})
placement.init_ray(cfg, 1, 1)
node = ray._private.worker._global_node
print(json.dumps({"pid": os.getpid(), "node_ip": node.node_ip_address,
                  "metrics_port": node.metrics_export_port}), flush=True)
sys.stdin.read()
"""


def _listening() -> dict[str, tuple[str, int]]:
    """{socket inode: (address, port)} of every listening TCP socket of this network namespace."""
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A":  # TCP_LISTEN
                continue
            hexip, hexport = f[1].split(":")
            raw = bytes.fromhex(hexip)  # 32-bit words in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out[f[9]] = (str(ipaddress.ip_address(raw)), int(hexport, 16))
    return out


def _tree(root: int) -> set[int]:
    """``root`` and its descendants."""
    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p))
    found, todo = {root}, [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def _sockets_of(root: int) -> set[tuple[str, str, int]]:
    """(process name, address, port) of the listening TCP sockets held by ``root``'s processes."""
    listening, out = _listening(), set()
    for pid in _tree(root):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in listening:
                out.add((name, *listening[target[8:-1]]))
    return out


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1, an IPv6 socket bound to 127.0.0.1
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _settled(pid: int, limit_s: float = 60.0) -> set[tuple[str, str, int]]:
    """The driver's listening sockets once its agents are up and nothing new appeared for 3 s."""
    seen, since, t0 = set(), time.monotonic(), time.monotonic()
    while time.monotonic() - t0 < limit_s:
        now = _sockets_of(pid)
        if now != seen:
            seen, since = now, time.monotonic()
        elif any(n.startswith("ray::Dashboard") for n, _, _ in seen) and time.monotonic() - since > 3:
            break
        time.sleep(0.5)
    return seen


@pytest.mark.slow  # ~15 s: a Ray of its own; CI runs the slow tests
def test_local_ray_listens_on_loopback_only_without_metrics_export(tmp_path):
    """The GCS, raylet, driver, workers, dashboard agent and autoscaler monitor of the Ray
    ``placement.init_ray`` starts listen on 127.0.0.1 only (they listened on every interface),
    and the agent exports no Prometheus metrics."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_enable_metrics_collection")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-2000:] if proc.poll() is not None else "no reply"
        info = json.loads(line)
        sockets = _settled(info["pid"])
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    names = {n for n, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # the check saw this Ray's servers
    assert any(n.startswith("ray::Dashboard") for n in names), sockets
    assert info["node_ip"] == "127.0.0.1"
    outside = sorted(s for s in sockets if not _loopback(s[1]))
    assert not outside, f"listening beyond loopback: {outside}"
    if info["metrics_port"]:
        assert info["metrics_port"] not in {port for _, _, port in sockets}, sockets


def test_the_suites_own_ray_listens_on_loopback_only(ray_session):
    """tests/conftest.py starts its Ray the same way."""
    node = ray_session._private.worker._global_node
    assert node.node_ip_address == "127.0.0.1"
    sockets = _sockets_of(os.getpid())
    assert "raylet" in {n for n, _, _ in sockets}, sockets
    outside = sorted(s for s in sockets if not _loopback(s[1]))
    assert not outside, f"listening beyond loopback: {outside}"


RAY_TIMEOUT = ("The current node timed out during startup. This could happen because some of the raylet failed "
               "to startup or the GCS has become overloaded.")


def test_a_local_ray_that_does_not_start_says_why_in_one_line(monkeypatch, tmp_path):
    """Ray's "node timed out during startup" (here under ``ulimit -f``) becomes one line naming the
    likely causes, the one seen here, and Ray's session directory."""
    import resource

    import ray

    from raysfl.runtime import placement

    session = tmp_path / "ray" / f"session_2026-01-01_00-00-00_000001_{os.getpid()}"  # this driver's
    (session / "logs").mkdir(parents=True)
    (tmp_path / "ray" / "session_2026-01-02_00-00-00_000001_1").mkdir()  # another driver's, newer
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def fail(*args, **kwargs):
        raise Exception(RAY_TIMEOUT)

    monkeypatch.setattr(ray, "init", fail)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (200 * 1024, limit[1]) if which == resource.RLIMIT_FSIZE else limit)
    before = dict(os.environ)
    cfg = __import__("raysfl").config_from_kwargs(clients=2, rounds=1, progress=False,
                                                  resources={"client_actors": 1})
    with pytest.raises(RunFailed) as e:
        placement.init_ray(cfg, 1, 1)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("the local Ray did not start (The current node timed out during startup.")
    assert "likely causes: the disk is full, a file size limit (ulimit -f), or" in msg
    assert "here: the file size limit is 200 KiB (ulimit -f unlimited lifts it)" in msg
    assert f"see its session directory {session}" in msg
    assert dict(os.environ) == before  # what init_ray set for Ray's processes is put back
