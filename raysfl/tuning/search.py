"""The search: every row's grid as Ray Tune trials, stopped early by asynchronous successive
halving (Tune's ASHA, one bracket per row, so that a row's settings compete only with each
other), the best completed setting chosen on the validation split, a choice at a grid's edge
widening that grid once.

One ``Tuner`` runs every row of a table: on a cluster its trials spread over the nodes, each
trial a process that runs its setting on every tuning seed (:mod:`raysfl.tuning.trial`) and is
reused for the next trial, which finds that process's actors warm. Results are cached per
row under a hash of everything the search depends on, so a row a later table shares (the same
resolved config, grid, seeds and metric) is not tuned again; and, while the search runs, each
trial's rounds in a journal beside it (``trials-<row key>/``), so that a search stopped part of
the way and started again reads back the rounds it had (:mod:`raysfl.tuning.trial`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from raysfl.paper_tables import Metric
from raysfl.run_key import ISSUE_46_SETTINGS
from raysfl.run_key import cache_key as run_key
from raysfl.runtime.many_runs import run_demand, start_local_ray
from raysfl.tuning import grid as grids
from raysfl.tuning.rules import REDUCTION, grace
from raysfl.whole_files import write_text


@dataclass
class TuneResult:
    """A row's tuning: the chosen values, the grid as searched (widened values included), how
    many trials ran, the knobs still at the grid's edge after widening once, the chosen
    setting's score (the metric's mean over the tuning seeds, on the validation split) and
    every trial (its knobs, rounds run, score)."""

    row: str
    chosen: dict[str, float]
    grid: dict[str, list[float]]
    trials: int
    at_edge: list[str] = field(default_factory=list)
    score: float = math.nan
    table: list[dict] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0  # the search's wall time, over every invocation that ran it (:class:`SearchClock`)
    seconds_whole: bool = False  # False: a part (saved before SearchClock, or begun by a version without it)
    from_cache: bool = False  # read back from the cache (this process ran none of its trials)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def cache_key(configs: list, grid: dict, metric: Metric, leave_out: dict | None = None) -> str:
    """A row's tuning cache name: its tuning configs (every seed; the knobs tuned left out),
    the grid, the metric and the search's rules. ``leave_out``: as :func:`raysfl.run_key.cache_key`'s."""
    fields = {f.name for f in dataclasses.fields(configs[0])} if configs else set()
    body = {"runs": [run_key(dataclasses.replace(c, **{k: None for k in grid if k in fields}), leave_out)
                     for c in configs],
            "grid": {k: list(v) for k, v in grid.items()}, "metric": dataclasses.asdict(metric),
            "rules": {"reduction": REDUCTION, "grace": grace(max(c.rounds for c in configs)), "widen": "once"}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def row_grid(cfg, grid: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
    """The grid a row searches: the table's, without the knobs its algorithm does not read,
    each knob's own setting first (the paper's, where the row runs it)."""
    out = {}
    for knob, values in grid.items():
        if not grids.reads(cfg, knob):
            continue
        own = getattr(cfg, knob, None) if hasattr(cfg, knob) else getattr(cfg.algo_params, knob, None)
        if knob == "server_lr" and own is None:
            own = cfg.lr
        out[knob] = grids.order(tuple(values), own)
    return out


def tune_rows(rows: dict[str, list], grid: dict[str, dict[str, tuple[float, ...]]], metrics: dict[str, Metric],
              cache: Path | None = None, trials_at_once: int | None = None, say=None) -> dict[str, TuneResult]:
    """Tune every row: ``rows`` {label: [validated Config per tuning seed, reading the
    validation split]}, ``grid`` {label: {knob: values}}, ``metrics`` {label: what it is judged
    by} (every row the same direction). Rows found in ``cache`` are read back; the others are
    searched together, then widened where a choice sits on an edge."""
    from raysfl.tuning.rules import check_reads_validation

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    for label, cfgs in rows.items():
        for c in cfgs:
            check_reads_validation(c, label)
    keys = {label: cache_key(cfgs, grid[label], metrics[label]) for label, cfgs in rows.items()}
    out: dict[str, TuneResult] = {}
    for label, key in keys.items():  # under its key, or the one a version before issue 46 used
        older = cache_key(rows[label], grid[label], metrics[label], ISSUE_46_SETTINGS)
        for path in ([cache / f"tune-{key}.json", cache / f"tune-{older}.json"] if cache else []):
            if path.exists():
                out[label] = TuneResult(**{**json.loads(path.read_text()), "from_cache": True})
                break
    todo = {label: cfgs for label, cfgs in rows.items() if label not in out}
    if todo:
        started = time.perf_counter()
        clock = SearchClock({label: cache / f"trials-{keys[label]}" for label in todo} if cache is not None else {})
        n = sum(len(grids.product(grid[label])) for label in todo)
        say(f"tune: {len(todo)} row(s), {n} settings on {len(next(iter(todo.values())))} tuning seeds each "
            f"(validation split), stopped early by successive halving")
        journals = {label: str(cache / f"trials-{keys[label]}") for label in todo} if cache is not None else None
        trials = _search(todo, {label: grids.product(grid[label]) for label in todo}, metrics, trials_at_once, say,
                         journals=journals, clock=clock)
        first = {label: _choose(label, grid[label], trials[label], metrics[label]) for label in todo}
        wider = {label: {k: v for k in res.chosen if (v := grids.widened(k, tuple(grid[label][k]), res.chosen[k]))}
                 for label, res in first.items()}
        wider = {label: w for label, w in wider.items() if w}
        for label, w in wider.items():
            say(f"tune: {label}: {', '.join(f'{k} {first[label].chosen[k]:g}' for k in w)} at the grid's edge; "
                f"widening once: {', '.join(f'{k} {v:g}' for k, v in w.items())}")
        if wider:  # every row's widening in one search: its trials' processes start once
            extra = _search({label: todo[label] for label in wider},
                            {label: [{**first[label].chosen, k: v} for k, v in w.items()] for label, w in wider.items()},
                            metrics, trials_at_once, say, successive_halving=False, journals=journals, clock=clock)
        took = round(clock.seconds(), 1)  # one figure for the rows of the search (a table counts it once)
        for label in todo:
            res = first[label]
            if label in wider:
                widened_grid = {k: tuple(v) + ((wider[label][k],) if k in wider[label] else ())
                                for k, v in grid[label].items()}
                res = _choose(label, widened_grid, trials[label] + extra[label], metrics[label])
                res.at_edge = [k for k in wider[label] if grids.at_edge(k, widened_grid[k], res.chosen[k])]
            res.seeds = [c.seed for c in todo[label]]
            res.seconds, res.seconds_whole = took, clock.whole
            out[label] = res
            if cache is not None:
                cache.mkdir(parents=True, exist_ok=True)
                write_text(cache / f"tune-{keys[label]}.json", json.dumps(res.to_dict(), default=float))
                clock.keep()
                for d in (cache / f"trials-{keys[label]}").glob("*-runs"):  # the row is decided: no trial goes on
                    shutil.rmtree(d, ignore_errors=True)
        say(f"tune: done in {time.perf_counter() - started:.0f} s")
    return out


def _choose(label: str, grid: dict, trials: list[dict], metric: Metric) -> TuneResult:
    """The best setting among the trials that ran every round (ties: the earlier, i.e. the
    row's own setting first)."""
    sign = 1.0 if metric.higher_is_better else -1.0
    complete = [t for t in trials if t["complete"] and math.isfinite(t["score"])]
    if not complete:
        raise RuntimeError(f"tuning row '{label}': no setting of the grid completed its runs "
                           f"({'; '.join(t.get('error') or 'stopped' for t in trials)[:300]})")
    best = max(complete, key=lambda t: (sign * t["score"], -trials.index(t)))
    return TuneResult(label, dict(best["knobs"]), {k: list(v) for k, v in grid.items()}, len(trials),
                      score=best["score"], table=trials)


def _search(rows: dict[str, list], combos: dict[str, list[dict]], metrics: dict[str, Metric], trials_at_once: int | None,
            say, successive_halving: bool = True, journals: dict | None = None,
            clock: SearchClock | None = None) -> dict[str, list[dict]]:
    """Run the trials (one per row and setting) on one Tuner; {label: [trial summaries]}.
    ``journals`` {label: directory}: each trial's rounds kept there as they are reported, and
    read back by a search started again (:mod:`raysfl.tuning.trial`). ``clock``: told of each
    report, so that the time a search stopped part of the way had spent is kept."""
    from ray import tune

    from raysfl.tuning.schedulers import GroupedASHA
    from raysfl.tuning.trial import TrialRuns

    from raysfl.runtime import pool

    seeds = len(next(iter(rows.values())))
    rounds = max(c.rounds for cfgs in rows.values() for c in cfgs)
    start_local_ray([c for cfgs in rows.values() for c in cfgs], seeds)
    pool.evict()  # this process's idle actors (an earlier table's runs) would hold the CPUs the trials reserve
    trial, at_once = trial_resources([c for cfgs in rows.values() for c in cfgs], seeds, trials_at_once)
    rows = {label: [in_trial(c) for c in cfgs] for label, cfgs in rows.items()}
    space = [{"row": label, "knobs": knobs} for label, cs in combos.items() for knobs in cs]
    directions = {metrics[label].higher_is_better for label in rows}
    if len(directions) != 1:
        raise ValueError("the rows of one search are judged in one direction (all higher-is-better, or all lower)")
    mode = "max" if directions.pop() else "min"
    scheduler = (GroupedASHA(group="row", time_attr="training_iteration", max_t=rounds, grace_period=grace(rounds),
                             reduction_factor=REDUCTION) if successive_halving else None)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # SIGINT raises in this process (raysfl.runtime.interrupts) instead of Tune's handler ending the
    # search quietly, which left every unfinished row "without a completed setting"
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    # no CSV/JSON/TensorBoard logs of Tune's own in a store deleted at the end: its TensorBoard
    # logger printed a warning per NaN (a diverged trial's scores) to the console
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    trainable = tune.with_resources(tune.with_parameters(TrialRuns, configs=rows, metrics=metrics, journals=journals,
                                                         halving=successive_halving),
                                    tune.PlacementGroupFactory([trial]))
    with tempfile.TemporaryDirectory(prefix="raysfl-tune-") as store:
        tuner = tune.Tuner(
            trainable, param_space={"trial": tune.grid_search(space)},
            tune_config=tune.TuneConfig(metric="score", mode=mode, scheduler=scheduler, reuse_actors=True,
                                        max_concurrent_trials=at_once),
            run_config=tune.RunConfig(storage_path=store, name="raysfl-tune", verbose=0, log_to_file=False,
                                      callbacks=[_progress(say, len(space), rounds, clock)],
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=0,
                                                                              checkpoint_at_end=False)))
        with _no_dataframe_warning():
            grid = tuner.fit()
        return _summaries(grid, combos, rounds)


@contextlib.contextmanager
def _no_dataframe_warning():
    """Without Tune's own loggers (above) its results carry no per-trial history files, and its
    ResultGrid warns that it could not read them, one line per trial. The summaries read each
    trial's last result, never that history: the warning alone is dropped."""
    import logging

    log = logging.getLogger("ray.tune.analysis.experiment_analysis")

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith("Failed to fetch metrics for")

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def _summaries(grid_results, combos: dict[str, list[dict]], rounds: int) -> dict[str, list[dict]]:
    """Each row's trials (knobs, rounds run, score, per-seed values, complete, error), in the
    grid's order."""
    out: dict[str, list[dict]] = {label: [] for label in combos}
    unknown = []
    for res in grid_results:
        m = res.metrics or {}
        done = int(m.get("round", 0) or 0)
        err = None if res.error is None else " ".join(str(res.error).split())[:200]
        trial = (res.config or {}).get("trial")
        summary = {"knobs": dict(trial["knobs"]) if trial else None, "rounds": done,
                   "score": float(m.get("score", math.nan)), "values": m.get("values"),
                   "complete": err is None and done >= rounds and not m.get("diverged"), "error": err,
                   "diverged": bool(m.get("diverged"))}
        if trial is None:  # failed before Tune recorded its config: matched by elimination below
            unknown.append(summary)
        else:
            out[trial["row"]].append(summary)
    for label, trials in out.items():  # Tune's order is not the grid's: put them back in it
        seen = {json.dumps(t["knobs"], sort_keys=True) for t in trials}
        for knobs in combos[label]:
            if unknown and json.dumps(knobs, sort_keys=True) not in seen:
                trials.append({**unknown.pop(0), "knobs": knobs})
        index = {json.dumps(k, sort_keys=True): i for i, k in enumerate(combos[label])}
        trials.sort(key=lambda t: index.get(json.dumps(t["knobs"], sort_keys=True), len(index)))
    return out


def _progress(say, total: int, rounds: int, clock: SearchClock | None = None):
    """A Tune callback that says each trial's end: its row, setting, score, rounds run and the
    seconds it took (where it ran rounds, not only read them back); and
    keeps ``clock``'s count of the search's seconds at each report."""
    from ray import tune

    class Progress(tune.Callback):
        def __init__(self):
            self.done = 0
            self.began: dict[str, float] = {}  # trial id: when it started

        def on_trial_start(self, iteration, trials, trial, **info):
            self.began[trial.trial_id] = time.perf_counter()

        def on_trial_result(self, iteration, trials, trial, result, **info):
            if clock is not None:
                clock.keep()

        def took(self, trial) -> str:
            start = self.began.pop(trial.trial_id, None)
            return "" if start is None else f", {time.perf_counter() - start:.0f} s"

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.done += 1
            r = trial.last_result or {}
            knobs = ", ".join(f"{k} {v:g}" for k, v in trial.config["trial"]["knobs"].items())
            ran = r.get("round", 0)
            score = r.get("score", math.nan)
            took = self.took(trial)  # the trial's seconds, where it ran rounds here
            back = " (read back)" if r.get("read_back") else took
            head = f"  tune {self.done}/{total}: {trial.config['trial']['row']}: {knobs}:"
            if r.get("diverged"):  # not its stand-in score (trial.WORST)
                say(f"{head} diverged in round {ran}{back}")
                return
            how = "" if ran >= rounds else " (stopped early)"
            say(f"{head} {score:.4g} after {ran} round{'s' * (ran != 1)}{how}{back}")

        def on_trial_error(self, iteration, trials, trial, **info):
            self.done += 1
            self.began.pop(trial.trial_id, None)
            say(f"  tune {self.done}/{total}: {trial.config['trial']['row']}: failed ({trial.error_file or 'error'})")

    return Progress()


class SearchClock:
    """The wall time a search has taken, over every invocation that ran part of it.

    A search stopped part of the way (Ctrl-C, the end of a session) and started again reads its
    trials' rounds back from their journals; the time it had spent would be lost with the
    process, and a table's "where run: tuning N s" would count only the invocation that
    finished it. Each row's trials directory keeps ``search-seconds.txt``: the seconds of the
    search it is in, to which this invocation's are added each time a trial reports
    (:meth:`keep`) and when a row is decided. The rows of one search share one count (the
    largest they had before), so that a table counts each search once. A search begun by a
    version that kept no count (journals there, no count beside them) is counted from here and
    marked a part (``whole`` False, kept in the file), so its table says "at least". Without a
    cache (``dirs`` empty): this invocation's seconds alone. Ours: the harness's bookkeeping."""

    NAME = "search-seconds.txt"

    def __init__(self, dirs: dict[str, Path]):
        self.dirs = dirs
        before = [self._read(d) for d in dirs.values()]
        self.before = max((b[0] for b in before), default=0.0)
        self.whole = all(b[1] for b in before)
        self.started = time.perf_counter()

    @classmethod
    def _read(cls, d: Path) -> tuple[float, bool]:
        """(seconds counted before, whether they are the search's whole time so far)."""
        try:
            words = (d / cls.NAME).read_text().split()
            return max(0.0, float(words[0])), words[1:2] != ["part"]
        except (OSError, ValueError, IndexError):
            begun = d.is_dir() and any(d.glob("*.json"))  # trials journaled by a version without the count
            return 0.0, not begun

    def seconds(self) -> float:
        """The search's seconds so far: before this invocation, and in it."""
        return self.before + time.perf_counter() - self.started

    def keep(self) -> None:
        """Write the seconds so far beside every row's trials (whole: :mod:`raysfl.whole_files`)."""
        text = f"{self.seconds():.1f}{'' if self.whole else ' part'}\n"
        for d in self.dirs.values():
            with contextlib.suppress(OSError):
                d.mkdir(parents=True, exist_ok=True)
                write_text(d / self.NAME, text)


def trial_resources(configs: list, seeds: int, at_most: int | None = None) -> tuple[dict, int]:
    """(one trial's Ray resources, trials at once). A trial reserves what its runs' actors need
    (``seeds`` runs of the most demanding config, at most the largest node: a 2-CPU laptop runs
    one trial whose runs share it) and its runs' actors ask for nothing of their own
    (:func:`in_trial`): Tune places each trial on a node that holds it, its actors start in
    the trial's placement group, and an idle trial process's warm actors hold no resources."""
    import ray


    need_cpu = max(run_demand(c)[0] for c in configs)
    need_gpu = max(run_demand(c)[1] for c in configs)
    have = ray.cluster_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    largest = max((n.get("CPU", 0.0) for n in nodes), default=have.get("CPU", 1.0))
    cpus = min(max(0.01, seeds * need_cpu), largest)  # one trial's bundle sits on one node
    out = {"CPU": cpus}
    at_once = max(1, math.floor(have.get("CPU", 1.0) / cpus + 1e-9))
    if need_gpu:
        out["GPU"] = min(seeds * need_gpu, have.get("GPU", 0.0))
        at_once = min(at_once, max(1, math.floor(have.get("GPU", 0.0) / out["GPU"] + 1e-9)))
    return out, min(at_once, at_most) if at_most else at_once


def in_trial(cfg):
    """``cfg`` as a run inside a trial: its actors ask Ray for no CPUs and no placement groups
    of their own (the trial's placement group, which Ray places them in, holds the CPUs for
    them), each still given torch threads for the share it would have had."""
    import dataclasses

    r = cfg.resources
    return dataclasses.replace(cfg, resources=dataclasses.replace(
        r, client_cpus=0.0, server_cpus=0.0, fed_cpus=0.0, client_placement="none", server_placement="none"))
