"""Plots of run directories (Parquet in, PNG out): test accuracy against rounds, simulated
time and bytes sent, one line per algorithm with a band over its seeds.

Runs of one algorithm are aligned by round: the line is the mean over seeds of (x, accuracy)
at each evaluated round, the band spans the seeds' lowest and highest accuracy there.
matplotlib is an optional extra (``pip install 'raysfl[plot]'``; ``make test`` installs it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from raysfl.errors import ConfigError

PLOTS = {"rounds": ("accuracy_vs_rounds.png", "round"),
         "sim_time": ("accuracy_vs_sim_time.png", "simulated time (s)"),
         "bytes": ("accuracy_vs_bytes.png", "bytes sent, up + down (MB)")}


def load_curves(run_dirs: list[Path]) -> dict[str, list[dict[str, np.ndarray]]]:
    """{algorithm: [per run: {"round", "sim_time", "bytes", "acc"} arrays at evaluated rounds]}."""
    curves: dict[str, list] = {}
    for d in run_dirs:
        d = Path(d)
        if not (d / "metrics.parquet").exists():
            raise ConfigError(f"{d} is not a run directory (no metrics.parquet)")
        rows = pq.read_table(d / "metrics.parquet").to_pylist()
        algo = json.loads((d / "config.json").read_text())["algo"] if (d / "config.json").exists() else d.name
        sent = np.cumsum([r["bytes_up"] + r["bytes_down"] for r in rows]) / 1e6
        keep = [i for i, r in enumerate(rows) if r["test_accuracy"] == r["test_accuracy"]]
        curves.setdefault(algo, []).append({
            "rounds": np.array([rows[i]["round"] for i in keep], dtype=float),
            "sim_time": np.array([rows[i]["sim_time_total_s"] for i in keep], dtype=float),
            "bytes": sent[keep], "acc": np.array([rows[i]["test_accuracy"] for i in keep], dtype=float)})
    return curves


def plot_runs(run_dirs: list[Path], out_dir: Path) -> list[Path]:
    """Write the three PNGs into ``out_dir``; returns their paths."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'raysfl[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = load_curves(run_dirs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, (fname, xlabel) in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
        for algo, runs in curves.items():
            n = min(len(r["acc"]) for r in runs)
            if n == 0:
                continue
            x = np.mean([r[key][:n] for r in runs], axis=0)
            acc = np.array([r["acc"][:n] for r in runs])
            (line,) = ax.plot(x, acc.mean(axis=0), label=f"{algo} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
            if len(runs) > 1:
                ax.fill_between(x, acc.min(axis=0), acc.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname)
        plt.close(fig)
        paths.append(out_dir / fname)
    return paths
