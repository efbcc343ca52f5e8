"""The one sweep engine every table runs on: each (row, seed) resolved and checked for
fairness before anything runs, a cache keyed on the resolved config (a run already made with
the same settings is read back, whoever asked for it), the runs in one process so that they
share Ray and, where their shapes allow, the actors (the warm federation), several at once
where the cluster holds them.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from raysfl.callbacks import Callback
from raysfl.errors import first_line
from raysfl.reproduce.fairness import check_row, resolve
from raysfl.algorithms import get_algorithm
from raysfl.paper_tables import Table
from raysfl.reproduce.schedule import columns_read, every_round, read_at, with_schedule
from raysfl.run_key import cache_keys
from raysfl.runtime.many_runs import start_local_ray
from raysfl.whole_files import write_text


@dataclass
class Planned:
    """A table's runs, resolved: {label: [Config per seed]} and {label: diff vs the reference};
    ``tuned``: {label: the tuning of that row} where the rows were tuned."""

    table: Table
    scale: str
    seeds: list[int]
    configs: dict[str, list] = field(default_factory=dict)
    diffs: dict[str, dict] = field(default_factory=dict)
    tuned: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    same: dict = field(default_factory=dict)  # label -> (the earlier row whose runs stand for it, why)


def plan(table: Table, scale: str, seeds: list[int], overrides: dict | None = None, tuned: dict | None = None) -> Planned:
    """Resolve every row for every seed and check each against its reference (raises
    :class:`~raysfl.reproduce.fairness.ConfoundedRow` before anything runs). ``tuned``
    {label: TuneResult}: each row runs with the values its tuning chose, which its diff may
    show besides what it declares."""
    from raysfl.tuning.grid import apply

    table = table.at_scale(scale)
    tuned = tuned or {}
    knobs = {k for t in tuned.values() for k in t.chosen}
    out = Planned(table, scale, list(seeds), tuned=dict(tuned), overrides=dict(overrides or {}))

    def resolved(row, seed):
        cfg = resolve(table, row, scale, seed, overrides)
        return apply(cfg, tuned[row.label].chosen) if row.label in tuned else cfg

    for seed in seeds:
        ref = resolved(table.reference, seed)
        out.configs.setdefault(table.reference.label, []).append(ref)
        out.diffs[table.reference.label] = {}
        for row in table.rows:
            cfg = resolved(row, seed)
            out.diffs[row.label] = check_row(table, row, ref, cfg, tuned=knobs)
            out.configs.setdefault(row.label, []).append(cfg)
    for row in table.all_rows:
        check_column(table, row, out.configs[row.label][0])
    out.same = same_rows(table, {label: cfgs[0] for label, cfgs in out.configs.items()})
    # every row evaluates the rounds the table reads (shared by all, so not in a diff)
    out.configs = {label: [with_schedule(c, table) for c in cfgs] for label, cfgs in out.configs.items()}
    return out


def same_rows(table: Table, configs: dict) -> dict[str, tuple[str, str]]:
    """{label: (the earlier row whose runs stand for it, why)} for each row that learns as an
    earlier one does by construction (:func:`~raysfl.reproduce.fairness.same_by_construction`:
    SplitFed V1 and FedAvg at the same settings, SplitFed V1 at two cuts) where the table reads
    only what the runs learn (its metric and the figures it shows beside it): such a row is
    neither tuned nor run, and counts once (issue 42). ``configs``: {label: its resolved config}."""
    from raysfl.reproduce.fairness import same_by_construction

    if not all(m.learning_only for m in (table.metric, *table.shown)):
        return {}
    out = {}
    rows = table.all_rows
    for i, row in enumerate(rows):
        for earlier in rows[:i]:
            why = (same_by_construction(configs[earlier.label], configs[row.label])
                   if table.metric_of(row) == table.metric_of(earlier) else None)
            if why:
                out[row.label] = (out.get(earlier.label, (earlier.label,))[0], why)
                break
    return out


def tuning_configs(table: Table, scale: str, overrides: dict | None = None) -> dict[str, list]:
    """Every row at ``scale`` on the table's tuning seeds, evaluating on the validation split:
    {label: [Config per tuning seed]}."""
    import dataclasses

    from raysfl.resolve import validate
    from raysfl.tuning.rules import check_reads_validation, tuning_seeds

    table = table.at_scale(scale)
    out = {}
    for row in table.all_rows:
        out[row.label] = [validate(dataclasses.replace(resolve(table, row, scale, seed, overrides),
                                                       validation=table.tuning.validation))
                          for seed in tuning_seeds(table.tuning.seeds)]
        check_reads_validation(out[row.label][0], row.label)
    return out


def tune_table(table: Table, scale: str, overrides: dict | None, cache: Path, say=None) -> dict:
    """Each row of ``table`` tuned the same way (its ``Tuning``) on the validation split and the
    tuning seeds, judged by the table's metric (on the row's own column where it reads one):
    {label: TuneResult}. Cached per row (:mod:`raysfl.tuning.search`)."""
    from dataclasses import replace

    from raysfl.tuning.search import tune_rows

    table = table.at_scale(scale)
    rows = tuning_configs(table, scale, overrides)
    grids = tuning_grids(table, scale, rows)
    # a row that learns as an earlier one by construction takes that row's tuning (same grid, same choice)
    same = {label: rep for label, (rep, _) in same_rows(table, {k: c[0] for k, c in rows.items()}).items()
            if grids[label] == grids[rep]}
    metric = table.tuning_metric
    metrics = {row.label: replace(metric, column=row.column) if row.column else metric
               for row in table.all_rows}
    own = {label: cfgs for label, cfgs in rows.items() if label not in same}
    out = tune_rows(own, {k: grids[k] for k in own}, {k: metrics[k] for k in own}, cache=cache, say=say)
    return {label: out[same.get(label, label)] for label in rows}


def tuning_grids(table: Table, scale: str, rows: dict[str, list]) -> dict[str, dict]:
    """Each row's grid, {label: {knob: values}} (``rows``: :func:`tuning_configs`)."""
    from raysfl.tuning.search import row_grid

    table = table.at_scale(scale)
    return {label: row_grid(cfgs[0], table.tuning.grid(cfgs[0])) for label, cfgs in rows.items()}


def check_grids(table: Table, scale: str, overrides: dict | None = None) -> None:
    """Every row's tuning reads the validation split (:func:`tuning_configs`) and its grid spans
    what a verdict's tuning budget needs (:func:`raysfl.tuning.grid.check_span`: a learning rate
    over at least 4 values and 1.5 decades) -- for any table ``raysfl reproduce`` is asked for,
    yours too -- or one line naming the table and the row, before anything runs."""
    from raysfl.errors import ConfigError
    from raysfl.tuning.grid import check_span

    for label, grid in tuning_grids(table, scale, tuning_configs(table, scale, overrides)).items():
        for knob, values in grid.items():
            try:
                check_span(knob, values)
            except ConfigError as e:
                raise ConfigError(f"{table.paper}/{table.name}, row '{label}': {e}") from None


def check_column(table: Table, row, cfg) -> None:
    """A row that reads a column of its own (``Row.column``) reads one its run writes
    (:meth:`~raysfl.algorithms.spec.Algorithm.columns_written`); else one line, before anything runs."""
    if row.column is None:
        return
    from raysfl.errors import ConfigError

    written = get_algorithm(cfg.algo).columns_written(cfg)
    if row.column not in written:
        raise ConfigError(f"{table.paper}/{table.name}, row '{row.label}' reads column '{row.column}', which a "
                          f"{cfg.algo} run with these settings does not write; it writes: {', '.join(sorted(written))}")


def cached(cfg, cache: Path) -> bool:
    """Whether a run of ``cfg``'s resolved config is in ``cache``."""
    return cached_path(cfg, cache) is not None


def cached_path(cfg, cache: Path) -> Path | None:
    """Where ``cache`` keeps a run of ``cfg``'s resolved config: under its key, under the key
    an earlier version kept it under (:func:`raysfl.run_key.cache_keys`), or, for a run that
    evaluates some rounds only, as the same run evaluated in every round (what a version before
    table schedules ran: :mod:`raysfl.reproduce.schedule`); None where it has none."""
    for key in cache_keys(cfg) + _every_round_keys(cfg):
        path = Path(cache) / f"{key}.json"
        if path.exists():
            return path
    return None


def _every_round_keys(cfg) -> list[str]:
    """The keys of ``cfg``'s run evaluated in every round, where they are not its own."""
    own = cache_keys(cfg)
    return [k for k in cache_keys(every_round(cfg)) if k not in own]


class _KeepRows(Callback):
    """Keeps a run's metrics rows when it ends, however it ends (a run that diverges raises,
    and its rows are then only in a callback's hands). With ``stop`` (an Event set when the
    table is interrupted while runs go on in threads, which signals never reach): the run is
    interrupted after its round as a signal would, its newest round checkpointed, so that the
    next invocation goes on from there."""

    def __init__(self, stop: threading.Event | None = None):
        self.rows: list[dict] = []
        self.stop = stop

    def on_round(self, row: dict) -> None:
        if self.stop is not None and self.stop.is_set():
            from raysfl.runtime.interrupts import Interrupted

            raise Interrupted(signal.SIGINT)

    def on_run_end(self, run_dir, rows, error):
        self.rows = rows


def run_cached(cfg, cache: Path, stop: threading.Event | None = None) -> list[dict]:
    """The metrics rows of ``cfg``: read from ``cache`` when a run of the same resolved config
    is there, else run quietly (no progress) and kept. A run whose training diverges is a
    result, not a failure of the table: its rows up to the round whose loss went non-finite are
    kept, and the guards count it as collapsed.

    While it runs, the run lives in ``cache/runs/<key>/`` with a checkpoint every tenth of its
    rounds (the newest kept; every round cost a digits table about 7 %). A run cut off (Ctrl-C,
    a machine given back, a session's end) goes on from its last checkpoint the next time the
    table asks for it -- a resume gives the rows an uninterrupted run gives
    (docs/reliability.md) -- and the directory goes once its rows are kept. A run cut off by a
    version that evaluated every round goes on evaluating every round, and is kept as such (the
    table reads it at its own rounds: :func:`raysfl.reproduce.schedule.read_at`). Ours: an mnist5k
    run takes about 20 minutes on two cores."""
    import dataclasses
    import shutil

    import raysfl
    from raysfl.errors import Diverged

    found = cached_path(cfg, cache)
    if found is not None:
        return json.loads(found.read_text())["metrics"]
    key = cache_keys(cfg)[0]
    own = Path(cache) / "runs" / key
    run_dir, kept = own, cfg  # where the run goes on, and the config its rows are kept under
    if not own.exists():  # cut off by a version that evaluated every round: it goes on as it began
        older = next((d for d in (Path(cache) / "runs" / k for k in _every_round_keys(cfg)) if d.exists()), None)
        if older is not None:
            run_dir, kept = older, every_round(cfg)
    seen = _KeepRows(stop)
    diverged = None
    try:
        metrics = _go_on(run_dir, cfg, seen)
        if metrics is None:
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing to go on from: a run cut before its first round ended
            run_dir, kept = own, cfg
            quiet = dataclasses.replace(cfg, progress=False, checkpoint_every=max(1, cfg.rounds // 10),
                                        keep_checkpoints=1, keep_best=False,
                                        out=str(run_dir.parent), name=key, mlflow=None, mlflow_artifacts=None)
            metrics = raysfl.run(quiet, callbacks=[seen]).metrics
    except Diverged as e:
        metrics, diverged = [dict(r) for r in seen.rows], e.round
        if metrics and metrics[-1].get("round") == diverged:
            metrics[-1]["train_loss"] = float("inf")  # its clients' losses went non-finite
    path = Path(cache) / f"{cache_keys(kept)[0]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    # whole: a run half-written is never read back
    write_text(path, json.dumps({"config": kept.to_dict(), "metrics": metrics, "diverged_in_round": diverged},
                                default=str))
    shutil.rmtree(run_dir, ignore_errors=True)
    return metrics


def _go_on(run_dir: Path, cfg, seen: _KeepRows) -> list[dict] | None:
    """The rows of the run cut off in ``run_dir``: resumed from its newest checkpoint (or read,
    where it had finished); None where it cannot go on (it is then run again from round 1)."""
    import raysfl
    from raysfl.api import resume_point
    from raysfl.errors import ConfigError

    try:
        point = resume_point(run_dir, cfg.rounds)
        if point is None:
            return None
        if point.config is None:  # finished, its rows not yet kept
            return point.rows
        print(f"raysfl reproduce: {cfg.algo}, seed {cfg.seed}: going on from round {point.round} ({run_dir})",
              file=sys.stderr, flush=True)
        return raysfl.run(point.config, callbacks=[seen]).metrics
    except (ConfigError, OSError) as e:
        print(f"raysfl reproduce: cannot go on from {run_dir} ({first_line(e)}); running it again from round 1",
              file=sys.stderr, flush=True)
        return None


# the floors of the accuracies on the clients' own splits (raysfl.reproduce.guards.floor_column),
# for runs made before their columns: whether each reads models of each client's own. A cached
# test_accuracy_local is read against one class for all: right for the global models the
# published tables read it of (BESplit-G and its baselines), a lower floor for psl's own models.
LOCAL_FLOORS = {"test_accuracy_local": ("chance_local", False), "acc_g_local": ("chance_g_local", False),
           "acc_aux_local": ("chance_aux_local", True)}


def with_local_chance(rows: list[dict], cfg, floors: dict, say=None) -> list[dict]:
    """``rows`` with the floors of their accuracies on the clients' own test splits where a run
    made before those columns (2026-12-07) lacks them: they depend on the data and partition
    alone (:func:`raysfl.runtime.experiment.local_chance`). ``floors``: those computed, and the
    data sets loaded, shared by a table's rows. A data set that cannot be read here leaves the
    rows as they are -- their guards then read 1 / classes, as before the columns -- and
    ``say`` says so once per data set."""
    if not cfg.local_test_fraction or not rows:
        return rows
    need = {floor: own for column, (floor, own) in LOCAL_FLOORS.items()
            if column in rows[-1] and not any(math.isfinite(r.get(floor, math.nan)) for r in rows)}
    if not need:
        return rows
    from raysfl.config import DATA_DEFINING
    from raysfl.errors import ConfigError
    from raysfl.runtime.experiment import _load_data, local_chance

    data_key = ("data", cfg.dataset, cfg.data_root, cfg.validation)
    if data_key not in floors:
        try:
            floors[data_key] = _load_data(cfg)
        except ConfigError as e:  # the data set is not here (mnist5k without its package): no floor
            floors[data_key] = None
            if say is not None:
                say(f"raysfl reproduce: {first_line(e)}; its runs cached before 2026-12-07 have no floors on the "
                    f"clients' own splits: their guards read 1 / classes there")
    if floors[data_key] is None:
        return rows
    split_key = (cfg.data_root, cfg.seed, *(getattr(cfg, k) for k in DATA_DEFINING))
    values = {}
    for floor, own in need.items():
        if (split_key, own) not in floors:
            floors[(split_key, own)] = local_chance(cfg, floors[data_key], own_models=own)
        values[floor] = floors[(split_key, own)]
    return [{**r, **values} for r in rows]


def left(durations: list[float], running: list[float], parallel: int, total: int) -> str:
    """``", about T left"``, for a table that takes hours: the ``total`` runs not yet done (those
    in progress included) at the mean of the ``durations`` of the runs done, less what the
    ``running`` ones (their seconds so far) have already spent, ``parallel`` at a time; "" when
    none are left or none is done yet. Counting the runs in progress keeps the estimate steady
    while ``parallel`` runs end close together."""
    if not durations or total <= 0:
        return ""
    work = max(0.0, sum(durations) / len(durations) * total - sum(running))
    rest = work / min(parallel, total)
    return f", about {rest / 60:.0f} min left" if rest < 5400 else f", about {rest / 3600:.1f} h left"


def run_planned(planned: Planned, cache: Path, parallel: int = 1, say=None) -> dict[str, list[list[dict]]]:
    """Every run of ``planned`` ({label: [metrics rows per seed]}), ``parallel`` at a time,
    saying each as it starts."""
    from concurrent.futures import ThreadPoolExecutor

    say = say or (lambda text: print(text, file=sys.stderr, flush=True))
    jobs = [(label, i, cfg) for label, cfgs in planned.configs.items() if label not in planned.same
            for i, cfg in enumerate(cfgs)]
    todo = sum(1 for _, _, cfg in jobs if not cached(cfg, cache))
    t = planned.table
    say(f"reproduce {t.paper}/{t.name}: {len(jobs)} runs ({len(jobs) - todo} cached), {parallel} at a time")
    started = time.perf_counter()
    durations: list[float] = []     # of the fresh runs done (their count: how many)
    running: dict[int, float] = {}  # id of a fresh run in progress -> its start
    stop = threading.Event()  # set on Ctrl-C: the runs in threads end after their round

    def one(job):
        label, i, cfg = job
        if stop.is_set():  # interrupted as this run was to start: it does not
            return label, i, None
        fresh = not cached(cfg, cache)
        if fresh:
            running[id(job)] = time.perf_counter()
        rows = run_cached(cfg, cache, stop)
        if fresh:
            now = time.perf_counter()
            durations.append(now - running.pop(id(job)))
            rest = left(durations, [now - t0 for t0 in list(running.values())], parallel, todo - len(durations))
            say(f"  {len(durations)}/{todo} {label}, seed {cfg.seed} ({now - started:.0f} s{rest})")
        return label, i, rows

    out: dict[str, list] = {label: [None] * len(cfgs) for label, cfgs in planned.configs.items()}
    if parallel > 1:
        start_local_ray([cfg for _, _, cfg in jobs], parallel)
    if parallel <= 1:
        results = [one(j) for j in jobs]
    else:
        with ThreadPoolExecutor(parallel, thread_name_prefix="raysfl-reproduce") as pool:
            futures = []
            try:
                futures += [pool.submit(one, j) for j in jobs]
                results = [f.result() for f in futures]
            except KeyboardInterrupt:  # SIGINT or SIGTERM, raised in this thread only
                say("raysfl reproduce: stopping the runs in progress after their current round")
                for f in futures:
                    f.cancel()  # the runs not started (before the stop frees the threads for them)
                stop.set()
                raise  # once the pool's threads have ended, each run checkpointed where it stopped
    columns = columns_read(t)
    floors: dict = {}
    for label, i, rows in results:
        cfg = planned.configs[label][i]
        out[label][i] = with_local_chance(read_at(rows, cfg, columns), cfg, floors, say) if rows is not None else rows
    for label, (rep, _) in planned.same.items():  # not run: the runs of the row that learns alike
        out[label] = list(out[rep])
    return out
