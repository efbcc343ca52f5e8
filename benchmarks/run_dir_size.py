"""Disk used by a run directory: the demo (``make demo`` = ``examples/flex_sfl.py``: FLEX-SFL,
100 clients, 60 rounds on digits, a checkpoint every round) with the default
``--keep-checkpoints 2`` and, for comparison, with every checkpoint kept (the behaviour
before checkpoints were pruned).

    .venv/bin/python benchmarks/run_dir_size.py            # two demo runs, a few minutes each

Writes docs/results/run-dir-size.md (+ .csv, .parquet): MB per part of the run directory.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import ROOT, write_tables  # noqa: E402

PARTS = ("checkpoints", "tb", "metrics.parquet", "clients.parquet", "clients.json", "other")


def sizes(run_dir: Path) -> dict[str, float]:
    """MB of each part of ``run_dir``."""
    out = {p: 0.0 for p in PARTS}
    for f in run_dir.rglob("*"):
        if f.is_file():
            top = f.relative_to(run_dir).parts[0]
            out[top if top in out else "other"] += f.stat().st_size / 1e6
    return out


def main() -> None:
    argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split())).parse_args()  # --help only
    rows = []
    with tempfile.TemporaryDirectory(prefix="raysfl-rundir-") as tmp:
        for keep in (2, 0):
            out = Path(tmp) / f"keep{keep}"
            cmd = [sys.executable, str(ROOT / "examples" / "flex_sfl.py"), "--out", str(out), "--name", "demo",
                   "--keep-checkpoints", str(keep), "--no-progress"]
            subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True,
                           env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
            run_dir = out / "demo"
            s = sizes(run_dir)
            rows.append({"keep_checkpoints": keep, "checkpoints_kept": len(list((run_dir / "checkpoints").glob("*.pt"))),
                         **{f"{p}_mb": round(v, 2) for p, v in s.items()}, "total_mb": round(sum(s.values()), 2)})
    lines = ["| --keep-checkpoints | checkpoints kept | " + " | ".join(f"{p} (MB)" for p in PARTS) + " | total (MB) |",
             "|---|---:|" + "---:|" * (len(PARTS) + 1)]
    for r in rows:
        lines.append(f"| {r['keep_checkpoints'] or '0 (every one)'} | {r['checkpoints_kept']} | "
                     + " | ".join(f"{r[p + '_mb']:.2f}" for p in PARTS) + f" | {r['total_mb']:.2f} |")
    write_tables(rows, ROOT / "docs" / "results" / "run-dir-size.md", "Disk used by the demo's run directory",
                 __doc__.split("\n\n")[0], "\n".join(lines))


if __name__ == "__main__":
    main()
