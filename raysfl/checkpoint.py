"""Checkpoints in the run directory: ``checkpoints/round_XXXX.pt``; the newest one resumes.

A checkpoint holds the fed server's global (and per-client) models, every server actor's
model and optimizer state, and the driver's counters (round, sample-stream positions,
cumulative times). Each file is written to a temporary name and renamed, so an
interrupted save never leaves a partial checkpoint behind.
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
    return path


def load_latest(run_dir: Path) -> dict:
    files = sorted((Path(run_dir) / "checkpoints").glob("round_*.pt"), key=lambda f: int(f.stem.split("_")[1]))
    if not files:
        raise ConfigError(f"cannot resume '{run_dir}': no checkpoints/round_*.pt in it")
    return torch.load(files[-1], weights_only=False)
