"""Tune's asynchronous successive halving (ASHA), one bracket per group of trials: a table's
rows are tuned in one ``Tuner``, but a row's settings must compete only with each other (a
row that learns slower must not lose its whole grid to another row's)."""

from __future__ import annotations

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, TrialScheduler


class GroupedASHA(FIFOScheduler):
    """One :class:`AsyncHyperBandScheduler` per value of ``config["trial"][group]``, created on
    the group's first trial with the arguments given here; every decision is that group's."""

    def __init__(self, group: str, **asha):
        super().__init__()
        self.group, self.asha = group, asha
        self.by_group: dict = {}
        self.of_trial: dict = {}
        self._metric_name = self._mode_name = None

    def supports_buffered_results(self) -> bool:
        return False  # a decision after every round

    def set_search_properties(self, metric, mode, **spec) -> bool:
        self._metric_name, self._mode_name = metric or self._metric_name, mode or self._mode_name
        return True

    def _scheduler(self, trial) -> AsyncHyperBandScheduler:
        key = trial.config["trial"][self.group]
        if key not in self.by_group:
            s = AsyncHyperBandScheduler(**self.asha)
            s.set_search_properties(self._metric_name, self._mode_name)
            self.by_group[key] = s
        self.of_trial[trial] = self.by_group[key]
        return self.by_group[key]

    def on_trial_add(self, tune_controller, trial):
        self._scheduler(trial).on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result) -> str:
        s = self.of_trial.get(trial) or self._scheduler(trial)
        return s.on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result):
        s = self.of_trial.get(trial)
        if s is not None:
            s.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial):
        s = self.of_trial.get(trial)
        if s is not None:
            s.on_trial_remove(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial):
        s = self.of_trial.get(trial)
        if s is not None:
            s.on_trial_error(tune_controller, trial)

    def debug_string(self) -> str:
        return "GroupedASHA: " + "; ".join(f"{k}: {s.debug_string()}" for k, s in self.by_group.items())


_ = TrialScheduler  # CONTINUE / STOP are the sub-schedulers' answers
