"""Tests for raysfl.models: splitting is exact, keys are cut-independent, costs are sane."""

import copy
import functools

import pytest
import torch

from raysfl.errors import ConfigError
from raysfl.models import MODELS, ModelInfo, ModelPart, SplitModel, block_index, build_model, model_info

SETTINGS = [((1, 8, 8), 10), ((1, 28, 28), 10), ((3, 32, 32), 100)]
EXPECTED_BLOCKS = {"cnn": 4, "vgg16": 14, "vgg19": 17, "resnet18": 10, "vit": 8}


@functools.lru_cache(maxsize=None)
def _model(name, shape, num_classes, seed=0):
    """Models are slow-ish to build (vgg19: 20M params); share them across tests (read-only use)."""
    return build_model(name, shape, num_classes, seed)


def test_registry_names():
    assert set(MODELS) == set(EXPECTED_BLOCKS)


def _data_shapes():
    from raysfl.data import DATASETS, dataset_info

    return sorted({(dataset_info(d).input_shape, dataset_info(d).num_classes) for d in DATASETS})


@pytest.mark.parametrize("shape,num_classes", _data_shapes(), ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("name", list(EXPECTED_BLOCKS))
def test_catalog_is_what_build_model_gives(name, shape, num_classes):
    """The light catalogue (validation and ``raysfl list`` use it instead of building the model)
    says what the built model is, for every model and every data set's shape."""
    model = _model(name, shape, num_classes)
    info = model_info(name)
    assert (info.name, info.num_blocks, info.conv_blocks, list(info.cuts)) == (
        name, model.num_blocks, model.leading_conv_blocks(), model.valid_cuts())


def test_catalog_of_your_own_model_and_of_an_unknown_one():
    from raysfl.models import custom

    blocks = [torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.Flatten(), torch.nn.Linear(8, 2)]
    mine = SplitModel("custom-mine", blocks, (1, 2, 2), 2, cuts=[2])
    with pytest.raises(ConfigError, match="custom-mine"):
        model_info("custom-mine")  # not given to a run
    with custom.registered(mine):
        assert model_info("custom-mine") == ModelInfo("custom-mine", 3, 1, (2,))
    with pytest.raises(ConfigError, match="unknown model 'resnet50'; allowed: cnn, vgg16"):
        model_info("resnet50")


@pytest.mark.parametrize("shape,num_classes", SETTINGS, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("name", list(EXPECTED_BLOCKS))
def test_split_forward_equals_full(name, shape, num_classes):
    model = _model(name, shape, num_classes)
    assert isinstance(model, SplitModel)
    assert model.num_blocks == EXPECTED_BLOCKS[name]
    assert model.valid_cuts() == list(range(1, model.num_blocks))
    assert model.activation_shape(0) == shape
    assert model.activation_shape(model.num_blocks) == (num_classes,)
    model.eval()
    x = torch.randn(3, *shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(x)
        assert full.shape == (3, num_classes)
        for k in model.valid_cuts():
            client, server = model.client_part(k), model.server_part(k)
            assert (client.lo, client.hi, server.lo, server.hi) == (0, k, k, model.num_blocks)
            act = client(x)
            assert tuple(act.shape[1:]) == model.activation_shape(k), k
            out = server(act)
            assert torch.allclose(out, full, rtol=1e-5, atol=1e-6), (name, k)


@pytest.mark.parametrize("name", list(EXPECTED_BLOCKS))
def test_part_keys_partition_full_keys(name):
    model = _model(name, (1, 8, 8), 10)
    full_keys = set(model.state_dict())
    for k in model.valid_cuts():
        ck = set(model.client_part(k).state_dict())
        sk = set(model.server_part(k).state_dict())
        assert ck | sk == full_keys
        assert not ck & sk
        assert all(block_index(key) < k for key in ck)
        assert all(block_index(key) >= k for key in sk)


def test_parts_share_modules_and_deepcopy_is_independent():
    model = build_model("cnn", (1, 8, 8), 10, seed=3)
    client = model.client_part(2)
    assert isinstance(client, ModelPart)
    assert client.blocks["0"] is model.blocks[0]
    key = "blocks.0.0.weight"
    with torch.no_grad():
        client.state_dict()[key].add_(1.0)  # state_dict tensors alias the parameters
    assert torch.equal(model.state_dict()[key], client.state_dict()[key])

    clone = copy.deepcopy(client)
    assert list(clone.state_dict()) == list(client.state_dict())
    assert clone.blocks["0"] is not model.blocks[0]
    with torch.no_grad():
        clone.blocks["0"][0].weight.zero_()
    assert model.state_dict()[key].abs().sum() > 0

    # A full state dict restricted to a part's keys loads strictly.
    sub = {k: v for k, v in model.state_dict().items() if block_index(k) < 2}
    clone.load_state_dict(sub, strict=True)
    assert torch.equal(clone.state_dict()[key], model.state_dict()[key])


@pytest.mark.parametrize("name", ["cnn", "vit", "resnet18"])
def test_split_backward_matches_full(name):
    """Training through client+server parts (with the activation detached as in split learning)
    gives the same gradients as training the full model."""
    model = build_model(name, (1, 8, 8), 10, seed=0).train()
    x = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, 3])
    ref = copy.deepcopy(model)
    torch.nn.functional.cross_entropy(ref(x), y).backward()

    k = model.valid_cuts()[len(model.valid_cuts()) // 2]
    client, server = model.client_part(k), model.server_part(k)
    act = client(x)
    sent = act.detach().requires_grad_(True)
    torch.nn.functional.cross_entropy(server(sent), y).backward()
    act.backward(sent.grad)
    ref_grads = dict(ref.named_parameters())
    for pname, p in model.named_parameters():
        assert torch.allclose(p.grad, ref_grads[pname].grad, rtol=1e-4, atol=1e-6), pname


def test_same_seed_same_params_different_seed_differs():
    for name in ["cnn", "vit", "resnet18"]:
        a = build_model(name, (1, 8, 8), 10, seed=7).state_dict()
        b = build_model(name, (1, 8, 8), 10, seed=7).state_dict()
        c = build_model(name, (1, 8, 8), 10, seed=8).state_dict()
        assert list(a) == list(b) == list(c)
        assert all(torch.equal(a[k], b[k]) for k in a)
        assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


def test_builds_in_threads_give_the_seeds_weights():
    """``compare --parallel`` builds several runs' models in threads of one driver: each build
    must still get exactly its seed's weights (the generator is the process's)."""
    from concurrent.futures import ThreadPoolExecutor

    seeds = [0, 1] * 8
    alone = {s: build_model("vit", (1, 8, 8), 10, seed=s).state_dict() for s in (0, 1)}
    with ThreadPoolExecutor(len(seeds)) as pool:
        built = list(pool.map(lambda s: build_model("vit", (1, 8, 8), 10, seed=s).state_dict(), seeds))
    for s, state in zip(seeds, built):
        assert all(torch.equal(state[k], alone[s][k]) for k in state), s


def test_build_model_leaves_global_rng_untouched():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model("cnn", (1, 8, 8), 10, seed=5)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("shape,num_classes", [((1, 8, 8), 10), ((1, 28, 28), 10), ((3, 32, 32), 100)])
def test_cnn_flops_match_hand_estimate(shape, num_classes):
    c, h, w = shape
    model = build_model("cnn", shape, num_classes, seed=0)
    flops = model.block_flops()
    assert len(flops) == model.num_blocks and all(f > 0 for f in flops)
    macs = (
        c * 32 * 5 * 5 * h * w  # conv1, same padding
        + 32 * 64 * 5 * 5 * (h // 2) * (w // 2)  # conv2 after the first pool
        + 64 * (h // 4) * (w // 4) * 128  # fc1
        + 128 * num_classes  # fc2
    )
    assert 0.5 * 2 * macs <= sum(flops) <= 2.0 * 2 * macs
    assert model.block_flops() == flops  # cached, stable


@pytest.mark.parametrize("name", list(EXPECTED_BLOCKS))
def test_block_flops_positive_and_mode_restored(name):
    model = build_model(name, (1, 8, 8), 10, seed=0)
    model.train()
    bn = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    before = [m.running_mean.clone() for m in bn]
    flops = model.block_flops()
    assert len(flops) == model.num_blocks
    assert all(f > 0 for f in flops)
    assert all(m.training for m in model.modules())
    assert all(torch.equal(m.running_mean, b) for m, b in zip(bn, before))


_FLOPS_IN_A_FRESH_PROCESS = """
import json, sys
import torch
from torch.utils.flop_counter import FlopCounterMode, _FlopCounterMode
from raysfl.models import build_model

out = {}
for name in sys.argv[1:]:
    model = build_model(name, (1, 8, 8), 10, seed=0)
    out[name] = {"counted": model.block_flops(), "dynamo": "torch._dynamo" in sys.modules}
raw = _FlopCounterMode.__torch_dispatch__.__wrapped__
out["hook_left"] = hasattr(raw, "__dynamo_disable")
for name in sys.argv[1:]:  # torch's own counter, as written, after: it imports torch._dynamo
    model, x, plain = build_model(name, (1, 8, 8), 10, seed=0).eval(), torch.zeros(1, 1, 8, 8), []
    with torch.no_grad():
        for block in model.blocks:
            with FlopCounterMode(display=False) as counter:
                x = block(x)
            plain.append(int(counter.get_total_flops()))
    out[name]["plain"] = plain
out["dynamo_after"] = "torch._dynamo" in sys.modules
print(json.dumps(out))
"""


def test_block_flops_are_torchs_counts_without_importing_dynamo():
    """``SplitModel.block_flops`` counts with torch's FlopCounterMode, whose dispatch is called
    as written (the wrapper torch puts around it imports ``torch._dynamo``: 1.4 s of the
    driver's CPU while Ray starts). The counts are those of the counter used as torch wraps it,
    and nothing is left on torch's function after."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    names = ["cnn", "vgg16", "resnet18", "vit"]
    proc = subprocess.run([sys.executable, "-c", _FLOPS_IN_A_FRESH_PROCESS, *names], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in names:
        assert out[name]["dynamo"] is False, f"{name}: block_flops imported torch._dynamo"
        assert out[name]["counted"] == out[name]["plain"], name
    assert out["hook_left"] is False
    assert out["dynamo_after"] is True  # the plain counter does import it: the check above can fail


@pytest.mark.parametrize("name", list(EXPECTED_BLOCKS))
def test_block_param_bytes_sum_to_total(name):
    model = _model(name, (1, 8, 8), 10)
    per_block = model.block_param_bytes()
    assert len(per_block) == model.num_blocks and all(b > 0 for b in per_block)
    total = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    assert sum(per_block) == total
    # Bytes of a part equal the sum over its blocks.
    k = model.valid_cuts()[0]
    part_bytes = sum(t.numel() * t.element_size() for t in model.client_part(k).state_dict().values())
    assert part_bytes == sum(per_block[:k])


def test_invalid_cut_raises_config_error():
    model = _model("cnn", (1, 8, 8), 10)
    for bad in [0, 4, 7, -1]:
        with pytest.raises(ConfigError, match=str(bad)) as info:
            model.client_part(bad)
        assert "cnn" in str(info.value) and "1..3" in str(info.value)
        with pytest.raises(ConfigError, match=str(bad)):
            model.server_part(bad)
    with pytest.raises(ConfigError):
        model.part(2, 2)
    with pytest.raises(ConfigError):
        model.activation_shape(5)


def test_unknown_model_raises_config_error():
    with pytest.raises(ConfigError, match="resnet50") as info:
        build_model("resnet50", (3, 32, 32), 10, seed=0)
    for name in MODELS:
        assert name in str(info.value)
    with pytest.raises(ConfigError):
        build_model("cnn", (8, 8), 10, seed=0)


def test_block_index():
    assert block_index("blocks.0.weight") == 0
    assert block_index("blocks.12.1.running_mean") == 12
    for bad in ["fc.weight", "blocks.x.weight", "blocks.3"]:
        with pytest.raises(ConfigError):
            block_index(bad)


def test_restricted_cuts():
    blocks = [torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)]
    model = SplitModel("tiny", blocks, (1, 2, 2), 2, cuts=[2])
    assert model.valid_cuts() == [2]
    with pytest.raises(ConfigError, match="cut 1 .*valid cuts: 2"):
        model.client_part(1)
