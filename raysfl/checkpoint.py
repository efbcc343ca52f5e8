"""Checkpoints in the run directory: ``checkpoints/round_XXXX.pt`` plus ``latest.pt``.

A checkpoint holds the fed server's global (and per-client) models, every server actor's
model and optimizer state, and the driver's counters (round, sample-stream positions,
cumulative times). Writes are atomic, so an interrupted save never corrupts ``latest.pt``.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from raysfl.errors import ConfigError


def save(run_dir: Path, rnd: int, state: dict) -> Path:
    d = Path(run_dir) / "checkpoints"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"round_{rnd:04d}.pt"
    tmp = d / ".tmp.pt"
    torch.save(state, tmp)
    os.replace(tmp, path)
    latest_tmp = d / ".latest.tmp"
    torch.save(state, latest_tmp)
    os.replace(latest_tmp, d / "latest.pt")
    return path


def load_latest(run_dir: Path) -> dict:
    path = Path(run_dir) / "checkpoints" / "latest.pt"
    if not path.is_file():
        raise ConfigError(f"cannot resume '{run_dir}': no checkpoints/latest.pt in it")
    return torch.load(path, weights_only=False)
