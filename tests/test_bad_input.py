"""Bad input and bad conditions: checkpoints, cluster size, diverging training."""

from __future__ import annotations

import pytest
import torch

import raysfl
from raysfl import checkpoint
from raysfl.errors import ConfigError, RunFailed

CFG = {"algo": "splitfed_v2", "lr": 0.05, "rounds": 3, "resources": {"client_actors": 2}}


def _state(rnd):
    import numpy as np

    return {"round": rnd, "counters": {"stream_pos": {0: 3}, "sim_total": 1.5},
            "federation": {"fed": {"global": {"blocks.0.w": np.full(3, float(rnd), dtype=np.float32)}}}}


def test_checkpoint_round_trip_keeps_numpy(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    got = checkpoint.load_latest(tmp_path, CFG)
    arr = got["federation"]["fed"]["global"]["blocks.0.w"]
    assert arr.dtype.name == "float32" and arr.tolist() == [1.0, 1.0, 1.0]
    assert got["counters"] == {"stream_pos": {0: 3}, "sim_total": 1.5}


def test_truncated_newest_checkpoint_falls_back(tmp_path, capsys):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    newest = checkpoint.save(tmp_path, 2, _state(2), CFG)
    newest.write_bytes(newest.read_bytes()[:100])  # a crash mid-copy, a full disk, ...
    got = checkpoint.load_latest(tmp_path, CFG)
    assert got["round"] == 1
    assert "round_0002.pt is unreadable" in capsys.readouterr().err


def test_checkpoint_from_another_config_is_refused(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    with pytest.raises(ConfigError, match="different settings"):
        checkpoint.load_latest(tmp_path, {**CFG, "lr": 0.5})
    # settings a resume may change do not count
    assert checkpoint.load_latest(tmp_path, {**CFG, "rounds": 10, "resources": {}})["round"] == 1


class Evil:  # unpickling this would run code; weights_only loading must refuse it
    def __reduce__(self):
        return (print, ("pwned",))


def test_checkpoint_loading_never_unpickles_objects(tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"round": 1, "federation": Evil()}, tmp_path / "checkpoints" / "round_0001.pt")
    with pytest.raises(ConfigError, match="none of its 1 checkpoints is readable"):
        checkpoint.load_latest(tmp_path, CFG)
    assert "pwned" not in capsys.readouterr().out


def test_missing_checkpoints(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoints"):
        checkpoint.load_latest(tmp_path, CFG)


def test_too_small_cluster_fails_fast(quick):
    with pytest.raises(RunFailed, match=r"need 100\.5 CPUs .* the Ray cluster has 4"):
        raysfl.run(quick(algo="splitfed_v2", resources={"client_actors": 2, "server_cpus": 99.0}))


def test_diverging_training_stops_with_one_line(quick):
    with pytest.raises(RunFailed, match="training diverged") as e:
        raysfl.run(quick(algo="splitfed_v2", lr=1e12, momentum=0.0, rounds=5))
    assert "\n" not in str(e.value)
