"""The cluster definitions in cluster/ parse, keep the control ports private, turn token
authentication on, and name the project's own entry points (with flags raysfl accepts)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"


def _load(name):
    return list(yaml.safe_load_all((CLUSTER / name).read_text()))


@pytest.mark.parametrize("name,provider", [("aws.yaml", "aws"), ("gcp.yaml", "gcp")])
def test_cluster_launcher_yaml(name, provider):
    (cfg,) = _load(name)
    assert cfg["provider"]["type"] == provider
    types = cfg["available_node_types"]
    assert cfg["head_node_type"] in types
    gpu = [t for n, t in types.items() if n != cfg["head_node_type"]]
    assert gpu and gpu[0]["min_workers"] == 0 and gpu[0]["max_workers"] >= 1  # autoscaling GPU workers
    head_cfg = types[cfg["head_node_type"]]["node_config"]
    assert "guestAccelerators" not in head_cfg and "g5" not in str(head_cfg.get("InstanceType"))  # a CPU head
    head = " ".join(cfg["head_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "--dashboard-host=127.0.0.1" in head
    assert all("RAY_AUTH_MODE=token" in c for c in cfg["worker_start_ray_commands"] if "ray start" in c)
    assert any("pip install" in c and "-e ." in c for c in cfg["setup_commands"])  # installs this project
    assert cfg["file_mounts"]["/home/ubuntu/raysfl"] == "."
    assert "examples/flex_sfl.py" in (CLUSTER / name).read_text()


def test_kuberay_raycluster():
    docs = _load("kuberay/raycluster.yaml")
    rc = next(d for d in docs if d["kind"] == "RayCluster")
    spec = rc["spec"]
    assert spec["authOptions"] == {"mode": "token", "secretName": "raysfl-token"} and spec["rayVersion"] >= "2.52"
    assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"
    (group,) = spec["workerGroupSpecs"]
    worker = group["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert group["minReplicas"] == 0 < group["maxReplicas"] and spec["enableInTreeAutoscaling"]
    assert any(d["kind"] == "PersistentVolumeClaim" for d in docs)


def test_kuberay_rayjob_runs_the_flex_sfl_example_with_valid_flags():
    (job,) = _load("kuberay/rayjob.yaml")
    assert job["kind"] == "RayJob"
    spec = job["spec"]
    assert spec["rayClusterSpec"]["authOptions"]["mode"] == "token"
    argv = shlex.split(spec["entrypoint"])
    assert argv[0] == "python" and argv[1] == "/home/ray/raysfl/examples/flex_sfl.py"
    assert (ROOT / "examples" / "flex_sfl.py").exists()
    # the Dockerfile puts the checkout at /home/ray/raysfl
    assert "WORKDIR /home/ray/raysfl" in (CLUSTER / "Dockerfile").read_text()
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import flex_sfl
    finally:
        sys.path.remove(str(ROOT / "examples"))
    from raysfl.cli import build_parser, config_from_args

    run_argv, _ = flex_sfl.build_argv(argv[2:])
    cfg = config_from_args(build_parser().parse_args(run_argv))
    assert cfg.clients == 100 and cfg.resources.client_gpus == 0.1 and cfg.resources.server_gpus == 0.25


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_cluster_launcher_yaml_passes_the_schema_and_checks_ray_up_runs(name):
    """Issue 47: what `ray up` checks before it contacts a cloud, offline: the file against the
    JSON schema the installed Ray ships (ray/autoscaler/ray-schema.json), then the provider's
    defaults merged in and the whole validated again (prepare_config, validate_config). A key
    the schema does not know fails here, as it would in `ray up`."""
    import copy
    import json

    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    (cfg,) = _load(name)
    jsonschema.validate(cfg, schema)
    validate_config(prepare_config(copy.deepcopy(cfg)))
    typo = {**copy.deepcopy(cfg), "head_node_typ": cfg["head_node_type"]}
    with pytest.raises(jsonschema.ValidationError, match="head_node_typ"):
        jsonschema.validate(typo, schema)
