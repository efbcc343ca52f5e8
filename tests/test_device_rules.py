"""Rules that catch device bugs on a machine without a GPU.

Most of our machines have no GPU, so a tensor left on the wrong device shows nowhere until a
GPU run fails. Three rules make such bugs fail here:

(a) no ``torch.Tensor`` crosses a Ray boundary: every Ray of the suite runs with the wire
    guard (tests/conftest.py, :mod:`raysfl.runtime.wire_guard`); the first test shows it bites;
(b) tensors created in algorithm, server-step and peer-exchange code name their ``device=``
    (an AST scan; CPU-only statistics are on a short allow-list);
(c) the pure tensor functions of the papers run on *fake* CUDA tensors
    (``FakeTensorMode``: shapes and devices without a GPU), where a tensor made on the CPU
    and mixed with a CUDA input raises a device mismatch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- (a) the wire
def test_the_wire_guard_refuses_a_tensor_in_an_actor_call_either_way(ray_session):
    ray = ray_session

    @ray.remote(num_cpus=0)
    class Echo:
        def back(self, x):
            return x

        def make(self):
            return torch.zeros(3)

    def refused(call) -> bool:  # Ray wraps the guard's error (its own inspection may fail first)
        try:
            ray.get(call())
        except Exception as e:  # noqa: BLE001 - the chain is read below
            while e is not None:
                if "cross a Ray boundary" in str(e):
                    return True
                e = e.__cause__ or e.__context__
        return False

    a = Echo.remote()
    try:
        assert ray.get(a.back.remote(torch.zeros(2).numpy())).tolist() == [0.0, 0.0]  # NumPy travels
        assert refused(lambda: a.back.remote(torch.zeros(2, 2)))  # an argument
        assert refused(lambda: a.back.remote({"grads": [torch.zeros(2)]}))  # ... nested
        assert refused(lambda: a.make.remote())  # a result, serialised in the actor
    finally:
        ray.kill(a)


# ----------------------------------------------------------------------------- (b) device=
FACTORIES = {"zeros", "ones", "empty", "full", "arange", "tensor", "as_tensor", "rand", "randn", "randint", "eye",
             "linspace", "from_numpy", "randperm"}
# (file, function): tensors made on the CPU on purpose
ALLOWED: set[tuple[str, str]] = set()


def _scanned_files() -> list[Path]:
    """The algorithms (their roles, FedPairing's peer exchange included) and the shared server steps."""
    return sorted((ROOT / "raysfl" / "algorithms").rglob("*.py")) + [ROOT / "raysfl" / "server_steps.py"]


def device_free_creations(path: Path) -> list[str]:
    """``torch.<factory>(...)`` calls without ``device=`` in ``path``, as 'file:line function'."""
    tree = ast.parse(path.read_text())
    out = []

    def visit(node, func: str):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                    and isinstance(child.func.value, ast.Name) and child.func.value.id == "torch"
                    and child.func.attr in FACTORIES and not any(k.arg == "device" for k in child.keywords)):
                rel = str(path.relative_to(ROOT))
                if (rel, func) not in ALLOWED:
                    out.append(f"{rel}:{child.lineno} {func}: torch.{child.func.attr}")
            visit(child, name)

    visit(tree, "<module>")
    return out


def test_algorithm_and_server_code_names_the_device_of_every_tensor_it_creates():
    found = [hit for f in _scanned_files() for hit in device_free_creations(f)]
    assert not found, ("tensors created without device= (they land on the CPU and fail against CUDA inputs; "
                       "pass device=<an input>.device, or use raysfl.transport.wire_to_state):\n" + "\n".join(found))


def test_the_device_scan_finds_a_tensor_made_without_a_device(tmp_path):
    f = ROOT / "raysfl" / "_scan_probe.py"
    try:
        f.write_text("import torch\n\ndef step(x):\n    return x + torch.zeros(3)\n\n"
                     "def fine(x):\n    return torch.zeros(3, device=x.device)\n")
        assert device_free_creations(f) == ["raysfl/_scan_probe.py:4 step: torch.zeros"]
    finally:
        f.unlink()


# ----------------------------------------------------------------------------- (c) fake CUDA
@pytest.fixture
def fake_cuda():
    """A mode in which tensors have shapes and devices but no data: CUDA without a GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=False):
        yield lambda *shape: torch.rand(*shape, device="cuda")


def test_fake_cuda_catches_a_cpu_tensor_mixed_with_a_cuda_input(fake_cuda):
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError

    x = fake_cuda(4, 3)
    with pytest.raises(FakeTensorDeviceMismatchError):
        x + torch.zeros(3)  # a tensor made without device=


def test_evidential_losses_stay_on_the_inputs_device(fake_cuda):
    from raysfl.algorithms.besplit import evidential as ev
    from raysfl.algorithms.besplit.spec import EPISTEMIC, EVIDENCE

    logits, y = fake_cuda(8, 10), torch.randint(0, 10, (8,), device="cuda")
    for kind in EVIDENCE:
        alpha = ev.evidence(logits, kind) + 1
        assert alpha.device.type == "cuda"
    alpha = ev.evidence(logits, "exp") + 1
    for out in (ev.aleatoric(alpha), ev.epistemic(alpha), ev.mutual_information(alpha), ev.vacuity(alpha),
                ev.kl_to_uniform(alpha), ev.evidential_loss(alpha, y, 3, 10),
                ev.evidential_loss(alpha, y, 3, 10, reduction="none"),
                *(ev.epistemic_measure(alpha, k) for k in EPISTEMIC)):
        assert out.device.type == "cuda"


def test_distillation_losses_stay_on_the_inputs_device(fake_cuda):
    from raysfl.algorithms.besplit.bcc import kd_client, kd_global, relational_matrix
    from raysfl.algorithms.besplit.spec import DISTANCES

    a, g = fake_cuda(8, 10), fake_cuda(8, 10)
    assert kd_global(a, g).device.type == "cuda"
    for d in DISTANCES:
        assert relational_matrix(fake_cuda(8, 4, 3, 3), d).device.type == "cuda"
        assert kd_client(fake_cuda(8, 16), fake_cuda(8, 16), distance=d).device.type == "cuda"


def test_pairwise_angles_and_gda_stay_on_the_inputs_device(fake_cuda):
    from raysfl.algorithms.gapsl import gda, lgi
    from raysfl.angles import pairwise_angles

    grads = fake_cuda(5, 40)
    assert pairwise_angles(grads).device.type == "cuda"
    assert lgi.consistency_scores(grads).device.type == "cuda"
    assert lgi.consistency_scores(grads[:1]).device.type == "cuda"  # the one-client case builds its own zeros
    assert gda.angles_to_leader(grads, grads.mean(dim=0)).device.type == "cuda"
    assert gda.loss_gradient(grads, [0, 2]).device.type == "cuda"
    assert gda.loss_gradient(grads, []).device.type == "cuda"
    # (autograd's backward needs a real CUDA context: regularizer_coefficients is covered by (b))


def test_tpgf_fusion_stays_on_the_inputs_device(fake_cuda):
    from raysfl.algorithms.super_sfl.tpgf import fuse

    g = [fake_cuda(3, 3), fake_cuda(3)]
    assert all(t.device.type == "cuda" for t in fuse(g, g, 0.3))


# ----------------------------------------------------------------------------- the fixes themselves
def test_a_local_ray_is_given_no_more_gpus_than_the_machine_has(monkeypatch):
    from raysfl.runtime import placement

    monkeypatch.setattr(placement, "cuda_count", lambda: 1)
    assert placement.local_gpus(2.5) == 1       # capped: Ray would hand out ids of GPUs that do not exist
    assert placement.local_gpus(0.75) == 1
    assert placement.local_gpus(0.0) is None    # nobody asks: Ray's own detection
    monkeypatch.setattr(placement, "cuda_count", lambda: 0)
    assert placement.local_gpus(1.5) == 2       # no CUDA: placeholders, the actors run on the CPU (warned)


def test_the_centralised_bound_trains_on_the_gpu_when_the_run_asks_for_gpus_and_there_is_one(monkeypatch):
    import raysfl
    from raysfl.runtime.centralized import centralized_device

    on_cpu = raysfl.config_from_kwargs(algo="centralized")
    on_gpu = raysfl.config_from_kwargs(algo="centralized", resources={"server_gpus": 1.0})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert (str(centralized_device(on_cpu)), str(centralized_device(on_gpu))) == ("cpu", "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert str(centralized_device(on_gpu)) == "cpu"  # asked, but this process has no GPU


def test_an_actor_meant_for_a_gpu_that_runs_on_the_cpu_says_so(capsys):
    from raysfl.runtime.placement import device_for_actor

    assert str(device_for_actor(0.0, "client actor 0")) == "cpu"
    assert capsys.readouterr().err == ""
    if not torch.cuda.is_available():
        assert str(device_for_actor(0.5, "server 0")) == "cpu"
        assert "the server 0 asked for 0.5 GPU but its node has no CUDA GPU; it runs on the CPU" in capsys.readouterr().err


def test_optimiser_state_travels_as_numpy_and_comes_back_exactly():
    from raysfl.transport import load_optimizer_state, optimizer_state_to_wire

    for make in (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: torch.optim.AdamW(ps, lr=0.01)):
        torch.manual_seed(0)
        net = torch.nn.Linear(3, 2)
        opt = make(net.parameters())
        net(torch.ones(4, 3)).sum().backward()
        opt.step()
        wire = optimizer_state_to_wire(opt)
        assert wire and all(type(v).__module__ == "numpy" for v in wire.values())
        other = make(net.parameters())
        load_optimizer_state(other, wire)
        for a, b in zip(opt.state_dict()["state"].values(), other.state_dict()["state"].values()):
            assert all(torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)
        load_optimizer_state(other, {})  # the state before any step: buffers cleared
        assert not other.state_dict()["state"]


def test_the_initial_model_travels_sealed_and_must_be_on_the_cpu():
    from raysfl.models import build_model
    from raysfl.models.blob import ModelBlob

    model = build_model("cnn", (1, 8, 8), 10, seed=0)
    copy_ = ModelBlob(model).model()
    assert copy_ is not model
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), copy_.state_dict().values()))
    meta = build_model("cnn", (1, 8, 8), 10, seed=0).to("meta")
    with pytest.raises(ValueError, match="must be on the CPU"):
        ModelBlob(meta)


def test_deterministic_runs_on_the_cpu_and_gives_the_same_rows(quick):
    """--deterministic turns on torch's deterministic kernels in every actor (an operation without
    one would raise); on the CPU the results are those of the default."""
    import raysfl

    rows = []
    for det in (False, True):
        res = raysfl.run(quick(algo="besplit", rounds=1, deterministic=det))
        rows.append([{k: v for k, v in r.items() if "wall_time" not in k} for r in res.metrics])
    assert rows[0] == rows[1]


def test_a_pooled_process_does_not_keep_the_last_runs_deterministic_flags():
    """A pooled actor is set up again for every run: a run without --deterministic after one
    with it gets torch's default (non-deterministic) kernels back, not the last run's flags."""
    import torch

    import raysfl
    from raysfl.runtime.placement import configure_torch

    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.get_num_threads())
    try:
        configure_torch(raysfl.config_from_kwargs(deterministic=True), 1)
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
        configure_torch(raysfl.config_from_kwargs(deterministic=False), 1)
        assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic = before[1]
        torch.set_num_threads(before[2])
