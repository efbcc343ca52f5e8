"""A dead actor stops the run with one clear line; finished rounds are kept and resumable."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raysfl


def _rows(path):
    """Read the file in one go: the run replaces it atomically while we poll."""
    return pq.read_table(pa.BufferReader(path.read_bytes())).to_pylist()


@pytest.mark.slow  # two runs; CI runs the slow tests
def test_killed_server_gives_run_failed_and_resume_continues(quick, ray_session, tmp_path):
    ray = ray_session
    cfg = quick(algo="splitfed_v2", rounds=200, name="victim")
    run_dir = tmp_path / "runs" / "victim"
    outcome = {}

    def target():
        try:
            raysfl.run(cfg)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e

    t = threading.Thread(target=target)
    t.start()
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until two rounds are on disk
        path = run_dir / "metrics.parquet"
        if path.exists() and len(_rows(path)) >= 2:
            break
        time.sleep(0.2)
    ray.kill(ray.get_actor("raysfl:victim:server-0"))
    t.join(timeout=120)
    err = outcome.get("error")
    assert isinstance(err, raysfl.errors.RunFailed), err
    msg = str(err)
    assert "\n" not in msg and "--resume" in msg and str(run_dir) in msg
    done = _rows(run_dir / "metrics.parquet")
    assert len(done) >= 2 and [r["round"] for r in done] == list(range(1, len(done) + 1))
    resumed = raysfl.run(raysfl.resume_config(run_dir, {"rounds": len(done) + 1}))
    assert [r["round"] for r in resumed.metrics] == list(range(1, len(done) + 2))
