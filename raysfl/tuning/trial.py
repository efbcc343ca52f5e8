"""One tuning trial as a Ray Tune ``Trainable``: one setting of the grid, run on every tuning
seed in lockstep, one round per ``step()``, so that Tune's successive halving can stop it
after any round.

Each seed's run is an ordinary ``raysfl.run`` in a thread of the trial's process, paused by
its own callback after every round; stopping it makes that callback return True, so the run
ends cleanly (as a run a callback stops) and its actors go back to the process's pool. Tune
reuses the trial's process for the next trial (``reuse_actors``): the next setting's runs
find those actors warm (:mod:`raysfl.runtime.pool`) instead of starting new processes.

Every run here evaluates on the validation split (``Config.validation`` > 0): the trial
refuses a config that would read the test split, before it starts anything. It evaluates only
the rounds the search reads (``--eval-rounds``, :func:`raysfl.tuning.rules.rounds_read`): the
last k before each rung of successive halving, the end alone in a grid's widening.

A trial keeps a journal of what it reported, round by round, where the search is given a
cache (:func:`journal_path`): a search interrupted (Ctrl-C, a machine given back, a session's
end) and started again reads each trial's rounds back instead of running them, and runs only
what is past them. Each seed's run then lives beside the journal (``<setting>-runs/seed<N>/``)
with a checkpoint every tenth of its rounds, so a trial cut off goes on from its runs' newest
checkpoints, silently catching up from there with the rounds read back (the seeds make them
the same rounds), then reports on; the directory goes when the trial ends. Ours: Tune's own
``Tuner.restore`` needs the experiment's directory and a checkpoint per trial; a journal needs
neither, and survives a change of the machine.
"""

from __future__ import annotations

import hashlib
import json
import math
import queue
import sys
import tempfile
import threading
from pathlib import Path

from ray import tune

from raysfl.paper_tables import Metric
from raysfl.whole_files import write_text

WORST = 1e9  # a setting whose metric is not finite (a run that diverged): the worst score there is


def score(metric: Metric, runs: list[list[dict]]) -> tuple[float, list[float]]:
    """(the mean over seeds of ``metric`` on each run's rows so far, the per-seed values); a
    non-finite value counts as the worst (``WORST`` in the metric's unfavourable direction)."""
    values = [metric.value(rows)[0] for rows in runs]
    worst = -WORST if metric.higher_is_better else WORST
    vals = [v if isinstance(v, (int, float)) and math.isfinite(v) else worst for v in values]
    return sum(vals) / len(vals), values


class _Finished:
    """A seed's run that had finished when its trial was cut off: its rows are read back."""

    ended, diverged = True, False

    def next_row(self):
        return None

    def stop(self) -> None:
        pass


class SteppedRun:
    """One raysfl run in a thread, paused after every round: :meth:`advance` lets it train one
    more round, :meth:`row` waits for that round's metrics row (None once the run ended),
    :meth:`stop` ends it cleanly and waits for it.

    Its rounds are evaluated before the next one starts (``--eval-overlap off``), and the next
    round is not submitted before the search lets it (``--run-ahead off``): with either, a
    round's row reaches the search only once the next round has trained or started, and a trial
    the search stops there would have trained a round for nothing."""

    def __init__(self, cfg):
        import dataclasses

        self.cfg = cfg = dataclasses.replace(cfg, resources=dataclasses.replace(cfg.resources, eval_overlap="off",
                                                                                  run_ahead="off"))
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

    def next_row(self) -> dict | None:
        """Let the run train its next round (its first needs no leave) and wait for its row."""
        if getattr(self, "delivered", False):
            self.advance()
        self.delivered = True
        return self.row()

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


def journal_path(journals: dict | None, label: str, knobs: dict) -> Path | None:
    """Where the trial of ``knobs`` in row ``label`` keeps its journal (None: no cache given)."""
    if not journals or journals.get(label) is None:
        return None
    name = hashlib.sha256(json.dumps(knobs, sort_keys=True).encode()).hexdigest()[:16]
    return Path(journals[label]) / f"{name}.json"


def read_journal(path: Path | None) -> list[dict]:
    """The reports a trial's journal holds, in order ([] where there is none, or it is unreadable)."""
    if path is None or not path.exists():
        return []
    try:
        return list(json.loads(path.read_text())["reports"])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # a journal cut short by a kill: the trial runs again


class TrialRuns(tune.Trainable):
    """A grid setting (``config["trial"]``: ``{"row": label, "knobs": {knob: value}}``) on every tuning
    seed of its row (``configs[label]``: one validated Config per tuning seed, all reading
    the validation split), one round per step; reports ``score`` (the row's metric,
    ``metrics[label]``, its mean over the seeds so far), ``round`` and the per-seed ``values``."""

    def setup(self, config, configs=None, metrics=None, journals=None, halving=True):
        self.configs, self.metrics, self.journals, self.halving = configs, metrics, journals, halving
        self._start(config)

    def _start(self, config) -> None:
        import dataclasses

        from raysfl.tuning.grid import apply
        from raysfl.tuning.rules import check_reads_validation, evaluating, rounds_read

        self.label, self.knobs = config["trial"]["row"], dict(config["trial"]["knobs"])
        self.journal = journal_path(getattr(self, "journals", None), self.label, self.knobs)
        self.tmp = tempfile.TemporaryDirectory(prefix="raysfl-tune-") if self.journal is None else None
        # with a cache, each seed's run lives beside the journal, a checkpoint every tenth of its rounds
        self.run_base = None if self.journal is None else self.journal.with_name(self.journal.stem + "-runs")
        where = (dict(out=self.tmp.name, checkpoint_every=0) if self.journal is None else
                 dict(out=str(self.run_base), checkpoint_every=max(1, self.configs[self.label][0].rounds // 10),
                      keep_checkpoints=1))
        cfgs = [apply(dataclasses.replace(c, progress=False, name=None, mlflow=None, mlflow_artifacts=None,
                                          keep_best=False, **where), self.knobs) for c in self.configs[self.label]]
        reads = rounds_read(self.metrics[self.label], cfgs[0].rounds, getattr(self, "halving", True))
        cfgs = [evaluating(c, reads) for c in cfgs]  # only what the search reads
        for c in cfgs:
            check_reads_validation(c, self.label)
        self.rounds = cfgs[0].rounds
        self.cfgs = cfgs
        self.history: list[list[dict]] = [[] for _ in cfgs]
        self.runs: list | None = None  # started when a round is not in the journal
        self.reports = read_journal(self.journal)
        self.given = 0  # reports given to Tune so far

    def step(self):
        if self.given < len(self.reports):  # read back: nothing runs
            self.given += 1
            return {**self.reports[self.given - 1], "read_back": True}
        if self.runs is None:
            self.runs = [self._run_of(i, c) for i, c in enumerate(self.cfgs)]
        result = self._one_round()  # catches up with the rounds read back first (the same seeds: the same rounds)
        self.given += 1
        if self.journal is not None:
            self.reports.append(result)
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            write_text(self.journal, json.dumps({"row": self.label, "knobs": self.knobs, "reports": self.reports},
                                                default=float))
        return result

    def _run_of(self, i: int, cfg):
        """Seed ``i``'s run: where its directory holds a checkpoint (a trial cut off), resumed from
        it, the rows up to it read back into ``history``; else, or where that directory cannot be
        resumed (damaged files: said in one line), started from round 1."""
        import dataclasses
        import shutil

        from raysfl.api import resume_point
        from raysfl.errors import ConfigError, first_line

        if self.run_base is None:
            return SteppedRun(cfg)
        d = self.run_base / f"seed{cfg.seed}"
        try:
            point = resume_point(d, cfg.rounds)
        except (ConfigError, OSError) as e:
            print(f"raysfl tune: cannot go on from {d} ({first_line(e)}); running it again from round 1",
                  file=sys.stderr, flush=True)
            point = None
        if point is not None:
            self.history[i] = point.rows
            return _Finished() if point.config is None else SteppedRun(point.config)
        shutil.rmtree(d, ignore_errors=True)
        return SteppedRun(dataclasses.replace(cfg, name=d.name))

    def _one_round(self) -> dict:
        """Let every seed's run train up to the round to report (catching up first where the
        journal had rounds its runs had not); the setting's report after it."""
        target = self.given + 1
        for hist, r in zip(self.history, self.runs):
            while len(hist) < target and not r.ended:
                row = r.next_row()
                if row is not None:
                    hist.append(row)
        history = [h[:target] for h in self.history]
        metric = self.metrics[self.label]
        mean, values = score(metric, history)
        done_round = min(len(h) for h in history)
        diverged = any(r.diverged for r in self.runs)
        if diverged:  # a seed's training went non-finite: the setting is the worst there is
            mean = -WORST if metric.higher_is_better else WORST
        return {"score": mean, "round": done_round, "values": values, "row": self.label, "diverged": diverged,
                "done": done_round >= self.rounds or any(r.ended and len(h) < target
                                                         for h, r in zip(self.history, self.runs))}

    def _end(self) -> None:
        """The trial is over: its runs end. Their directories go where it was decided -- it ran
        every round, or it stopped right after a rung, where successive halving stops trials --
        and stay where it was cut off between (Tune stops every trial when the search is
        interrupted), for the search started again to go on from."""
        import shutil

        from raysfl.tuning.rules import rungs

        for r in getattr(self, "runs", None) or []:
            if not r.ended:
                r.stop()
        self.runs = []
        if getattr(self, "tmp", None) is not None:
            self.tmp.cleanup()
            self.tmp = None
        base = getattr(self, "run_base", None)
        if base is not None:
            done = bool(self.reports) and bool(self.reports[-1].get("done"))
            at_rung = getattr(self, "halving", True) and self.given in rungs(self.rounds)
            if done or at_rung:
                shutil.rmtree(base, ignore_errors=True)

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
