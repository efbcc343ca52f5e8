"""Device payloads (``--device-payloads``): where the clients and the servers share one GPU, a
CUDA tensor's IPC handle travels instead of its bytes. The rule that turns it on, its refusal
where a handle could not open, and the host path it leaves alone are checked here; the CUDA
path itself runs in ``scripts/gpu_smoke.py`` (same results with it on and off) and
``benchmarks/gpu_overhead.py`` on a GPU machine."""

import numpy as np
import pytest
import torch

import raysfl
from raysfl.errors import ConfigError
from raysfl.transport import Wire, pack, unpack


def _resolve(monkeypatch, nodes=1, gpus=1.0, **resources):
    import ray

    from raysfl.runtime.placement import resolve_device_payloads

    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": gpus} if gpus else {"CPU": 16.0})
    cfg = raysfl.config_from_kwargs(algo="psl", resources=resources)
    return resolve_device_payloads(cfg, nodes).resources.device_payloads


def test_auto_is_on_only_where_clients_and_servers_share_the_one_gpu(monkeypatch):
    both = {"client_gpus": 0.15, "server_gpus": 0.2}
    assert _resolve(monkeypatch, **both) == "on"
    assert _resolve(monkeypatch, gpus=0, **both) == "off"  # a CPU cluster
    assert _resolve(monkeypatch, gpus=2, **both) == "off"  # two GPUs: a handle opens only on its own
    assert _resolve(monkeypatch, nodes=2, **both) == "off"
    assert _resolve(monkeypatch, client_gpus=0.15) == "off"  # the servers on the CPU
    assert _resolve(monkeypatch, server_gpus=0.2) == "off"  # the clients on the CPU
    assert _resolve(monkeypatch, device_payloads="off", **both) == "off"  # the user's choice stands


def test_on_where_a_handle_could_not_open_is_refused_in_one_line(monkeypatch):
    with pytest.raises(ConfigError, match=r"device_payloads 'on' needs .* this run has 1 node\(s\), 0 GPU\(s\), "
                                          r"client_gpus 0, server_gpus 0; use 'auto' or 'off'"):
        _resolve(monkeypatch, gpus=0, device_payloads="on")
    assert _resolve(monkeypatch, device_payloads="on", client_gpus=0.25, server_gpus=0.25) == "on"


def test_a_bad_device_payloads_value_is_refused_in_one_line():
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match="unknown resources.device_payloads 'gpu'; allowed: auto, on, off"):
        validate(raysfl.config_from_kwargs(algo="psl", resources={"device_payloads": "gpu"}))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_a_cpu_tensor_takes_the_host_path_whatever_the_flag(dtype):
    t = torch.randn(4, 3, 5, 5)
    on, off = pack(t, dtype, on_device=True), pack(t, dtype)
    assert on.cuda is None and isinstance(on.data, np.ndarray)
    assert on.nbytes == off.nbytes == t.numel() * (4 if dtype == "float32" else 2)
    assert torch.equal(unpack(on), unpack(off))


def test_a_device_wire_counts_the_bytes_of_the_tensor_it_stands_for():
    """Byte counts measure the simulated link: a handle stands for the whole tensor."""
    assert Wire(None, "float32", cuda=(None, ()), size=8 * 64 * 32 * 32 * 4).nbytes == 8 * 64 * 32 * 32 * 4


def test_a_device_wire_that_came_back_to_its_maker_is_refused():
    """A CUDA IPC handle does not open in the process that made it (FedPairing's partners may
    share one: they keep the host path); unpack says so instead of failing in CUDA."""
    import os

    opened = []
    w = Wire(None, "float32", cuda=(lambda *a: opened.append(a), ()), size=16, pid=os.getpid())
    with pytest.raises(RuntimeError, match="came back to the process that made it"):
        unpack(w, "cpu")
    assert not opened
