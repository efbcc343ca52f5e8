"""Checkpoints in the run directory: ``checkpoints/round_XXXX.pt``; the newest one resumes.

Only the newest ``--keep-checkpoints`` (2 by default: the newest may be unreadable after a
crash mid-write of the disk, then the one before resumes) are kept, plus, with
``--keep-best``, the one of the best test accuracy so far (:func:`prune`).

A checkpoint holds the fed server's global (and per-client) models, every server actor's
model and optimizer state, the driver's counters (round, sample-stream positions,
cumulative times) and a fingerprint of the run's config.

* Each file is written to a temporary name and renamed, so an interrupted save never
  leaves a partial checkpoint behind.
* Loading never unpickles arbitrary objects: NumPy arrays are stored as tensors and the
  file is read with ``torch.load(weights_only=True)``, which only rebuilds tensors and
  plain containers.
* An unreadable newest file (truncated, corrupted) is reported and the previous one is
  used; a checkpoint written by a different config is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import torch

from raysfl.errors import ConfigError

_ND = "__ndarray__"
# Settings that may differ between a checkpoint and the run resuming it: where and how long it
# runs, and how it survives faults and stragglers (a resume may change those: raysfl.api).
_FREE = {"rounds", "progress", "checkpoint_every", "eval_every", "resume", "out", "name", "resources",
         "max_round_retries", "max_restarts", "round_deadline_s", "step_deadline_s", "sim_deadline_s", "faults",
         "min_included", "keep_checkpoints", "keep_best", "mlflow"}
# What _FREE was before the fault settings joined it, and the settings added since: checkpoints
# written then carry a fingerprint over these, which is still accepted.
_LEGACY_FREE = {"rounds", "progress", "checkpoint_every", "eval_every", "resume", "out", "name", "resources"}
_ADDED = {"min_included", "keep_checkpoints", "keep_best", "mlflow"}
# Settings added after checkpoints were first written, with the value that means what their absence
# meant: at that value they are left out of the fingerprint, so older checkpoints still resume.
_LATER = {"deterministic": False, "eval_passes": 10}
_NAME = re.compile(r"round_(\d+)\.pt")


def fingerprint(cfg_dict: dict, free=frozenset(_FREE)) -> str:
    """Hash of the settings that determine what a run computes."""
    fixed = {k: v for k, v in cfg_dict.items() if k not in free and not (k in _LATER and v == _LATER[k])}
    return hashlib.sha256(json.dumps(fixed, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _fingerprints(cfg_dict: dict) -> set[str]:
    return {fingerprint(cfg_dict), fingerprint(cfg_dict, _LEGACY_FREE | _ADDED)}


def checkpoint_files(run_dir: Path) -> list[Path]:
    """``checkpoints/round_NNNN.pt`` files of a run, oldest first. Other files there (a copy a
    file manager made, an editor's backup) are not checkpoints: they are named in a warning and
    left alone."""
    d = Path(run_dir) / "checkpoints"
    files, strays = [], []
    for f in sorted(d.iterdir()) if d.is_dir() else []:
        if _NAME.fullmatch(f.name):
            files.append(f)
        elif f.name != ".tmp.pt":  # a save that was interrupted
            strays.append(f.name)
    if strays:
        print(f"raysfl: warning: ignoring {len(strays)} file(s) in {d} not named round_NNNN.pt: "
              f"{', '.join(repr(n) for n in strays[:3])}{' ...' if len(strays) > 3 else ''}", file=sys.stderr)
    return sorted(files, key=lambda f: int(_NAME.fullmatch(f.name).group(1)))


def _encode(x):
    if isinstance(x, np.ndarray):
        return {_ND: torch.from_numpy(np.ascontiguousarray(x).copy())}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {k: _encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_encode(v) for v in x)
    return x


def _decode(x):
    if isinstance(x, dict):
        if len(x) == 1 and _ND in x:
            return x[_ND].numpy()
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_decode(v) for v in x)
    return x


def save(run_dir: Path, rnd: int, state: dict, cfg_dict: dict | None = None) -> Path:
    d = Path(run_dir) / "checkpoints"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"round_{rnd:04d}.pt"
    tmp = d / ".tmp.pt"
    payload = dict(state)
    if cfg_dict is not None:
        payload["config_fingerprint"] = fingerprint(cfg_dict)
    torch.save(_encode(payload), tmp)
    os.replace(tmp, path)
    return path


def rounds_saved(run_dir: Path) -> list[int]:
    """The rounds that have a checkpoint file, oldest first."""
    return sorted(int(f.stem.split("_")[1]) for f in (Path(run_dir) / "checkpoints").glob("round_*.pt")
                  if f.stem.split("_")[1].isdigit())


def resume_hint(run_dir: Path, checkpoint_every: int | None, flags: str = "") -> str:
    """The command that continues a stopped run, or what to do when nothing can be resumed."""
    import shlex

    extra = f" {flags}" if flags else ""
    if checkpoint_files(run_dir):
        return f"continue from its last checkpoint with: raysfl run --resume {shlex.quote(str(run_dir))}{extra}"
    return (f"no checkpoint was written to resume from (--checkpoint-every {checkpoint_every}): "
            f"start it again{extra and ' with' + extra}")


def prune(run_dir: Path, keep: int, best: int | None = None) -> list[int]:
    """Delete all but the newest ``keep`` checkpoints (0: keep every one) and the one of
    round ``best``; returns the rounds deleted."""
    if keep <= 0:
        return []
    saved = rounds_saved(run_dir)
    protect = set(saved[-keep:]) | ({best} if best is not None else set())
    gone = [r for r in saved if r not in protect]
    for r in gone:
        (Path(run_dir) / "checkpoints" / f"round_{r:04d}.pt").unlink(missing_ok=True)
    return gone


def best_round(rows: list[dict], saved: list[int], metric: str | None = None) -> int | None:
    """The round with the highest ``metric`` among the rounds in ``saved`` (None if none was
    evaluated). By default the test accuracy, or the lowest test loss for a loss without an
    accuracy (regression, :mod:`raysfl.objective`)."""
    have = set(saved)
    sign = 1.0
    if metric is None:
        metric = "test_accuracy"
        if not any(r.get(metric) == r.get(metric) and r.get(metric) is not None for r in rows):
            metric, sign = "test_loss", -1.0
    scored = [(sign * r[metric], r["round"]) for r in rows if r["round"] in have and r.get(metric) == r.get(metric)
              and r.get(metric) is not None]
    return max(scored, key=lambda t: (t[0], -t[1]))[1] if scored else None


def disk_usage(path: Path) -> int:
    """Bytes of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def load_round(run_dir: Path, rnd: int) -> dict:
    """The checkpoint of round ``rnd`` (ConfigError naming the rounds kept if it is not)."""
    path = Path(run_dir) / "checkpoints" / f"round_{rnd:04d}.pt"
    if not path.is_file():
        kept = rounds_saved(run_dir)
        raise ConfigError(f"run '{run_dir}' has no checkpoint of round {rnd}; kept: "
                          f"{', '.join(map(str, kept)) or 'none'} (--keep-checkpoints, --keep-best)")
    return _decode(torch.load(path, weights_only=True, map_location="cpu"))


def _short(e: BaseException, limit: int = 160) -> str:
    """The first line of an error, shortened at a word boundary (with '...') when long."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    if len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else first[:limit]) + " ..."


def load_latest(run_dir: Path, cfg_dict: dict | None = None) -> dict:
    """The newest readable checkpoint of ``run_dir`` (checked against ``cfg_dict``)."""
    files = checkpoint_files(run_dir)
    if not files:
        raise ConfigError(f"cannot resume '{run_dir}': no checkpoints/round_*.pt in it")
    for path in reversed(files):
        try:
            state = _decode(torch.load(path, weights_only=True, map_location="cpu"))
        except Exception as e:  # noqa: BLE001 - truncated, corrupted, or not a raysfl checkpoint
            print(f"raysfl: warning: checkpoint {path} is unreadable ({_short(e)}); trying the one before",
                  file=sys.stderr)
            continue
        if not isinstance(state, dict) or "round" not in state or "federation" not in state and "model" not in state:
            print(f"raysfl: warning: {path} is not a raysfl checkpoint; trying the one before", file=sys.stderr)
            continue
        if cfg_dict is not None and state.get("config_fingerprint") not in {None} | _fingerprints(cfg_dict):
            raise ConfigError(f"checkpoint {path} was written by a run with different settings than "
                              f"{Path(run_dir) / 'config.json'}; resume it with its own config")
        return state
    raise ConfigError(f"cannot resume '{run_dir}': none of its {len(files)} checkpoints is readable")
