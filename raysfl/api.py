"""The Python API: ``raysfl.run(Config(...))`` runs one experiment end to end; config in,
result out. How a run proceeds is :mod:`raysfl.runtime.experiment` and
:mod:`raysfl.runtime.rounds`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from raysfl.config import Config
from raysfl.errors import ConfigError
from raysfl.resolve import from_dict, validate

# Settings a resumed run may change (plus the ``resources`` section); everything else must
# match the original run. Fault handling is among them, so a run that gave up can go on: more
# retries or restarts, other deadlines, another fault schedule (``faults=""``: none).
RESUMABLE_OVERRIDES = {"rounds", "progress", "checkpoint_every", "eval_every", "resume", "out", "name",
                       "max_round_retries", "max_restarts", "round_deadline_s", "step_deadline_s", "sim_deadline_s",
                       "faults", "min_included"}


@dataclass
class RunResult:
    run_dir: Path
    metrics: list[dict]

    @property
    def final(self) -> dict:
        return self.metrics[-1]


def resume_config(run_dir: str | Path, overrides: dict | None = None) -> Config:
    """The config of an existing run, with the few settings a resume may change."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"cannot resume '{run_dir}': no config.json in it")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"cannot resume '{run_dir}': its config.json is unreadable ({e}); it is written when "
                          f"the run starts, so this run directory was damaged") from None
    if not isinstance(data, dict) or not isinstance(data.get("algo"), str):
        raise ConfigError(f"cannot resume '{run_dir}': its config.json is not a raysfl run configuration "
                          f"(a mapping with 'algo')")
    algo_params = data.pop("algo_params", {}) or {}
    if not isinstance(algo_params, dict):
        raise ConfigError(f"cannot resume '{run_dir}': 'algo_params' in its config.json is not a mapping")
    data[data["algo"]] = algo_params
    overrides = dict(overrides or {})
    # Where actors run does not change what they compute: resources may change on resume.
    data["resources"] = {**data.get("resources", {}), **overrides.pop("resources", {})}
    for k, v in overrides.items():
        if k not in RESUMABLE_OVERRIDES and data.get(k) != v:
            raise ConfigError(f"cannot change '{k}' when resuming (it was {data.get(k)!r}); "
                              f"allowed: {', '.join(sorted(RESUMABLE_OVERRIDES - {'resume'}))}")
    data.update({k: v for k, v in overrides.items() if k in RESUMABLE_OVERRIDES})
    cfg = from_dict(data)
    cfg.resume = str(run_dir)
    return cfg


def run(cfg: Config) -> RunResult:
    """Run (or resume, if ``cfg.resume`` is set) one experiment and return its metrics.

    The config is validated before anything starts; the run itself is
    :func:`raysfl.runtime.experiment.run_experiment`.
    """
    from raysfl.runtime.experiment import run_experiment

    run_dir, rows = run_experiment(validate(cfg))
    return RunResult(run_dir, rows)


def config_from_kwargs(**kwargs) -> Config:
    """Build a Config from keyword settings, e.g. ``config_from_kwargs(algo="psl", rounds=3)``."""
    return from_dict(kwargs)


__all__ = ["Config", "RunResult", "run", "resume_config", "config_from_kwargs"]
