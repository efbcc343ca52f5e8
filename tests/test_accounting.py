"""Bytes per round match a hand calculation; TensorBoard holds every round."""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

import raysfl
from raysfl.models import build_model


def _client_param_bytes(cut):
    m = build_model("cnn", (1, 8, 8), 10, seed=0)
    return sum(m.block_param_bytes()[:cut])


@pytest.mark.parametrize("transfer_dtype,act_bytes", [("float32", 4), ("float16", 2)])
def test_splitfed_v1_bytes_match_hand_calculation(quick, transfer_dtype, act_bytes):
    steps, batch, cut = 3, 16, 2
    result = raysfl.run(quick(algo="splitfed_v1", rounds=2, local_steps=steps, batch_size=batch, cut=cut,
                              transfer_dtype=transfer_dtype))
    act = math.prod(build_model("cnn", (1, 8, 8), 10, seed=0).activation_shape(cut))  # 64*2*2
    params = _client_param_bytes(cut)
    smashed = steps * (batch * act * act_bytes + batch * 8)  # activations + int64 labels
    grads = steps * batch * act * act_bytes
    clients = pq.read_table(result.run_dir / "clients.parquet").to_pylist()
    assert len(clients) == 2 * 4
    for r in clients:
        assert r["bytes_smashed_up"] == smashed
        assert r["bytes_grad_down"] == grads
        assert r["bytes_params_up"] == params and r["bytes_params_down"] == params
        assert r["bytes_up"] == smashed + params
        assert r["bytes_down"] == grads + params
    for row in result.metrics:
        assert row["bytes_up"] == 4 * (smashed + params)
        assert row["bytes_down"] == 4 * (grads + params)


def test_tensorboard_has_every_round(quick):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = raysfl.run(quick(algo="splitfed_v2", rounds=3))
    acc = EventAccumulator(str(result.run_dir / "tb"))
    acc.Reload()
    from raysfl.metrics import tb_tag

    for column in ("test_accuracy", "bytes_up", "sim_time_s"):
        assert [e.step for e in acc.Scalars(tb_tag(column))] == [1, 2, 3]
    assert [e.value for e in acc.Scalars("accuracy/test_accuracy")] == pytest.approx(
        [r["test_accuracy"] for r in result.metrics])
