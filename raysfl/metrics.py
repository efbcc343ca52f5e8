"""Per-round metrics: TensorBoard events, ``metrics.parquet`` and ``clients.parquet``.

TensorBoard (``tb/``, one TensorBoard run per experiment): every numeric column at step =
round, under a group per kind (:func:`tb_tag`: ``accuracy/``, ``loss/``, ``bytes/``,
``time/``, ``faults/``, ``compute/``, ``clients/``, ``algorithm/``); the run's config as
text; test accuracy against simulated time (tag ``accuracy_vs_sim_time/test_accuracy``,
step = simulated milliseconds) and against bytes sent (``accuracy_vs_bytes/test_accuracy``,
step = bytes up + down so far); and at the end hparams (the hyperparameters,
:func:`hparam_values`, and the final figures, to compare runs in TensorBoard's HPARAMS tab).
A resume rewrites ``tb/`` from the rounds it keeps (every tag has its own x-axis, so no
single purge step would fit them all).

Both Parquet files are rewritten atomically (write to a temporary file, then rename), so a
crash never leaves a half-written file: after a round, at most every ``WRITE_EVERY_S``
seconds (a file of thousands of client rows rewritten after every short round cost the
driver more than the round), and at once when asked. The rewrite runs on a writer thread,
off the round's critical path, and converts each row to Arrow once (:class:`RowsTable`), so
that its cost does not grow with the rounds so far (``clients.parquet``'s rows, a row per client
and round, are then held only in that table); :meth:`RunLogger.flush` writes and waits,
and the run calls it before every checkpoint and at the end, so no round a checkpoint covers
is lost.
On ``--resume`` rows after the checkpoint's round are dropped and ``tb/`` is written again
from the rows kept, so a resumed run reads exactly like an uninterrupted one.

TensorBoard writes its events on a thread of its own, which would die at the first OSError
(a full disk, a read-only directory) with a traceback on the terminal and leave the driver to
meet a bare OSError later. The event file's writes are guarded (:func:`_guard_events`): the
first OSError is kept, later writes are dropped, and the driver stops the run at the next
round (or at the end) with one line naming ``tb/``, the cause and how to resume
(:class:`raysfl.errors.RunFailed`); the Parquet files and the checkpoints are untouched by it.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from raysfl.errors import RunFailed, first_line
from raysfl.whole_files import replacing

# Columns that depend on the machine's speed rather than on the training (excluded when
# comparing two runs for determinism).
TIMING_COLUMNS = ("wall_time_s", "wall_time_total_s")
WRITE_EVERY_S = 2.0  # the Parquet files follow the rounds at most this far behind (flush: at once)


def _write_parquet(rows: "list[dict] | pa.Table", path: Path) -> None:
    with replacing(path) as tmp:
        pq.write_table(rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows), tmp)


class RowsTable:
    """A growing list of rows as one Arrow table, each row converted once.

    A Parquet file is rewritten whole (it is complete after every write), and converting Python
    rows to Arrow is most of a rewrite (``Table.from_pylist``: 0.29 s of 0.30 s for 100,000
    client rows, 100 clients for 1,000 rounds, on the 2-core AMD EPYC), so converting every row
    at every write made the writer's cost grow with the rounds so far. Here only the rows logged
    since the last write are converted; the table is the chunks concatenated (no copy). The
    columns are the first row's, as ``Table.from_pylist`` takes them, and each column's type is
    what it would infer over all the rows (chunks promoted: int64 with double is double, a
    column of nulls takes the other chunks' type)."""

    def __init__(self):
        self.columns: list[str] | None = None
        self.table: pa.Table | None = None
        self.converted = 0  # rows in ``table``

    def of(self, rows: list[dict]) -> pa.Table:
        """The table of ``rows``, which extend the rows of the last call."""
        return self.add(rows[self.converted:])

    def add(self, new: list[dict]) -> pa.Table:
        """The table with the rows ``new`` appended to those it holds."""
        if new:
            if self.columns is None:
                self.columns = list(new[0])
            chunk = pa.Table.from_pydict({k: [r.get(k) for r in new] for k in self.columns})
            self.table = chunk if self.table is None else pa.concat_tables([self.table, chunk],
                                                                          promote_options="permissive")
            if self.columns and self.table.column(0).num_chunks > 64:
                self.table = self.table.combine_chunks()  # a few large chunks write faster than many small
            self.converted += len(new)
        return pa.table({}) if self.table is None else self.table


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist() if path.exists() else []


_GROUPS = (  # TensorBoard group of a metrics column: the first rule that matches
    ("accuracy", lambda k: "acc" in k),
    ("loss", lambda k: "loss" in k),
    ("test", lambda k: k.startswith("test_")),  # the other test-set figures: metrics of your own (test_mae)
    ("bytes", lambda k: k.startswith("bytes")),
    ("time", lambda k: "time" in k),
    ("faults", lambda k: k in ("failures", "failed_clients", "restarts", "retries", "dropped", "late_applied",
                               "skipped", "fallbacks", "fallback_steps", "below_min_included", "unavailable_clients")),
    ("compute", lambda k: k.endswith("flops")),
    ("clients", lambda k: k in ("participants", "completed")),
)


def tb_tag(column: str) -> str:
    """The TensorBoard tag of a metrics column: ``accuracy/test_accuracy``, ``bytes/bytes_up``, ...;
    an algorithm's own columns go under ``algorithm/``."""
    for group, match in _GROUPS:
        if match(column):
            return f"{group}/{column}"
    return f"algorithm/{column}"


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _sent(row: dict) -> int:
    return int(row.get("bytes_up", 0) or 0) + int(row.get("bytes_down", 0) or 0)


TB_MAX_STEP = 2**62  # TensorBoard's steps are 64-bit integers


def _sim_ms(row: dict) -> int:
    """The simulated time in milliseconds as a TensorBoard step (capped: a step past 2^63 is refused)."""
    ms = 1000 * float(row.get("sim_time_total_s", 0.0) or 0.0)
    return int(round(ms)) if math.isfinite(ms) and 0 <= ms < TB_MAX_STEP else (TB_MAX_STEP if ms > 0 else 0)


# Settings that are not hyperparameters: where a run writes and how it is kept, resumed, shown and
# placed (they change nothing the run computes), kept out of TensorBoard's hparams and MLflow's params.
NOT_HPARAMS = {"out", "name", "resume", "progress", "checkpoint_every", "keep_checkpoints", "keep_best", "mlflow",
               "mlflow_artifacts", "max_restarts", "max_round_retries", "min_included", "data_root", "download",
               "eval_every", "eval_rounds", "eval_passes", "resources"}
# Settings that apply only under another setting (ours): a partitioner's own knob, local epochs where
# local steps are not set. Left out of the hyperparameters elsewhere (no alpha for an iid run).
APPLIES_WHEN = {
    "alpha": lambda c: c.get("partition") == "dirichlet",
    "classes_per_client": lambda c: c.get("partition") == "pathological",
    "shards_per_client": lambda c: c.get("partition") == "shards",
    "local_epochs": lambda c: c.get("local_steps") is None,
    # real-valued targets split by quantile bins (a custom loss of class ids is shown it too)
    "target_bins": lambda c: c.get("loss") != "cross_entropy" and c.get("partition") in ("dirichlet", "pathological",
                                                                                          "shards"),
}


def applicable_settings(config: dict, prefix: str = "") -> dict:
    """The settings of ``config`` (a run's ``config.json``) that define what it computes, flattened
    (``devices.memory_gb``, ``algo_params.mu``) and typed: numbers stay numbers, tuples become
    lists. Left out: bookkeeping (:data:`NOT_HPARAMS`), settings that do not apply to this run
    (:data:`APPLIES_WHEN`), and unset ones (None, an empty string)."""
    out = {}
    for k, v in config.items():
        if not prefix and (k in NOT_HPARAMS or (k in APPLIES_WHEN and not APPLIES_WHEN[k](config))):
            continue
        if isinstance(v, dict):
            out.update(applicable_settings(v, f"{prefix}{k}."))
        elif v is None or v == "":
            continue
        elif isinstance(v, (list, tuple)):
            out[f"{prefix}{k}"] = list(v)
        else:
            out[f"{prefix}{k}"] = v
    return out


def hparam_values(config: dict) -> dict:
    """The config's hyperparameters (:func:`applicable_settings`) for TensorBoard's hparams, which
    take numbers, strings and booleans: a list as its JSON text."""
    return {k: v if isinstance(v, (bool, int, float, str)) else json.dumps(v)
            for k, v in applicable_settings(config).items()}


def summary(rows: list[dict]) -> dict:
    """A run's closing figures from its metrics rows: the task's own (final and best test
    accuracy; final and best (lowest) test loss, the only ones for a loss without an accuracy such
    as regression), rounds, MB sent and simulated seconds; the final local test accuracy where
    clients keep a local test split. Non-finite values are left out (TensorBoard's hparams,
    MLflow's summary metrics)."""
    last = rows[-1]
    evaluated = [r["test_accuracy"] for r in rows if _finite(r.get("test_accuracy"))]
    losses = [r["test_loss"] for r in rows if _finite(r.get("test_loss"))]
    final = {**({"final_test_accuracy": evaluated[-1], "best_test_accuracy": max(evaluated)} if evaluated else {}),
             **({"final_test_loss": losses[-1], "best_test_loss": min(losses)} if losses else {}),
             "rounds": float(last["round"]),
             "bytes_sent_mb": sum(_sent(r) for r in rows) / 1e6,
             "sim_time_total_s": float(last["sim_time_total_s"])}
    if _finite(last.get("test_accuracy_local")):
        final["final_test_accuracy_local"] = float(last["test_accuracy_local"])
    return {k: float(v) for k, v in final.items() if _finite(v)}


def _guard_events(tb, on_error) -> bool:
    """Keep TensorBoard's writer thread alive through an OSError: the event file's record
    writer (shared by the thread and the driver) passes the first OSError to ``on_error`` and
    drops every write after it. Returns False where this tensorboard's writer is laid out
    otherwise (left unguarded)."""
    records = getattr(getattr(getattr(getattr(tb, "file_writer", None), "event_writer", None),
                              "_async_writer", None), "_writer", None)
    if records is None:
        return False
    failed: list[OSError] = []

    def guarded(fn, closing: bool = False):
        def call(*args):
            if failed and not closing:
                return None
            try:
                return fn(*args)
            except OSError as e:
                if not failed:
                    failed.append(e)
                    on_error(e)
            return None
        return call

    for name in ("write", "flush"):
        setattr(records, name, guarded(getattr(records, name)))
    records.close = guarded(records.close, closing=True)  # the file is closed even after a failure
    return True


class RunLogger:
    def __init__(self, run_dir: Path, start_round: int = 0, progress: bool = True, total_rounds: int = 0,
                 config: dict | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.parquet"
        self.clients_path = self.run_dir / "clients.parquet"
        self.rows = [r for r in read_rows(self.metrics_path) if r["round"] <= start_round]
        # clients.parquet's rows not yet written: once written the driver keeps them only in their
        # Arrow table (a quarter of the memory of dicts; nothing else reads them)
        self._client_rows = [r for r in read_rows(self.clients_path) if r["round"] <= start_round]
        self.config = config or {}
        self.progress, self.total_rounds = progress, total_rounds
        # TensorBoard's own thread writes the events every 2 s (and at close): no flush per round
        tb_dir = self.run_dir / "tb"
        if start_round:  # a resume: tb/ again from the rounds kept (and from an older layout's sub-runs)
            import shutil

            shutil.rmtree(tb_dir, ignore_errors=True)
        self.tb_dir = tb_dir
        self._tb_error: OSError | None = None  # the first OSError of TensorBoard's events (_guard_events)
        self._tb_reported = False
        try:
            self.tb = SummaryWriter(str(tb_dir), flush_secs=2)
        except OSError as e:
            self._tb_error = e
            self._check_events()
        _guard_events(self.tb, self._events_failed)
        if config:
            self.tb.add_text("config", "    " + json.dumps(config, indent=2).replace("\n", "\n    "), 0)
        self._bytes_sent = 0
        for row in self.rows:
            self._tb_round(row)
        self._walls: list[float] = []  # wall seconds of the rounds this process ran (for the ETA)
        self._cv = threading.Condition()
        self._logged = self._written = 0  # rounds logged / rounds on disk
        self._error: BaseException | None = None
        self._closing = False
        self._urgent = False  # flush() asked: write now
        self._last_write = 0.0
        self._tables = (RowsTable(), RowsTable())  # metrics.parquet's and clients.parquet's, converted once
        self._writer = threading.Thread(target=self._write_loop, name="raysfl-metrics-writer", daemon=True)
        self._writer.start()

    def _write_loop(self) -> None:
        """Rewrite both Parquet files when rounds were logged since the last write: at most every
        ``WRITE_EVERY_S`` seconds, at once when flushed or closing."""
        import time

        def due() -> bool:
            return self._logged > self._written and (
                self._urgent or self._closing or time.monotonic() - self._last_write >= WRITE_EVERY_S)

        while True:
            with self._cv:
                while not due() and not (self._closing and self._logged == self._written):
                    wait = None if self._logged == self._written else max(
                        0.0, WRITE_EVERY_S - (time.monotonic() - self._last_write))
                    self._cv.wait(timeout=wait)
                if self._logged == self._written:
                    return  # closing, nothing left to write
                target, rows, client_rows, self._client_rows = self._logged, list(self.rows), self._client_rows, []
                self._urgent = False
            try:
                _write_parquet(self._tables[0].of(rows), self.metrics_path)
                _write_parquet(self._tables[1].add(client_rows), self.clients_path)
            except BaseException as e:  # noqa: BLE001 - re-raised in the run's thread by flush()
                with self._cv:
                    self._error, self._written = e, self._logged
                    self._cv.notify_all()
                return
            with self._cv:
                self._written = target
                self._last_write = time.monotonic()
                self._cv.notify_all()

    def flush(self) -> None:
        """Write every logged round to the Parquet files now and wait (raises the writer's error)."""
        with self._cv:
            self._urgent = True
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._written >= self._logged or self._error is not None)
            if self._error is not None:  # sticky: the writer has stopped, nothing more reaches disk
                raise self._error

    def log_round(self, row: dict, client_rows: list[dict]) -> None:
        with self._cv:
            if self._error is not None:
                raise self._error
            self.rows.append(row)
            self._client_rows.extend(client_rows)
            self._logged += 1
            self._cv.notify_all()
        step = int(row["round"])
        self._tb_round(row)
        if self.progress:
            clear = "\r\033[K" if sys.stderr.isatty() else ""
            self._walls.append(float(row.get("wall_time_s", 0.0)))
            # the first round of a process pays one-off costs (first calls, caches): the ETA is
            # taken from the rounds after it, and none is said before there is one (issue 46)
            later = self._walls[1:]
            eta = sum(later) / len(later) * max(0, self.total_rounds - step) if later else None
            print(clear + progress_line(row, self.total_rounds, eta), file=sys.stderr, flush=True)
        self._check_events()

    def _events_failed(self, e: OSError) -> None:
        self._tb_error = e  # read by the driver's next _check_events

    def _check_events(self, at_end: bool = False) -> None:
        """Stop the run with one line once TensorBoard could not write its events (said once;
        ``at_end``: the run's last round is checkpointed)."""
        e = self._tb_error
        if e is None or self._tb_reported:
            return
        self._tb_reported = True
        from raysfl.checkpoint import resume_hint, rounds_saved

        cause = first_line(e, None)
        done = self.rows[-1]["round"] if self.rows else 0
        kept = rounds_saved(self.run_dir)
        if at_end and self.total_rounds and done >= self.total_rounds:
            after = f"the run finished (rounds 1..{done} are in {self.run_dir}); only {self.tb_dir.name}/ is incomplete"
        else:
            after = ((f"metrics of rounds 1..{done} are in {self.run_dir}; " if done else "")
                     + (f"its checkpoints up to round {kept[-1]} are kept; " if kept else "")
                     + resume_hint(self.run_dir, self.config.get("checkpoint_every")))
        raise RunFailed(f"cannot write TensorBoard events to {self.tb_dir}: {cause}; {after}")

    def _tb_round(self, row: dict) -> None:
        step = int(row["round"])
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "round" and v == v:  # skip NaN
                self.tb.add_scalar(tb_tag(k), v, step)
        self._bytes_sent += _sent(row)
        acc = row.get("test_accuracy")
        if isinstance(acc, float) and acc == acc:
            self.tb.add_scalar("accuracy_vs_sim_time/test_accuracy", acc, _sim_ms(row))
            self.tb.add_scalar("accuracy_vs_bytes/test_accuracy", acc, self._bytes_sent)

    def step_progress(self, rnd: int, done: int, total: int) -> None:
        """Redraw the current round's bar as its local steps finish (terminals only)."""
        if self.progress and sys.stderr.isatty():
            width = 20
            bar = "#" * int(width * done / max(1, total))
            print(f"\rround {rnd:>4}/{self.total_rounds} step {done}/{total} [{bar:<{width}}]",
                  end="", file=sys.stderr, flush=True)

    def close(self, stopped: bool = False) -> None:
        try:
            self.flush()
        finally:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            self._writer.join()
            try:
                if self.rows and self.config:
                    self._hparams()
            finally:
                self.tb.close()
        if self.progress and self.rows:
            print(summary_table(self.rows, self.run_dir, stopped), file=sys.stderr, flush=True)
        if sys.exc_info()[1] is None:  # called while another error propagates: that one is reported
            self._check_events(at_end=True)

    def _hparams(self) -> None:
        """The hyperparameters and the final figures, in the run's own writer (HPARAMS tab)."""
        from torch.utils.tensorboard.summary import hparams

        last = self.rows[-1]
        final = {f"hparams/{k}": v for k, v in summary(self.rows).items()}
        for event in hparams(hparam_values(self.config), final):
            self.tb.file_writer.add_summary(event)
        for k, v in final.items():
            self.tb.add_scalar(k, v, int(last["round"]))


def _mb(b: float) -> str:
    return f"{b / 1e6:8.2f}MB"


# fault and fallback counts of a round (runtime/rounds.py EVENT_COLUMNS), as the console names them
EVENTS = (("failures", "actor failure"), ("failed_clients", "client lost"), ("restarts", "restart"),
          ("retries", "retry"), ("dropped", "dropped"), ("late_applied", "late applied"), ("skipped", "skipped"),
          ("fallbacks", "fallback"), ("unavailable_clients", "unavailable"))


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _events(counts: dict) -> str:
    return ", ".join((f"{n} clients lost" if name == "client lost" and n > 1 else f"{n} {name}")
                     + ("s" if n > 1 and name in ("actor failure", "restart", "fallback") else "")
                     for key, name in EVENTS if (n := int(counts.get(key, 0) or 0)))


def progress_line(row: dict, total: int, eta_s: float | None = None) -> str:
    width = 20
    done = int(width * row["round"] / max(1, total))
    bar = "#" * done + "-" * (width - done)
    acc, test_loss = row.get("test_accuracy"), row.get("test_loss")
    # a loss without an accuracy (regression, raysfl.objective) shows its test loss instead
    score = (f"acc {acc:.4f}" if acc == acc else f"test loss {test_loss:.4f}" if test_loss == test_loss
             and test_loss is not None else "acc   -   ")
    line = (f"round {row['round']:>4}/{total} [{bar}] {score} train loss {row['train_loss']:.4f} "
            f"up {_mb(row['bytes_up'])} down {_mb(row['bytes_down'])} "
            f"sim {row['sim_time_s']:8.2f}s wall {row['wall_time_s']:6.2f}s")
    if eta_s is not None and row["round"] < total:
        line += f" eta {_duration(eta_s)}"
    events = _events(row)
    return line + (f" | {events}" if events else "")


def summary_table(rows: list[dict], run_dir: Path | None = None, stopped: bool = False) -> str:
    last = rows[-1]
    evaluated = [r for r in rows if r["test_accuracy"] == r["test_accuracy"]]
    totals = {key: sum(int(r.get(key, 0) or 0) for r in rows) for key, _ in EVENTS}
    if evaluated or last["test_loss"] != last["test_loss"]:
        best = max(evaluated, key=lambda r: r["test_accuracy"]) if evaluated else last
        scores = [f"{'final test accuracy':<22}{last['test_accuracy']:.4f}",
                  f"{'best test accuracy':<22}{best['test_accuracy']:.4f} (round {best['round']})"]
    else:  # a loss without an accuracy (regression, raysfl.objective): judged by the test loss
        best = min((r for r in rows if r["test_loss"] == r["test_loss"]), key=lambda r: r["test_loss"])
        scores = [f"{'best test loss':<22}{best['test_loss']:.4f} (round {best['round']})"]
    lines = [
        "",
        f"{'algorithm':<22}{last['algo']}",
        f"{'rounds':<22}{last['round']}",
        *scores,
        f"{'final test loss':<22}{last['test_loss']:.4f}",
        f"{'bytes up / down':<22}{sum(r['bytes_up'] for r in rows) / 1e6:.2f} MB / "
        f"{sum(r['bytes_down'] for r in rows) / 1e6:.2f} MB",
        f"{'simulated time':<22}{last['sim_time_total_s']:.2f} s",
        f"{'wall time':<22}{last['wall_time_total_s']:.2f} s (rounds only)",
        f"{'faults, fallbacks':<22}{_events(totals) or 'none'}",
    ]
    shares = [r["eval_test_share"] for r in evaluated if r.get("eval_test_share", 1.0) < 1.0]
    if shares:  # per-client models scored on shares of the test set (--eval-passes)
        span = f"{min(shares):.1%}" + (f" to {max(shares):.1%}" if max(shares) > min(shares) else "")
        lines.insert(len(scores) + 4, f"{'per-client models':<22}scored on {span} of the test set each, in "
                                      f"{len(shares)} of {len(evaluated)} evaluations (--eval-passes; 0 = the whole set)")
    if stopped:
        lines.insert(3, f"{'stopped':<22}by a callback after round {last['round']}")
    if run_dir is not None:
        from raysfl.checkpoint import disk_usage, rounds_saved

        kept = rounds_saved(run_dir)
        lines.append(f"{'disk used':<22}{disk_usage(run_dir) / 1e6:.1f} MB in {run_dir} ({len(kept)} checkpoint"
                     f"{'s' if len(kept) != 1 else ''}{': rounds ' + ', '.join(map(str, kept)) if kept else ''})")
    return "\n".join(lines)
