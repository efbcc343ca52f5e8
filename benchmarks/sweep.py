"""Shared plumbing of the performance benchmarks: runs on one local Ray, and result tables.

The papers' tables are not built here: ``raysfl reproduce`` runs them (raysfl/reproduce/).

Every table is written three ways next to each other: Markdown (for docs/), CSV and
Parquet (for your own analysis), each stamped with the command and the machine.
"""

from __future__ import annotations

import csv
import os
import platform
import shlex
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


def run(**settings) -> list[dict]:
    """One quiet run (no progress output, no checkpoints); returns its metrics rows. (The paper
    tables' cache of runs by resolved config is ``raysfl reproduce``'s: raysfl/reproduce/engine.py.)"""
    import raysfl

    settings = {"progress": False, "checkpoint_every": 0, "out": _tmp.name, **settings}
    for attempt in range(3):
        metrics = raysfl.run(raysfl.config_from_kwargs(**settings)).metrics
        # an actor the machine killed (Ray's out-of-memory monitor on a busy host) changes the
        # run; without faults asked for, such a run is not the measurement: run it again
        if settings.get("faults") or not any(r.get("failures") or r.get("restarts") for r in metrics):
            return metrics
        print(f"sweep: a run lost actors it did not ask to lose (attempt {attempt + 1}); running it again",
              file=sys.stderr, flush=True)
    raise RuntimeError(f"three runs in a row lost actors without faults asked for: {settings}")


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


def write_tables(rows: list[dict], md_path: str | Path, title: str, intro: str, markdown_body: str,
                 doc: str | Path | None = None) -> None:
    """``rows`` to <md_path>.csv and .parquet; ``markdown_body`` (tables + verdict) to md_path.

    With ``doc``, the table (with its command and machine) also replaces the section
    between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->`` of that document, NAME
    being md_path's stem (the section is appended if the markers are not there yet); a
    ``doc`` that does not exist is left alone (``--out /tmp/x.md``: no /performance.md)."""
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
    if doc is not None and Path(doc).is_file():
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
