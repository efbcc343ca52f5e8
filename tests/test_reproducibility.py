"""Same seed -> identical metrics; stop + --resume -> the same result as one straight run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import raysfl
from raysfl.metrics import TIMING_COLUMNS


def _strip(rows):
    """Rows without timing columns; NaN (a metric not measured that round, e.g. SuperSFL's
    server gradient norm in a round without the server) as None, since NaN != NaN."""
    return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items() if k not in TIMING_COLUMNS}
            for r in rows]


def _tables(run_dir):
    return (_strip(pq.read_table(run_dir / "metrics.parquet").to_pylist()),
            _strip(pq.read_table(run_dir / "clients.parquet").to_pylist()))


def test_same_seed_identical_rows(quick):
    kw = dict(algo="splitfed_v2", clients=6, clients_per_round=4, rounds=3, partition="dirichlet", alpha=0.3)
    a = raysfl.run(quick(**kw))
    b = raysfl.run(quick(**kw))
    assert _tables(a.run_dir) == _tables(b.run_dir)
    c = raysfl.run(quick(seed=1, **kw))
    assert _tables(c.run_dir)[0] != _tables(a.run_dir)[0]


@pytest.mark.parametrize("algo,extra", [
    ("splitfed_v2", {}), pytest.param("psl", {}, marks=pytest.mark.slow),
    # a server answer slower than server_timeout_s (a loaded machine) is a real-time fallback: wait long here
        pytest.param("super_sfl", {"model": "cnn", "super_sfl": {"server_availability": 0.5, "server_timeout_s": 600}},
                     marks=pytest.mark.slow),
    # eq. 2's t/T reads T = --rounds, which this test changes on resume (2 -> 4): compare without it
    pytest.param("gapsl", {"partition": "dirichlet", "alpha": 0.3, "gapsl": {"lgi": "random", "time_scaling": False}},
                 marks=pytest.mark.slow),
    # likewise lambda_t = min(1, t/T) of eq. 5: T pinned by anneal_rounds
    pytest.param("besplit", {"partition": "dirichlet", "alpha": 0.3, "besplit": {"anneal_rounds": 4}},
                 marks=pytest.mark.slow),
])
def test_resume_matches_uninterrupted(quick, algo, extra):
    """splitfed_v2 carries server optimizer momentum across rounds; psl keeps per-client
    client-side models; super_sfl keeps per-client classifiers and an availability schedule;
    gapsl keeps the running dispersion range and a seeded random subset per step; besplit
    keeps client state records, last round's EA weights and per-client auxiliary models:
    all must survive the checkpoint."""
    kw = dict(algo=algo, clients=5, clients_per_round=3, momentum=0.9, **extra)
    straight = raysfl.run(quick(rounds=4, **kw))
    first = raysfl.run(quick(rounds=2, **kw))
    assert len(first.metrics) == 2
    resumed = raysfl.run(raysfl.resume_config(first.run_dir, {"rounds": 4}))
    assert resumed.run_dir == first.run_dir
    assert _tables(resumed.run_dir) == _tables(straight.run_dir)


def test_resume_refuses_changed_settings(quick):
    first = raysfl.run(quick(algo="fedavg", rounds=1))
    with pytest.raises(raysfl.ConfigError, match="lr"):
        raysfl.resume_config(first.run_dir, {"rounds": 3, "lr": 0.5})
    with pytest.raises(raysfl.ConfigError, match="already finished"):
        raysfl.run(raysfl.resume_config(first.run_dir, {"rounds": 1}))


@pytest.mark.slow
def test_transport_setting_does_not_change_results(tmp_path):
    """Smashed data inlined through the owner (the default) or through the shared-memory
    object store (--inline-object-kb 0): the same seed gives the same metrics. Each run
    starts its own Ray, since Ray reads the setting when it starts."""
    import os
    import subprocess
    import sys

    dirs = []
    for kb in (0, 1024):
        out = tmp_path / f"kb{kb}"
        cmd = [sys.executable, "-m", "raysfl", "run", "--algo", "psl", "--clients", "4", "--rounds", "2",
               "--local-steps", "2", "--checkpoint-every", "0", "--no-progress", "--inline-object-kb", str(kb),
               "--out", str(out), "--name", "r"]
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_max_direct_call_object_size")}
        subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=300)
        dirs.append(out / "r")
    assert _tables(dirs[0]) == _tables(dirs[1])
    assert all(r["bytes_smashed_up"] > 0 for r in _tables(dirs[0])[0])
