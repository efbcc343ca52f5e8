"""Checkpoints in the run directory: ``checkpoints/round_XXXX.pt``; the newest one resumes.

Only the newest ``--keep-checkpoints`` (2 by default: the newest may be unreadable after a
crash mid-write of the disk, then the one before resumes) are kept, plus, with
``--keep-best``, the one of the best test accuracy so far (:func:`prune`).

A checkpoint holds the fed server's global (and per-client) models, every server actor's
model and optimizer state, the driver's counters (round, sample-stream positions,
cumulative times) and a fingerprint of the run's config. The clients' kept states (PSL's own
models, ...) are files in ``checkpoints/own/`` that checkpoints share, each written once
(:mod:`raysfl.own_state_files`); a checkpoint names them, and reads them back when loaded.

* Each file is written to a temporary name and renamed, so an interrupted save never
  leaves a partial checkpoint behind.
* Loading never unpickles arbitrary objects: NumPy arrays are stored as tensors and the
  file is read with ``torch.load(weights_only=True)``, which only rebuilds tensors and
  plain containers.
* An unreadable newest file (truncated, corrupted) is reported and the previous one is
  used; a checkpoint written by a different config is refused.
* ``checkpoints/manifest.json`` records, for each checkpoint, the hash of its file and of the
  metrics rows 1..N it goes with, written before the file takes its name. A resume checks the
  run directory against it (:func:`verify_resume`): the checkpoint's round is the one in its
  name, ``metrics.parquet`` holds rounds 1..N, and neither was changed since (issue 45).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch

from raysfl import own_state_files
from raysfl.errors import ConfigError, first_line
from raysfl.own_state_files import OWN
from raysfl.whole_files import replacing, write_text

_ND = "__ndarray__"
# Settings that may differ between a checkpoint and the run resuming it: where and how long it
# runs, and how it survives faults and stragglers (a resume may change those: raysfl.api).
_FREE = {"rounds", "progress", "checkpoint_every", "eval_every", "eval_rounds", "resume", "out", "name", "resources",
         "max_round_retries", "max_restarts", "round_deadline_s", "step_deadline_s", "sim_deadline_s", "faults",
         "min_included", "keep_checkpoints", "keep_best", "mlflow", "mlflow_artifacts"}
# What _FREE was before the fault settings joined it, and the settings added since: checkpoints
# written then carry a fingerprint over these, which is still accepted.
_LEGACY_FREE = {"rounds", "progress", "checkpoint_every", "eval_every", "resume", "out", "name", "resources"}
_ADDED = {"min_included", "keep_checkpoints", "keep_best", "mlflow", "mlflow_artifacts"}
# Settings added after checkpoints were first written, with the value that means what their absence
# meant: at that value they are left out of the fingerprint, so older checkpoints still resume.
_LATER = {"deterministic": False, "eval_passes": 10, "lr_schedule": None, "init_from": None, "eval_rounds": ""}
_NAME = re.compile(r"round_(\d+)\.pt")
MANIFEST = "manifest.json"


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
        elif f.name not in (".tmp.pt", MANIFEST, MANIFEST + ".tmp", OWN):  # ours (.tmp: a save that was interrupted)
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


def save(run_dir: Path, rnd: int, state: dict, cfg_dict: dict | None = None,
         metrics_rows: list[dict] | None = None, digest: "RowsDigest | None" = None) -> Path:
    """Write round ``rnd``'s checkpoint: to a temporary file, its manifest entry (the file's
    hash, and the hash of ``metrics_rows``: the run's rows of rounds 1..rnd, by ``digest``, the
    run's :class:`RowsDigest`, where given), then the rename."""
    d = Path(run_dir) / "checkpoints"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"round_{rnd:04d}.pt"
    payload = dict(state)
    if cfg_dict is not None:
        payload["config_fingerprint"] = fingerprint(cfg_dict)
    with replacing(path, tmp=d / ".tmp.pt") as tmp:
        torch.save(_encode(payload), tmp)
        entry = {"file": path.name, "sha256": file_digest(tmp)}
        if metrics_rows is not None:
            entry.update(metrics_rows=len(metrics_rows), metrics_sha256=(digest or RowsDigest()).of(metrics_rows))
        manifest = read_manifest(run_dir)
        manifest[str(rnd)] = entry
        _write_manifest(run_dir, manifest)  # before the rename: a file under a round's name always has its entry
    return path


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _canonical(v):
    """A metrics value as it reads back from Parquet whatever column type it was written in
    (an int column later widened to float reads 3.0 for 3)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return repr(float(v))
    return v


def rows_digest(rows: list[dict]) -> str:
    """Hash of metrics rows, independent of their Parquet column types and of columns that
    later rounds added (a missing value and a null are the same): the SHA-256 of the rows'
    canonical JSON list (:class:`RowsDigest`)."""
    return RowsDigest().of(rows)


class RowsDigest:
    """:func:`rows_digest` of a run's rows as they grow, each row serialised once. A checkpoint
    every round (the default) hashed all the rows so far: 28 ms at 1,000 rounds and 0.12 s at
    5,000 on the 2-core AMD EPYC, a cost per round that grew with the run. The hash is of the
    same text, ``[row, row, ...]``, fed row by row. Rows given again must be the same objects (a
    run's rows, logged once); a list that does not extend the last one is hashed from its start."""

    def __init__(self):
        self._rows: list[dict] = []
        self._hash = hashlib.sha256(b"[")

    def of(self, rows: list[dict]) -> str:
        if len(rows) < len(self._rows) or any(a is not b for a, b in zip(self._rows, rows)):
            self.__init__()
        for r in rows[len(self._rows):]:
            canon = {k: _canonical(v) for k, v in sorted(r.items()) if v is not None}
            self._hash.update((", " if self._rows else "").encode() + json.dumps(canon, sort_keys=True,
                                                                                 default=str).encode())
            self._rows.append(r)
        done = self._hash.copy()
        done.update(b"]")
        return done.hexdigest()


def read_manifest(run_dir: Path) -> dict:
    """{round (str): {"file", "sha256", "metrics_rows", "metrics_sha256"}}; {} if there is none
    (a run written before manifests) or it cannot be read (then a warning)."""
    path = Path(run_dir) / "checkpoints" / MANIFEST
    if not path.is_file():
        return {}
    try:
        out = json.loads(path.read_text())
        if not isinstance(out, dict):
            raise ValueError("not a mapping")
        return out
    except (OSError, ValueError) as e:
        print(f"raysfl: warning: {path} is unreadable ({first_line(e)}); the checkpoints are not checked against it",
              file=sys.stderr)
        return {}


def _write_manifest(run_dir: Path, manifest: dict) -> None:
    write_text(Path(run_dir) / "checkpoints" / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))


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
    manifest = read_manifest(run_dir)
    if gone and manifest:
        _write_manifest(run_dir, {k: v for k, v in manifest.items() if not (k.isdigit() and int(k) in gone)})
    own_state_files.prune(run_dir, rounds_saved(run_dir))  # the kept states no checkpoint left names
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
    return own_state_files.resolve(run_dir, _decode(torch.load(path, weights_only=True, map_location="cpu")), path)


def load_latest(run_dir: Path, cfg_dict: dict | None = None) -> dict:
    """The newest readable checkpoint of ``run_dir`` (checked against ``cfg_dict``)."""
    files = checkpoint_files(run_dir)
    if not files:
        raise ConfigError(f"cannot resume '{run_dir}': no checkpoints/round_*.pt in it")
    for path in reversed(files):
        try:
            state = _decode(torch.load(path, weights_only=True, map_location="cpu"))
        except Exception as e:  # noqa: BLE001 - truncated, corrupted, or not a raysfl checkpoint
            print(f"raysfl: warning: checkpoint {path} is unreadable ({first_line(e)}); trying the one before",
                  file=sys.stderr)
            continue
        if not isinstance(state, dict) or "round" not in state or "federation" not in state and "model" not in state:
            print(f"raysfl: warning: {path} is not a raysfl checkpoint; trying the one before", file=sys.stderr)
            continue
        named = int(_NAME.fullmatch(path.name).group(1))
        if state["round"] != named:
            raise ConfigError(f"checkpoint {path} holds round {state['round']} but is named round {named}; "
                              f"move it out of {path.parent} to resume from the checkpoint before it")
        if cfg_dict is not None and state.get("config_fingerprint") not in {None} | _fingerprints(cfg_dict):
            raise ConfigError(f"checkpoint {path} was written by a run with different settings than "
                              f"{Path(run_dir) / 'config.json'}; resume it with its own config")
        return own_state_files.resolve(run_dir, state, path)
    raise ConfigError(f"cannot resume '{run_dir}': none of its {len(files)} checkpoints is readable")


def verify_resume(run_dir: Path, rnd: int, metrics_rows: list[dict] | None) -> None:
    """Before a resume from round ``rnd``'s checkpoint: the run directory must still be the one
    the checkpoint was written with. ``metrics_rows``: ``metrics.parquet``'s rows (None: the file
    is missing). Refused, with one line naming what disagrees: metrics rows of rounds 1..rnd
    missing, or different from the ones recorded with the checkpoint; a checkpoint file changed
    since it was written. A run written before manifests is checked for its rows only."""
    run_dir = Path(run_dir)
    ckpt = run_dir / "checkpoints" / f"round_{rnd:04d}.pt"
    move = f"move {ckpt.name} (and newer checkpoints) out of {ckpt.parent} to resume from an older one"
    if metrics_rows is None:
        raise ConfigError(f"cannot resume '{run_dir}': metrics.parquet is missing, but checkpoint {ckpt.name} "
                          f"goes with the metrics of rounds 1..{rnd}; put it back (or start the run again)")
    mine = [r for r in metrics_rows if r.get("round") is not None and r["round"] <= rnd]
    have = [int(r["round"]) for r in mine]
    if have != list(range(1, rnd + 1)):
        missing = sorted(set(range(1, rnd + 1)) - set(have))
        what = (f"lacks round(s) {round_ranges(missing, 6)}" if missing
                else f"holds rounds {round_ranges(sorted(set(have)), 6)} out of order or twice")
        raise ConfigError(f"cannot resume '{run_dir}': metrics.parquet {what}, but checkpoint {ckpt.name} goes with "
                          f"rounds 1..{rnd}; put the file back, or {move}")
    entry = read_manifest(run_dir).get(str(rnd))
    if entry is None:
        return
    if entry.get("sha256") and file_digest(ckpt) != entry["sha256"]:
        raise ConfigError(f"cannot resume '{run_dir}': {ckpt.name} is not the file written as round {rnd}'s "
                          f"checkpoint (its hash differs from {MANIFEST}'s); {move}")
    if entry.get("metrics_sha256") and rows_digest(mine) != entry["metrics_sha256"]:
        raise ConfigError(f"cannot resume '{run_dir}': metrics.parquet's rows of rounds 1..{rnd} differ from the "
                          f"ones recorded with checkpoint {ckpt.name}; put the original file back, or {move}")


def round_ranges(rounds: list[int], most: int | None = None) -> str:
    """'1-3, 5' for [1, 2, 3, 5] (at most ``most`` pieces, then ' ...')."""
    out, start = [], None
    for i, r in enumerate(rounds):
        if start is None:
            start = r
        if i + 1 == len(rounds) or rounds[i + 1] != r + 1:
            out.append(f"{start}-{r}" if r != start else f"{r}")
            start = None
    if most is not None and len(out) > most:
        return ", ".join(out[:most]) + " ..."
    return ", ".join(out)
