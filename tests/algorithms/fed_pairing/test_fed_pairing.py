"""FedPairing wired into the runtime: client-to-client split steps, the doubled step of
eq. 7, what crosses actor boundaries, and a run with partners on different actors."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysfl.errors import ConfigError
from raysfl.models import build_model


def test_overlapping_layers_take_the_doubled_step():
    """eq. 7: with plain SGD, an overlapping layer moves by 2 * lr * its cached gradient,
    every other layer by lr * its gradient; switched off, all move by lr * gradient."""
    from raysfl.runtime.peer_split import _step

    for double in (True, False):
        model = build_model("cnn", (1, 8, 8), 10, seed=0)
        part = model.part(0, model.num_blocks)
        before = {n: p.detach().clone() for n, p in part.named_parameters()}
        for p in part.parameters():
            p.grad = torch.ones_like(p)
        a = SimpleNamespace(part=part, opt=torch.optim.SGD(part.parameters(), lr=0.1), extra={"overlap": [2]})
        _step(SimpleNamespace(algo=SimpleNamespace(double_overlap=lambda d=double: d)), a)
        for n, p in part.named_parameters():
            layer = int(n.split(".")[1]) + 1  # 1-based
            want = 0.2 if (double and layer == 2) else 0.1
            assert torch.allclose(before[n] - p.detach(), torch.full_like(p, want)), (n, double)
        assert all(p.grad is None for p in part.parameters())


def _walk(obj, seen=None):
    """Every leaf object inside ``obj`` (dataclasses, dicts, lists, tuples)."""
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk(v)
    elif hasattr(obj, "__dataclass_fields__"):
        for f in obj.__dataclass_fields__:
            yield from _walk(getattr(obj, f))
    else:
        yield obj


def test_raw_samples_never_leave_the_client_actor(ray_session):
    """What a client actor hands to other actors in a FedPairing round -- forwarded
    payloads, served gradients, updates -- holds activations, labels, gradients and model
    parameters only: no array of input-sample shape, and no input sample's values."""
    import raysfl
    from raysfl.algorithms.fed_pairing.algorithm import FedPairing
    from raysfl.data import load_dataset
    from raysfl.resolve import validate
    from raysfl.runtime.client_actor import ClientActor
    from raysfl.transport import state_to_wire

    cfg = validate(raysfl.config_from_kwargs(algo="fed_pairing", clients=2, batch_size=8))
    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    algo = FedPairing(cfg)
    from raysfl.algorithms.base import FederationContext
    from raysfl.devices import sample_profiles

    algo.setup(FederationContext(2, model.num_blocks, model.valid_cuts(), np.array([40, 40]), np.zeros((2, 10)),
                                 sample_profiles(2, cfg.devices, 0), model.block_flops()))
    parts = {0: np.arange(40), 1: np.arange(40, 80)}
    a0 = ClientActor(0, cfg, algo, ds, {0: parts[0]}, model.block_flops())
    a1 = ClientActor(1, cfg, algo, ds, {1: parts[1]}, model.block_flops())
    models = {"global": state_to_wire(model.state_dict()), "own": {}, "charged": [0, 1]}
    a0.begin_round({0: {"cut": 1, "steps": 1, "batch": 8, "stream_pos": 0, "lr": 0.1, "whole": True,
                        "partner": 1, "overlap": []}}, models)
    a1.begin_round({1: {"cut": 3, "steps": 1, "batch": 8, "stream_pos": 0, "lr": 0.1, "whole": True,
                        "partner": 0, "overlap": [2, 3]}}, models)
    sent0, sent1 = a0.pair_forward(0, [1], {0: 1}, []), a1.pair_forward(0, [0], {1: 0}, [])
    # a1 serves client 0's activations (its gradient goes back to a0), and the other way round
    for_0, for_1 = a1.pair_serve(0, [ray_session.put(sent0)]), a0.pair_serve(0, [ray_session.put(sent1)])
    upd0, st0 = a0.finish([ray_session.put(for_0)])
    upd1, st1 = a1.finish([ray_session.put(for_1)])
    raw = ds.x_train[np.concatenate([parts[0], parts[1]])]
    assert {u.client for u in upd0 + upd1} == {0, 1}
    leaves = list(_walk([sent0, sent1, for_0, for_1, upd0, upd1, st0, st1]))
    arrays = [x for x in leaves if isinstance(x, np.ndarray)]
    assert arrays and all(arr.shape[1:] != raw.shape[1:] for arr in arrays if arr.ndim == raw.ndim)
    flat_rows = {row.tobytes() for row in raw.reshape(len(raw), -1).astype(np.float32)}
    for arr in arrays:
        if arr.ndim >= 2 and arr.dtype == np.float32:
            assert not any(r.tobytes() in flat_rows for r in arr.reshape(len(arr), -1))
    keys = {k for u in upd0 + upd1 for k in u.state}
    assert keys == set(model.state_dict())  # updates: model parameters only
    assert sent0[1].cut == 1 and sent1[0].cut == 3  # activations at each client's own split


def test_fed_pairing_run_with_partners_on_different_actors(quick):
    from pathlib import Path

    import raysfl
    from raysfl.metrics import read_rows

    res = raysfl.run(quick(algo="fed_pairing", clients=5, rounds=2, lr=0.5))
    rows = read_rows(Path(res.run_dir) / "clients.parquet")
    assert all(r["completed"] == r["participants"] == 5 and r["failures"] == 0 for r in res.metrics)
    solo = [r for r in rows if r["cut"] == 4]
    paired = [r for r in rows if r["cut"] < 4]
    assert len(solo) == 2 and len(paired) == 8  # 5 clients: two pairs and one alone, each round
    assert all(r["bytes_smashed_up"] == 0 for r in solo) and all(r["bytes_smashed_up"] > 0 for r in paired)
    assert all(math.isfinite(r["train_loss"]) and r["sim_time_s"] > 0 for r in rows)
    assert all(r["bytes_params_up"] > 0 for r in rows)  # every client uploads its whole model
    assert res.metrics[-1]["test_accuracy"] == res.metrics[-1]["test_accuracy"]


@pytest.mark.parametrize("params,match", [
    ({"pairing": "best"}, "unknown pairing 'best'; allowed: greedy, random, location, computation"),
    ({"radius_m": 0}, "radius_m must be a finite number > 0, got 0"),
    ({"pair_alpha": -1}, "pair_alpha must be a finite number >= 0, got -1"),
    ({"round_deadline_s": 5}, "fed_pairing does not take real-time deadlines"),
])
def test_bad_fed_pairing_settings_are_refused(params, match):
    import raysfl
    from raysfl.resolve import validate

    top = {k: params.pop(k) for k in list(params) if k == "round_deadline_s"}
    with pytest.raises(ConfigError, match=match):
        validate(raysfl.config_from_kwargs(algo="fed_pairing", fed_pairing=params, **top))
