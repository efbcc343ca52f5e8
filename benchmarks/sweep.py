"""Shared plumbing of the experiment scripts: many runs on one local Ray, and result tables.

Every table is written three ways next to each other: Markdown (for docs/), CSV and
Parquet (for your own analysis), each stamped with the command and the machine.
"""

from __future__ import annotations

import csv
import os
import platform
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_tmp = tempfile.TemporaryDirectory(prefix="raysfl-sweep-")


def start_ray(num_cpus: int) -> None:
    """One local Ray for all runs of a sweep (actors still start per run)."""
    import ray

    # actors import raysfl from this checkout, like the driver (not from an installed copy)
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, configure_logging=False,
             log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})


def run(cache: str | Path | None = None, **settings) -> list[dict]:
    """One quiet run (no progress output, no checkpoints); returns its metrics rows.

    With ``cache`` (a directory), the rows are kept there under a hash of the run's resolved
    configuration (every setting, the algorithm's defaults filled in) and a later call that
    resolves to the same configuration reads them back instead of running again: a long sweep
    that stops half way picks up where it was, and a run cached before a default changed is not
    mistaken for the new default's (delete the directory to rerun everything)."""
    import json

    import raysfl

    settings = {"progress": False, "checkpoint_every": 0, "out": _tmp.name, **settings}
    path = None
    if cache is not None:
        path = Path(cache) / f"{cache_key(settings)}.json"
        if path.exists():
            return json.loads(path.read_text())["metrics"]
    for attempt in range(3):
        metrics = raysfl.run(raysfl.config_from_kwargs(**settings)).metrics
        # an actor the machine killed (Ray's out-of-memory monitor on a busy host) changes the
        # run; without faults asked for, such a run is not the measurement: run it again
        if settings.get("faults") or not any(r.get("failures") or r.get("restarts") for r in metrics):
            break
        print(f"sweep: a run lost actors it did not ask to lose (attempt {attempt + 1}); running it again",
              file=sys.stderr, flush=True)
    else:
        raise RuntimeError(f"three runs in a row lost actors without faults asked for: {settings}")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        given = {k: v for k, v in settings.items() if k not in ("progress", "out")}
        path.write_text(json.dumps({"settings": given, "metrics": metrics}, default=str))
    return metrics


def cache_key(settings: dict) -> str:
    """A run's cache name: a hash of its configuration as :func:`raysfl.run` resolves it
    (the algorithm's paper setting and parameter defaults filled in), without the settings
    that do not change what it measures (where and how it is written and shown)."""
    import dataclasses
    import hashlib
    import json

    import raysfl
    from raysfl.resolve import validate

    cfg = dataclasses.asdict(validate(raysfl.config_from_kwargs(**settings)))
    key = {k: v for k, v in cfg.items() if k not in ("out", "progress", "name", "mlflow", "keep_checkpoints",
                                                     "keep_best")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]


def prerun(jobs: list[dict], cache: str | Path | None, at_once: int) -> str | Path | None:
    """Run every settings dict of ``jobs`` into the cache, ``at_once`` at a time (threads:
    ``raysfl.run`` is thread-safe; the local Ray needs 2.5 CPUs per run), so that a script's
    tables then read them back with :func:`run`. Returns the cache used (a fresh temporary
    one when none was given). With ``at_once`` 1 it does nothing: the tables run one by one."""
    if at_once <= 1:
        return cache
    from concurrent.futures import ThreadPoolExecutor

    cache = cache or tempfile.mkdtemp(prefix="raysfl-sweep-cache-")
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(lambda settings: run(cache=cache, **settings), jobs))
    return cache


def evaluated(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["test_accuracy"] == r["test_accuracy"]]


def to_target(rows: list[dict], target: float) -> dict:
    """Round, simulated time and MB when test accuracy first reaches ``target`` (None if never)."""
    from raysfl.compare import to_target as hit

    h = hit(rows, target)
    return {"round": h[0], "sim_s": h[1], "mb": h[2] / 1e6} if h else {"round": None, "sim_s": None, "mb": None}


def last_mean(rows: list[dict], n: int = 10) -> float:
    """Mean test accuracy of the last ``n`` evaluated rounds (the paper's Table 6 metric)."""
    ev = evaluated(rows)[-n:]
    return sum(r["test_accuracy"] for r in ev) / len(ev)


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's processor string: runs are
    deterministic on one machine, but the same seed can end differently on another CPU."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    return (f"{platform.machine()} {cpu_model()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def command() -> str:
    return " ".join([".venv/bin/python", *map(shlex.quote, sys.argv)])


def fmt(v, spec: str = ".4f") -> str:
    if v is None:
        return "—"
    return format(v, spec) if isinstance(v, float) else str(v)


def mean_std(values: list[float], spec: str = ".4f", scale: float = 1.0) -> str:
    """``mean ± standard deviation`` of ``values`` x ``scale`` (— when empty)."""
    if not values:
        return "—"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{format(scale * statistics.mean(values), spec)} ± {format(scale * sd, spec)}"


def write_tables(rows: list[dict], md_path: str | Path, title: str, intro: str, markdown_body: str,
                 doc: str | Path | None = None) -> None:
    """``rows`` to <md_path>.csv and .parquet; ``markdown_body`` (tables + verdict) to md_path.

    With ``doc``, the table (with its command and machine) also replaces the section
    between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` of that document, NAME
    being md_path's stem (the section is appended if the markers are not there yet)."""
    md_path = Path(md_path)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    data_path = md_path.with_suffix("")
    with open(f"{data_path}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), f"{data_path}.parquet")
    intro = " ".join(intro.split())  # docstring line breaks -> one paragraph
    text = (f"# {title}\n\n{intro}\n\nCommand: `{command()}`  \nMachine: {machine()}  \n"
            f"Raw rows: `{data_path.name}.csv`, `{data_path.name}.parquet`\n\n{markdown_body}\n")
    md_path.write_text(text)
    print(text)
    if doc is not None:
        update_section(Path(doc), md_path.stem, f"Command: `{command()}`  \nMachine: {machine()}  \n"
                       f"Full table and raw rows: [results/{md_path.name}](results/{md_path.name})\n\n"
                       f"{markdown_body}\n")


def update_section(doc: Path, name: str, text: str) -> None:
    """Replace the marked section ``name`` of ``doc`` with ``text`` (append it if absent)."""
    start, end = f"<!-- table:{name} -->", f"<!-- /table:{name} -->"
    body = doc.read_text() if doc.exists() else ""
    block = f"{start}\n{text}{end}"
    if start in body and end in body:
        body = body[:body.index(start)] + block + body[body.index(end) + len(end):]
    else:
        body = body.rstrip("\n") + ("\n\n" if body else "") + block + "\n"
    doc.write_text(body)
