"""Tuning's rules, checked before anything runs: tuning runs evaluate on a validation split held
out of the training data (never the test split) and run on tuning seeds, apart from the seeds
a table is judged on. No torch, no Ray."""

from __future__ import annotations

from raysfl.errors import ConfigError

TUNE_SEED_BASE = 1000   # tuning seeds are 1000, 1001, ...: apart from the evaluation seeds 0..N-1
VALIDATION = 0.2        # the share of the training split a tuning run holds out and evaluates on


def tuning_seeds(n: int) -> list[int]:
    return [TUNE_SEED_BASE + i for i in range(n)]


def check_reads_validation(cfg, row: str = "") -> None:
    """One line, before anything runs, when a tuning run would evaluate on the test split."""
    if not cfg.validation:
        where = f"row '{row}': " if row else ""
        raise ConfigError(f"{where}tuning reads a validation split held out of the training data, but this run has "
                          f"validation {cfg.validation:g} and would read the test split; allowed: validation in "
                          f"(0, 0.5]")


def check_seeds_apart(tuning: list[int], evaluation: list[int]) -> None:
    """Tuning seeds and evaluation seeds share none (one line naming the shared ones)."""
    shared = sorted(set(tuning) & set(evaluation))
    if shared:
        raise ConfigError(f"tuning seeds {', '.join(map(str, tuning))} share seed(s) {', '.join(map(str, shared))} "
                          f"with the evaluation seeds: a table's settings are chosen on other seeds than it is "
                          f"judged on; allowed: tuning seeds from {TUNE_SEED_BASE}")
