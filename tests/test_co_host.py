"""Co-hosting (``--co-host``): the servers and the fed server in one process, each role in a
thread of its own. The processes change; what a run computes does not."""

import json

import pytest

import raysfl
from raysfl.errors import ConfigError

TIMING = ("wall", "time_s", "sim_", "startup")


def _rows(res):
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in res.metrics]


def _placement(res) -> dict[str, str]:
    return {p["role"]: p["actor"] for p in json.loads((res.run_dir / "placement.json").read_text())}


# flex_sfl: three edge servers stepping side by side, and a fed server that calls them inside
# its aggregate (a deadlock if the roles shared one thread); psl: per-client models on the fed
@pytest.mark.parametrize("algo,extra", [("flex_sfl", {"clients": 6, "rounds": 4}),
                                        pytest.param("psl", {}, marks=pytest.mark.slow)])  # ~35 s on CI
def test_co_hosted_roles_compute_what_their_own_processes_do(quick, algo, extra):
    off = raysfl.run(quick(algo=algo, **extra, resources={"client_actors": 2, "co_host": "off"}))
    on = raysfl.run(quick(algo=algo, **extra, resources={"client_actors": 2, "co_host": "on"}))
    assert _rows(on) == _rows(off)
    where_on, where_off = _placement(on), _placement(off)
    servers = [r for r in where_on if r.startswith("server-")]
    assert servers and {where_on[r] for r in servers + ["fed"]} == {where_on["fed"]}  # one actor
    assert where_on["fed"].endswith(":host")
    assert len({where_off[r] for r in servers + ["fed"]}) == len(servers) + 1  # one each


def test_auto_co_hosts_only_where_nothing_can_tell(monkeypatch):
    import ray

    from raysfl.runtime.placement import resolve_co_host

    def co_host(model_is_custom=False, **kw):
        return resolve_co_host(raysfl.config_from_kwargs(algo="splitfed_v2", **kw), model_is_custom).resources.co_host

    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": False}])
    assert co_host() == "on"
    assert co_host(faults="kill:client:round=2") == "on"  # a client actor's death takes no server
    assert co_host(faults="kill:server:round=2") == "off"
    assert co_host(faults="kill:fed:round=2") == "off"
    assert co_host(resources={"server_gpus": 0.5}) == "off"  # a process has one CUDA memory share
    assert co_host(model_is_custom=True) == "off"  # your model may draw from torch's shared generator
    assert co_host(resources={"co_host": "off"}) == "off"  # the user's choice stands
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    assert co_host() == "off"


def test_co_host_on_is_refused_where_it_would_change_a_run_in_one_line():
    from raysfl.resolve import validate_run

    with pytest.raises(ConfigError, match="unknown resources.co_host 'yes'; allowed: auto, on, off"):
        validate_run(raysfl.config_from_kwargs(algo="psl", resources={"co_host": "yes"}))
    with pytest.raises(ConfigError, match=r"fault 'kill:fed:round=2' kills one of the servers and the fed server"):
        validate_run(raysfl.config_from_kwargs(algo="psl", rounds=3, faults="kill:fed:round=2",
                                               resources={"co_host": "on"}))
    with pytest.raises(ConfigError, match=r"takes no GPU share \(server_gpus 0.5, fed_gpus 0\)"):
        validate_run(raysfl.config_from_kwargs(algo="psl", resources={"co_host": "on", "server_gpus": 0.5}))


@pytest.mark.slow  # a whole run killed from outside; CI runs the slow tests
def test_a_killed_host_is_a_death_of_every_role_it_holds_and_the_run_survives(quick, tmp_path):
    """cluster/chaos.py finds the host (``--role host``) and kills it mid-run: the servers and
    the fed server come back together, set up again and reset to the snapshot, and the run
    finishes every round."""
    import importlib.util
    import random
    import threading
    import time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("chaos", Path(__file__).resolve().parents[1] / "cluster" / "chaos.py")
    chaos = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(chaos)
    cfg = quick(algo="splitfed_v2", rounds=30, name="host-victim", local_steps=4,
                resources={"client_actors": 2, "co_host": "on"})
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("res", raysfl.run(cfg)))
    t.start()
    deadline = time.time() + 120
    metrics = tmp_path / "runs" / "host-victim" / "metrics.parquet"
    while time.time() < deadline and not (metrics.exists() and chaos.raysfl_actors("host-victim", "host")):
        time.sleep(0.2)
    assert not chaos.raysfl_actors("host-victim", "server")  # no server of its own: it is in the host
    victim = chaos.kill_one(chaos.raysfl_actors("host-victim", "host"), random.Random(0))
    assert victim and victim["role"] == "host"
    t.join(timeout=300)
    rows = out["res"].metrics
    assert [r["round"] for r in rows] == list(range(1, 31))
    assert sum(r["failures"] + r["restarts"] + r["retries"] for r in rows) >= 1
