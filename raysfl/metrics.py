"""Per-round metrics: TensorBoard events, ``metrics.parquet`` and ``clients.parquet``.

Both Parquet files are rewritten atomically after every round (write to a temporary file,
then rename), so a crash never leaves a half-written file. The rewrite runs on a writer
thread, off the round's critical path; :meth:`RunLogger.flush` waits for it, and the run
calls it before every checkpoint and at the end, so no round a checkpoint covers is lost.
On ``--resume`` rows after the checkpoint's round are dropped and TensorBoard purges its
events past that step, so a resumed run reads exactly like an uninterrupted one.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# Columns that depend on the machine's speed rather than on the training (excluded when
# comparing two runs for determinism).
TIMING_COLUMNS = ("wall_time_s", "wall_time_total_s")


def _write_parquet(rows: list[dict], path: Path) -> None:
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist() if path.exists() else []


class RunLogger:
    def __init__(self, run_dir: Path, start_round: int = 0, progress: bool = True, total_rounds: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.parquet"
        self.clients_path = self.run_dir / "clients.parquet"
        self.rows = [r for r in read_rows(self.metrics_path) if r["round"] <= start_round]
        self.client_rows = [r for r in read_rows(self.clients_path) if r["round"] <= start_round]
        # TensorBoard's own thread writes the events every 2 s (and at close): no flush per round
        self.tb = SummaryWriter(str(self.run_dir / "tb"), purge_step=start_round + 1 if start_round else None,
                                flush_secs=2)
        self.progress, self.total_rounds = progress, total_rounds
        self._walls: list[float] = []  # wall seconds of the rounds this process ran (for the ETA)
        self._cv = threading.Condition()
        self._logged = self._written = 0  # rounds logged / rounds on disk
        self._error: BaseException | None = None
        self._closing = False
        self._writer = threading.Thread(target=self._write_loop, name="raysfl-metrics-writer", daemon=True)
        self._writer.start()

    def _write_loop(self) -> None:
        """Rewrite both Parquet files whenever rounds were logged since the last write."""
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._logged > self._written or self._closing)
                if self._logged == self._written:
                    return  # closing, nothing left to write
                target, rows, client_rows = self._logged, list(self.rows), list(self.client_rows)
            try:
                _write_parquet(rows, self.metrics_path)
                _write_parquet(client_rows, self.clients_path)
            except BaseException as e:  # noqa: BLE001 - re-raised in the run's thread by flush()
                with self._cv:
                    self._error, self._written = e, self._logged
                    self._cv.notify_all()
                return
            with self._cv:
                self._written = target
                self._cv.notify_all()

    def flush(self) -> None:
        """Wait until every logged round is in the Parquet files (raises the writer's error)."""
        with self._cv:
            self._cv.wait_for(lambda: self._written >= self._logged or self._error is not None)
            if self._error is not None:  # sticky: the writer has stopped, nothing more reaches disk
                raise self._error

    def log_round(self, row: dict, client_rows: list[dict]) -> None:
        with self._cv:
            if self._error is not None:
                raise self._error
            self.rows.append(row)
            self.client_rows.extend(client_rows)
            self._logged += 1
            self._cv.notify_all()
        step = int(row["round"])
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "round" and v == v:  # skip NaN
                self.tb.add_scalar(k, v, step)
        if self.progress:
            clear = "\r\033[K" if sys.stderr.isatty() else ""
            self._walls.append(float(row.get("wall_time_s", 0.0)))
            eta = sum(self._walls) / len(self._walls) * max(0, self.total_rounds - step)
            print(clear + progress_line(row, self.total_rounds, eta), file=sys.stderr, flush=True)

    def step_progress(self, rnd: int, done: int, total: int) -> None:
        """Redraw the current round's bar as its local steps finish (terminals only)."""
        if self.progress and sys.stderr.isatty():
            width = 20
            bar = "#" * int(width * done / max(1, total))
            print(f"\rround {rnd:>4}/{self.total_rounds} step {done}/{total} [{bar:<{width}}]",
                  end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            self._writer.join()
            self.tb.close()
        if self.progress and self.rows:
            print(summary_table(self.rows), file=sys.stderr, flush=True)


def _mb(b: float) -> str:
    return f"{b / 1e6:8.2f}MB"


# fault and fallback counts of a round (runtime/rounds.py EVENT_COLUMNS), as the console names them
EVENTS = (("failures", "failure"), ("restarts", "restart"), ("retries", "retry"), ("dropped", "dropped"),
          ("late_applied", "late applied"), ("skipped", "skipped"), ("fallbacks", "fallback"))


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _events(counts: dict) -> str:
    return ", ".join(f"{n} {name}" + ("s" if n > 1 and name in ("failure", "restart", "fallback") else "")
                     for key, name in EVENTS if (n := int(counts.get(key, 0) or 0)))


def progress_line(row: dict, total: int, eta_s: float | None = None) -> str:
    width = 20
    done = int(width * row["round"] / max(1, total))
    bar = "#" * done + "-" * (width - done)
    acc = row.get("test_accuracy")
    acc_s = f"{acc:.4f}" if acc == acc else "  -   "
    line = (f"round {row['round']:>4}/{total} [{bar}] acc {acc_s} loss {row['train_loss']:.4f} "
            f"up {_mb(row['bytes_up'])} down {_mb(row['bytes_down'])} "
            f"sim {row['sim_time_s']:8.2f}s wall {row['wall_time_s']:6.2f}s")
    if eta_s is not None and row["round"] < total:
        line += f" eta {_duration(eta_s)}"
    events = _events(row)
    return line + (f" | {events}" if events else "")


def summary_table(rows: list[dict]) -> str:
    last = rows[-1]
    evaluated = [r for r in rows if r["test_accuracy"] == r["test_accuracy"]]
    best = max(evaluated, key=lambda r: r["test_accuracy"]) if evaluated else last
    totals = {key: sum(int(r.get(key, 0) or 0) for r in rows) for key, _ in EVENTS}
    lines = [
        "",
        f"{'algorithm':<22}{last['algo']}",
        f"{'rounds':<22}{last['round']}",
        f"{'final test accuracy':<22}{last['test_accuracy']:.4f}",
        f"{'best test accuracy':<22}{best['test_accuracy']:.4f} (round {best['round']})",
        f"{'final test loss':<22}{last['test_loss']:.4f}",
        f"{'bytes up / down':<22}{sum(r['bytes_up'] for r in rows) / 1e6:.2f} MB / "
        f"{sum(r['bytes_down'] for r in rows) / 1e6:.2f} MB",
        f"{'simulated time':<22}{last['sim_time_total_s']:.2f} s",
        f"{'wall time':<22}{last['wall_time_total_s']:.2f} s (rounds only)",
        f"{'faults, fallbacks':<22}{_events(totals) or 'none'}",
    ]
    return "\n".join(lines)
