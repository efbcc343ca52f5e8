"""Figures of run directories (Parquet in, PNG and PDF out): a metric (test accuracy by
default, any ``metrics.parquet`` column) against rounds, simulated time and bytes sent.

Runs are grouped by (algorithm, settings): runs whose ``config.json`` agree on everything
but the seed (and settings that do not change what is computed: names, paths, progress,
checkpoints, resources, run length) are one curve, the mean over their seeds at each
evaluated round, with a band of ± one standard deviation (``band="minmax"``: lowest to
highest; the legend says which and over how many seeds). Two groups of one algorithm are
told apart in the legend by the settings in which they differ. A caption under the axes
lists the data-defining settings all runs share (:data:`raysfl.config.DATA_DEFINING`).

Warnings (printed to stderr, and returned by :func:`group_runs`): the same run directory
given twice (kept once), the same seed twice in a group, groups that differ in a
data-defining setting (not a like-for-like comparison: the settings go into the legend), and
runs of a group of different lengths (the curve stops at the shortest).

Paper-ready: PDFs (and PostScript) embed TrueType fonts (``pdf.fonttype`` 42; IEEE PDF
eXpress refuses Type 3); ``size`` (inches), ``caption`` (the grey caption under the axes, on
or off; its text is written to ``caption.txt`` either way, for the paper's own caption) and
``legend`` (where the legend goes: ``best``, the place that covers the fewest points, by
default; ``outside``, right of the axes; any matplotlib location; ``none``) are options.

matplotlib is an optional extra (``pip install 'raysfl[plot]'``; ``make test`` installs it).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from raysfl.config import DATA_DEFINING
from raysfl.errors import ConfigError

# x axes: key -> (file name for the default metric, axis label)
PLOTS = {"rounds": ("accuracy_vs_rounds.png", "round"),
         "sim_time": ("accuracy_vs_sim_time.png", "simulated time (s)"),
         "bytes": ("accuracy_vs_bytes.png", "bytes sent, up + down (MB)")}
BANDS = ("std", "minmax", "none")
LEGENDS = ("best", "outside", "none", "upper right", "upper left", "lower left", "lower right", "right",
           "center left", "center right", "lower center", "upper center", "center")
SIZE = (6.4, 4.4)  # inches, the default figure size
PAPER_FONTS = {"pdf.fonttype": 42, "ps.fonttype": 42}  # TrueType, not Type 3
FORMATS = ("png", "pdf", "svg")
# config keys that do not change what a run computes (or vary by design): not part of a group's identity
IGNORED = {"seed", "name", "out", "resume", "progress", "checkpoint_every", "keep_checkpoints", "keep_best",
           "mlflow", "mlflow_artifacts", "resources", "rounds", "eval_every", "eval_rounds", "data_root", "download"}


@dataclass
class Run:
    path: Path
    config: dict
    rows: list[dict]

    @property
    def algo(self) -> str:
        return self.config.get("algo", self.path.name)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = tuple(v) if isinstance(v, list) else v
    return out


def load_runs(run_dirs: list[Path], warn=None) -> list[Run]:
    """Each run directory's config and metrics rows (a directory given twice is read once)."""
    warn = warn if warn is not None else []
    runs, seen = [], set()
    for d in run_dirs:
        d = Path(d)
        if not (d / "metrics.parquet").exists():
            raise ConfigError(f"{d} is not a run directory (no metrics.parquet)")
        if d.resolve() in seen:
            warn.append(f"{d} is given twice; plotted once")
            continue
        seen.add(d.resolve())
        cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {"algo": d.name}
        runs.append(Run(d, cfg, pq.read_table(d / "metrics.parquet").to_pylist()))
    return runs


def _identity(run: Run) -> tuple:
    return tuple(sorted((k, v) for k, v in _flat(run.config).items() if k.split(".")[0] not in IGNORED))


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def group_runs(runs: list[Run], warn=None) -> tuple[dict[str, list[Run]], str]:
    """{legend label: runs} grouped by (algorithm, settings), and the caption of shared settings."""
    warn = warn if warn is not None else []
    by_id: dict[tuple, list[Run]] = {}
    for r in runs:
        by_id.setdefault((r.algo, _identity(r)), []).append(r)
    flats = {key: _flat(group[0].config) for key, group in by_id.items()}
    labels = {}
    for key, group in by_id.items():
        seeds = [r.config.get("seed") for r in group]
        dup = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
        if dup:
            warn.append(f"{key[0]}: seed(s) {', '.join(map(str, dup))} appear in more than one run of the same "
                        f"settings ({', '.join(str(r.path) for r in group if r.config.get('seed') in dup)})")
        same_algo = [k for k in by_id if k[0] == key[0]]
        label = key[0]
        if len(same_algo) > 1:  # tell this algorithm's groups apart by what differs between them
            keys = sorted({k for other in same_algo for k in flats[other] if k.split(".")[0] not in IGNORED})
            diff = [k for k in keys if len({repr(flats[o].get(k)) for o in same_algo}) > 1]
            label += " (" + ", ".join(f"{k.removeprefix('algo_params.')}={_fmt(flats[key].get(k))}" for k in diff) + ")"
        labels[key] = label
    shared = [k for k in DATA_DEFINING if any(k in f for f in flats.values())]
    differing = [k for k in shared if len({repr(f.get(k)) for f in flats.values()}) > 1]
    if differing:
        warn.append("the runs differ in data-defining settings, so this is not a like-for-like comparison: "
                    + "; ".join(f"{k}: " + ", ".join(sorted({_fmt(f.get(k)) for f in flats.values()}))
                                for k in differing))
    common = {k: next(iter(flats.values())).get(k) for k in shared if k not in differing}
    return {labels[k]: g for k, g in by_id.items()}, caption(common)


def caption(s: dict) -> str:
    """The data-defining settings as one line: ``digits, cnn, 10 clients (all per round), iid, ...``."""
    parts = [str(s[k]) for k in ("dataset", "model") if s.get(k) is not None]
    if s.get("clients") is not None:
        per = s.get("clients_per_round")
        parts.append(f"{s['clients']} clients ({per if per else 'all'} per round)")
    part = s.get("partition")
    if part == "dirichlet":
        parts.append(f"Dirichlet alpha={_fmt(s.get('alpha'))}")
    elif part == "pathological":
        parts.append(f"{s.get('classes_per_client')} classes per client")
    elif part == "shards":
        parts.append(f"{s.get('shards_per_client')} shards per client")
    elif part is not None:
        parts.append(str(part))
    if s.get("quantity_skew"):
        parts.append(f"quantity skew {_fmt(s['quantity_skew'])}")
    if s.get("local_steps"):
        parts.append(f"{s['local_steps']} local steps")
    elif s.get("local_epochs") is not None:
        parts.append(f"{_fmt(s['local_epochs'])} local epoch(s)")
    if s.get("batch_size") is not None:
        parts.append(f"batch {s['batch_size']}")
    if s.get("cut") is not None:
        parts.append(f"cut {s['cut']}")
    return ", ".join(parts)


def curve(run: Run, metric: str) -> dict[str, np.ndarray]:
    """One run's x values (round, simulated s, MB sent so far) and ``metric`` where it is set."""
    rows = run.rows
    if rows and metric not in rows[0]:
        cols = sorted(k for k, v in rows[0].items() if isinstance(v, (int, float)) and k != "round")
        raise ConfigError(f"{run.path} has no metric '{metric}'; allowed: {', '.join(cols)}")
    sent = np.cumsum([r["bytes_up"] + r["bytes_down"] for r in rows]) / 1e6
    keep = [i for i, r in enumerate(rows) if r[metric] is not None and r[metric] == r[metric]]
    return {"rounds": np.array([rows[i]["round"] for i in keep], dtype=float),
            "sim_time": np.array([rows[i]["sim_time_total_s"] for i in keep], dtype=float),
            "bytes": sent[keep], "y": np.array([rows[i][metric] for i in keep], dtype=float)}


def load_curves(run_dirs: list[Path], metric: str = "test_accuracy") -> dict[str, list[dict[str, np.ndarray]]]:
    """{group label: [per run: {"rounds", "sim_time", "bytes", "y"}]} (warnings to stderr)."""
    warn: list[str] = []
    groups, _ = group_runs(load_runs(run_dirs, warn), warn)
    _print(warn)
    return {label: [curve(r, metric) for r in runs] for label, runs in groups.items()}


def series(cs: list[dict], key: str, band: str = "std") -> dict | None:
    """One group's line against x axis ``key``: the mean over its runs (cut to the shortest),
    the band (``lo``/``hi``: mean ± sample std, or min and max; None for one run or
    ``band="none"``) and the legend's note of what the line and band are."""
    n = min(len(c["y"]) for c in cs)
    if n == 0:
        return None
    x = np.mean([c[key][:n] for c in cs], axis=0)
    y = np.array([c["y"][:n] for c in cs])
    k, mean = len(cs), y.mean(axis=0)
    lo = hi = None
    if k > 1 and band == "std":
        sd = y.std(axis=0, ddof=1)
        lo, hi = mean - sd, mean + sd
    elif k > 1 and band == "minmax":
        lo, hi = y.min(axis=0), y.max(axis=0)
    how = {"std": "mean ± std over ", "minmax": "mean, band min-max over ", "none": "mean over "}[band]
    legend = f"{how}{k} seeds" if k > 1 else "1 seed"
    return {"x": x, "mean": mean, "lo": lo, "hi": hi, "legend": legend}


def _print(warn: list[str]) -> None:
    for w in warn:
        print(f"raysfl: warning: {w}", file=sys.stderr, flush=True)


def parse_size(text: str) -> tuple[float, float]:
    """``--size WxH`` in inches (``3.5x2.6``)."""
    parts = str(text).lower().replace(",", "x").split("x")
    try:
        w, h = (float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"size takes WIDTHxHEIGHT in inches, e.g. 3.5x2.6; got {text!r}") from None
    if not (0 < w <= 50 and 0 < h <= 50):
        raise ConfigError(f"size must be between 0 and 50 inches each way, got {text!r}")
    return w, h


def primary_metric(runs: list[Run]) -> str:
    """The runs' own headline metric: ``test_accuracy`` where any run has one, else ``test_loss``
    (a regression run's accuracy is NaN throughout)."""
    has_accuracy = any(isinstance(v, float) and v == v for r in runs for v in (row.get("test_accuracy")
                                                                                for row in r.rows))
    return "test_accuracy" if has_accuracy else "test_loss"


def plot_runs(run_dirs: list[Path], out_dir: Path, metric: str | None = None, band: str = "std",
              formats=("png", "pdf"), size: tuple[float, float] = SIZE, caption: bool = True,
              legend: str = "best") -> list[Path]:
    """Write ``metric`` (default: the runs' :func:`primary_metric`) against rounds, simulated
    time and bytes into ``out_dir`` in each of ``formats`` (and the caption's text to
    ``caption.txt``); returns the figures' paths."""
    if legend not in LEGENDS:
        raise ConfigError(f"unknown legend placement '{legend}'; allowed: {', '.join(LEGENDS)}")
    if band not in BANDS:
        raise ConfigError(f"unknown band '{band}'; allowed: {', '.join(BANDS)}")
    formats = list(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"unknown format(s) {', '.join(bad) or '(none)'}; allowed: {', '.join(FORMATS)}")
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'raysfl[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")
    with matplotlib.rc_context(PAPER_FONTS):
        return _draw(run_dirs, Path(out_dir), metric, band, formats, size, caption, legend)


def _draw(run_dirs, out_dir: Path, metric: str | None, band: str, formats, size, caption: bool,
          legend: str) -> list[Path]:
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    warn: list[str] = []
    runs = load_runs(run_dirs, warn)
    metric = metric or primary_metric(runs)
    groups, text = group_runs(runs, warn)
    curves = {label: [curve(r, metric) for r in runs] for label, runs in groups.items()}
    if not any(len(c["y"]) for cs in curves.values() for c in cs):
        raise ConfigError(f"no run has a value of '{metric}' in any round (NaN throughout); plot another "
                          f"column with --metric (e.g. test_loss)")
    for label, cs in curves.items():
        lengths = sorted({len(c["y"]) for c in cs})
        if len(lengths) > 1:
            warn.append(f"{label}: its runs have {'/'.join(map(str, lengths))} evaluated rounds; the curve stops "
                        f"at the shortest ({lengths[0]})")
    _print(warn)
    seeds = sorted({len(cs) for cs in curves.values()})
    out_dir.mkdir(parents=True, exist_ok=True)
    seeds_s = f"; {'/'.join(map(str, seeds))} seed(s) per curve" if seeds else ""
    if text:
        (out_dir / "caption.txt").write_text(text + seeds_s + "\n")
    ylabel = metric.replace("_", " ")
    paths = []
    for key, (fname, xlabel) in PLOTS.items():
        fig, ax = plt.subplots(figsize=tuple(size), dpi=120)
        for label, cs in curves.items():
            s = series(cs, key, band)
            if s is None:
                continue
            (line,) = ax.plot(s["x"], s["mean"], label=f"{label} ({s['legend']})")
            if s["lo"] is not None:
                ax.fill_between(s["x"], s["lo"], s["hi"], color=line.get_color(), alpha=0.2, linewidth=0)
        if key == "rounds":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        outside = legend == "outside"
        if legend != "none":
            if outside:
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)
            else:
                ax.legend(fontsize=8, loc=legend)
        if text and caption:
            fig.text(0.5, 0.01, text + seeds_s, ha="center", va="bottom", fontsize=7, color="0.3", wrap=True)
            fig.tight_layout(rect=(0, 0.05, 1, 1))
        else:
            fig.tight_layout()
        stem = Path(fname).stem if metric == "test_accuracy" else f"{metric}_vs_{key}"
        for ext in formats:
            path = out_dir / f"{stem}.{ext}"
            fig.savefig(path, bbox_inches="tight" if outside else None)
            paths.append(path)
        plt.close(fig)
    return paths
