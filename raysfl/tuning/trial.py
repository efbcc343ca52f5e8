"""One tuning trial as a Ray Tune ``Trainable``: one setting of the grid, run on every tuning
seed in lockstep, one round per ``step()``, so that Tune's successive halving can stop it
after any round.

Each seed's run is an ordinary ``raysfl.run`` in a thread of the trial's process, paused by
its own callback after every round; stopping it makes that callback return True, so the run
ends cleanly (as a run a callback stops) and its actors go back to the process's pool. Tune
reuses the trial's process for the next trial (``reuse_actors``): the next setting's runs
find those actors warm (:mod:`raysfl.runtime.pool`) instead of starting new processes.

Every run here evaluates on the validation split (``Config.validation`` > 0): the trial
refuses a config that would read the test split, before it starts anything.
"""

from __future__ import annotations

import math
import queue
import tempfile
import threading

from ray import tune

from raysfl.paper_tables import Metric

WORST = 1e9  # a setting whose metric is not finite (a run that diverged): the worst score there is


def score(metric: Metric, runs: list[list[dict]]) -> tuple[float, list[float]]:
    """(the mean over seeds of ``metric`` on each run's rows so far, the per-seed values); a
    non-finite value counts as the worst (``WORST`` in the metric's unfavourable direction)."""
    values = [metric.value(rows)[0] for rows in runs]
    worst = -WORST if metric.higher_is_better else WORST
    vals = [v if isinstance(v, (int, float)) and math.isfinite(v) else worst for v in values]
    return sum(vals) / len(vals), values


class SteppedRun:
    """One raysfl run in a thread, paused after every round: :meth:`advance` lets it train one
    more round, :meth:`row` waits for that round's metrics row (None once the run ended),
    :meth:`stop` ends it cleanly and waits for it."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rows: queue.Queue = queue.Queue()
        self.go = threading.Semaphore(0)
        self.stopping = False
        self.error: BaseException | None = None
        self.diverged = False  # its loss went non-finite: a result (the worst score), not a failure
        self.ended = False
        self.thread = threading.Thread(target=self._main, daemon=True, name=f"raysfl-tune-seed{cfg.seed}")
        self.thread.start()

    def _main(self) -> None:
        from raysfl.api import run
        from raysfl.errors import Diverged

        try:
            run(self.cfg, callbacks=[self._on_round])
        except Diverged:
            self.diverged = True
        except BaseException as e:  # noqa: BLE001 - handed to the trial's step, which reports it
            self.error = e
        finally:
            self.rows.put(None)

    def _on_round(self, row: dict) -> bool:
        self.rows.put(row)
        self.go.acquire()
        return self.stopping

    def advance(self) -> None:
        self.go.release()

    def row(self) -> dict | None:
        if self.ended:
            return None
        row = self.rows.get()
        if row is None:
            self.ended = True
            if self.error is not None:
                raise self.error
        return row

    def stop(self) -> None:
        self.stopping = True
        self.go.release()
        self.thread.join()


class TrialRuns(tune.Trainable):
    """A grid setting (``config["trial"]``: ``{"row": label, "knobs": {knob: value}}``) on every tuning
    seed of its row (``configs[label]``: one validated Config per tuning seed, all reading
    the validation split), one round per step; reports ``score`` (the row's metric,
    ``metrics[label]``, its mean over the seeds so far), ``round`` and the per-seed ``values``."""

    def setup(self, config, configs=None, metrics=None):
        self.configs, self.metrics = configs, metrics
        self._start(config)

    def _start(self, config) -> None:
        import dataclasses

        from raysfl.tuning.grid import apply
        from raysfl.tuning.rules import check_reads_validation

        self.label, self.knobs = config["trial"]["row"], dict(config["trial"]["knobs"])
        self.tmp = tempfile.TemporaryDirectory(prefix="raysfl-tune-")
        cfgs = [apply(dataclasses.replace(c, progress=False, checkpoint_every=0, out=self.tmp.name, name=None,
                                          mlflow=None, mlflow_artifacts=None, keep_best=False), self.knobs) for c in self.configs[self.label]]
        for c in cfgs:
            check_reads_validation(c, self.label)
        self.rounds = cfgs[0].rounds
        self.history: list[list[dict]] = [[] for _ in cfgs]
        self.runs = [SteppedRun(c) for c in cfgs]
        self.first = True

    def step(self):
        if not self.first:
            for r in self.runs:
                r.advance()
        self.first = False
        for hist, r in zip(self.history, self.runs):
            row = r.row()
            if row is not None:
                hist.append(row)
        metric = self.metrics[self.label]
        mean, values = score(metric, self.history)
        done_round = min(len(h) for h in self.history)
        diverged = any(r.diverged for r in self.runs)
        if diverged:  # a seed's training went non-finite: the setting is the worst there is
            mean = -WORST if metric.higher_is_better else WORST
        return {"score": mean, "round": done_round, "values": values, "row": self.label, "diverged": diverged,
                "done": done_round >= self.rounds or any(r.ended for r in self.runs)}

    def _end(self) -> None:
        for r in getattr(self, "runs", []):
            if not r.ended:
                r.stop()
        self.runs = []
        if getattr(self, "tmp", None) is not None:
            self.tmp.cleanup()
            self.tmp = None

    def cleanup(self):
        self._end()

    def reset_config(self, new_config):
        self._end()
        self._start(new_config)
        return True

    def save_checkpoint(self, checkpoint_dir):
        return {}  # a trial is a few rounds on the validation split: it is run again, not resumed

    def load_checkpoint(self, checkpoint):
        pass
