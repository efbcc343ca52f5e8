"""Tuning's rules, checked before anything runs: tuning runs evaluate on a validation split held
out of the training data (never the test split) and run on tuning seeds, apart from the seeds
a table is judged on; and the search's schedule: where successive halving compares a row's
settings, and so which rounds a trial must evaluate. No torch, no Ray."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from raysfl.errors import ConfigError

if TYPE_CHECKING:
    from raysfl.paper_tables import Metric

TUNE_SEED_BASE = 1000   # tuning seeds are 1000, 1001, ...: apart from the evaluation seeds 0..N-1
VALIDATION = 0.2        # the share of the training split a tuning run holds out and evaluates on
REDUCTION = 3           # ASHA's reduction factor: a third of a row's settings go on at each rung


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


def grace(rounds: int) -> int:
    """ASHA's first rung: a ninth of the rounds, so that the rungs fall at about 1/9, 1/3 and all
    of a run with a reduction factor of 3 -- but not before round 3 where the run is 6 rounds or
    longer: after one or two rounds a good learning rate may still sit at chance beside a tiny
    one, and would be stopped for it."""
    return max(1, rounds // (REDUCTION * REDUCTION), min(3, rounds // 2))


def rungs(rounds: int) -> list[int]:
    """The rounds at which the search's successive halving compares a row's settings: ASHA's
    milestones ``grace * REDUCTION^k`` below ``rounds`` (Tune's ``_Bracket``), and the last round."""
    g = grace(rounds)
    count = int(math.log(rounds / g) / math.log(REDUCTION) + 1) if rounds >= g else 0
    return sorted({g * REDUCTION ** k for k in range(count) if g * REDUCTION ** k <= rounds} | {rounds})


def evaluating(cfg, rounds: str):
    """``cfg`` evaluating in ``rounds`` (as ``--eval-rounds``; "" = every round), unless it
    evaluates on a schedule of its own (``--eval-every`` or ``--eval-rounds`` given): what a
    trial (:func:`rounds_read`) and a table's run (:mod:`raysfl.reproduce.schedule`) evaluate."""
    import dataclasses

    if cfg.eval_every != 1 or cfg.eval_rounds or not rounds:
        return cfg
    return dataclasses.replace(cfg, eval_rounds=rounds)


def rounds_read(metric: Metric, rounds: int, halving: bool = True) -> str:
    """The rounds a trial must evaluate for the search to read ``metric`` where it compares the
    settings (:func:`rungs`; the last round alone for a search without successive halving, a
    grid's widening), as ``--eval-rounds``: the last ``k`` before each for a mean of the last
    k, the rung itself for a final value; "" (every round) for a metric that reads the whole
    run (best, rounds or time to a target). Evaluating no other round changes no score:
    evaluation does not touch training (ours; docs/performance.md section 8)."""
    at = rungs(rounds) if halving else [rounds]
    if metric.read == "mean_last":
        return ",".join(f"{max(1, m - metric.k + 1)}-{m}" for m in at)
    if metric.read == "final":
        return ",".join(str(m) for m in at)
    return ""
