"""Figures for papers (``raysfl plot`` and ``compare``'s figures) from run directories made here:
grouping by (algorithm, settings), warnings, the band, the caption, the formats, any metric."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raysfl
from raysfl.errors import ConfigError
from raysfl.plots import caption, group_runs, load_runs, plot_runs, series

pytest.importorskip("matplotlib", reason="plots need the plot extra (pip install 'raysfl[plot]')")


def fake_run(root, name, acc, **settings):
    """A run directory with config.json (as a run writes it) and metrics.parquet."""
    d = root / name
    d.mkdir(parents=True)
    cfg = raysfl.config_from_kwargs(**{"clients": 4, "progress": False, **settings})
    from raysfl.resolve import validate

    (d / "config.json").write_text(json.dumps(validate(cfg).to_dict()))
    rows = [{"round": r, "test_accuracy": a, "train_loss": 1.0 / r, "bytes_up": 1_000_000, "bytes_down": 500_000,
             "sim_time_total_s": 2.0 * r} for r, a in enumerate(acc, 1)]
    pq.write_table(pa.Table.from_pylist(rows), d / "metrics.parquet")
    return d


def test_runs_group_by_algorithm_and_settings_with_a_caption(tmp_path):
    dirs = [fake_run(tmp_path, f"sfl-s{s}", [0.3, 0.5, 0.6], algo="splitfed_v2", seed=s, lr=0.05) for s in (0, 1)]
    dirs += [fake_run(tmp_path, f"sfl-fast-s{s}", [0.4, 0.6, 0.7], algo="splitfed_v2", seed=s, lr=0.1)
             for s in (0, 1)]
    dirs += [fake_run(tmp_path, "psl-s0", [0.2, 0.4, 0.5], algo="psl", seed=0)]
    warn = []
    groups, text = group_runs(load_runs(dirs, warn), warn)
    assert {k: len(v) for k, v in groups.items()} == {"splitfed_v2 (lr=0.05)": 2, "splitfed_v2 (lr=0.1)": 2, "psl": 1}
    assert warn == []
    assert text == "digits, cnn, 4 clients (all per round), iid, 1 local epoch(s), batch 32, cut 2"


def test_mismatches_are_warned(tmp_path, capsys):
    a = fake_run(tmp_path, "a", [0.3, 0.5, 0.6], algo="psl", seed=0)
    b = fake_run(tmp_path, "b", [0.3, 0.5], algo="psl", seed=1)           # shorter
    c = fake_run(tmp_path, "c", [0.3, 0.4, 0.5], algo="psl", seed=1)      # seed 1 twice
    d = fake_run(tmp_path, "d", [0.3, 0.4, 0.5], algo="fedavg", clients=6)  # other data
    paths = plot_runs([a, a, b, c, d], tmp_path / "fig", formats=["png"])
    err = capsys.readouterr().err
    assert f"{a} is given twice; plotted once" in err
    assert "psl: seed(s) 1 appear in more than one run of the same settings" in err
    assert "psl: its runs have 2/3 evaluated rounds; the curve stops at the shortest (2)" in err
    assert "not a like-for-like comparison: clients: 4, 6" in err
    assert [p.name for p in paths] == ["accuracy_vs_rounds.png", "accuracy_vs_sim_time.png",
                                       "accuracy_vs_bytes.png"]


def test_band_is_std_by_default_and_min_max_on_request():
    cs = [{"rounds": np.array([1.0, 2.0]), "y": np.array([0.2, 0.4])},
          {"rounds": np.array([1.0, 2.0]), "y": np.array([0.4, 0.8])},
          {"rounds": np.array([1.0, 2.0]), "y": np.array([0.6, 0.6])}]
    s = series(cs, "rounds")
    assert s["mean"] == pytest.approx([0.4, 0.6]) and s["hi"] - s["mean"] == pytest.approx([0.2, 0.2])
    assert s["legend"] == "mean ± std over 3 seeds"
    m = series(cs, "rounds", "minmax")
    assert (m["lo"].tolist(), m["hi"].tolist()) == ([0.2, 0.4], [0.6, 0.8])
    assert m["legend"] == "mean, band min-max over 3 seeds"
    assert series(cs[:1], "rounds")["lo"] is None and series(cs[:1], "rounds")["legend"] == "1 seed"


def test_png_and_pdf_of_any_metric_and_bad_options(tmp_path):
    from raysfl.cli import main

    runs = [fake_run(tmp_path, f"r{s}", [0.3, 0.5, 0.6], algo="psl", seed=s) for s in (0, 1)]
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "f"), "--metric", "train_loss",
                 "--band", "minmax"]) == 0
    files = sorted(p.name for p in (tmp_path / "f").iterdir())
    assert files == sorted([f"train_loss_vs_{k}.{e}" for k in ("rounds", "sim_time", "bytes") for e in ("png", "pdf")]
                           + ["caption.txt"])
    assert (tmp_path / "f" / "train_loss_vs_rounds.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ConfigError, match="has no metric 'nope'; allowed: .*test_accuracy"):
        plot_runs(runs, tmp_path / "g", metric="nope")
    with pytest.raises(ConfigError, match="unknown format"):
        plot_runs(runs, tmp_path / "g", formats=["gif"])
    assert caption({"dataset": "mnist5k", "clients": 20, "clients_per_round": 5, "partition": "dirichlet",
                    "alpha": 0.1, "local_steps": 4}) == ("mnist5k, 20 clients (5 per round), Dirichlet alpha=0.1, "
                                                          "4 local steps")


def test_figures_are_paper_ready_truetype_size_caption_legend(tmp_path):
    import matplotlib.image

    dirs = [fake_run(tmp_path, f"r{s}", [0.3, 0.5, 0.6], algo="psl", seed=s) for s in (0, 1)]
    dirs += [fake_run(tmp_path, "f0", [0.4, 0.6, 0.7], algo="fedavg", seed=0)]
    paths = plot_runs(dirs, tmp_path / "a", metric="train_loss", size=(3.5, 2.6), caption=False, legend="outside")
    pdfs = [p for p in paths if p.suffix == ".pdf"]
    assert len(pdfs) == 3
    for pdf in pdfs:  # IEEE PDF eXpress refuses Type 3 fonts: the text is in embedded TrueType
        data = pdf.read_bytes()
        assert b"/Type3" not in data and (b"/TrueType" in data or b"/CIDFontType2" in data), pdf
    # the caption's text for the paper, with or without the grey caption in the figure
    assert (tmp_path / "a" / "caption.txt").read_text().startswith("digits, cnn, 4 clients")
    # the size in inches (120 dpi)
    inside = plot_runs(dirs, tmp_path / "b", metric="train_loss", size=(3.5, 2.6), formats=["png"])
    h, w = matplotlib.image.imread(str(inside[0])).shape[:2]
    assert (w, h) == (420, 312)
    with pytest.raises(ConfigError, match="unknown legend placement 'top'; allowed: best, outside, none"):
        plot_runs(dirs, tmp_path / "c", legend="top")


def test_plot_cli_options_and_results_md_states_the_shared_settings(tmp_path, capsys):
    from raysfl.cli import main
    from raysfl.compare import results_markdown, shared_settings

    dirs = [fake_run(tmp_path, f"r{s}", [0.3, 0.5, 0.6], algo="psl", seed=s) for s in (0, 1)]
    assert main(["plot", *map(str, dirs), "--out", str(tmp_path / "p"), "--size", "3.5x2.6", "--no-caption",
                 "--legend", "lower right", "--formats", "pdf"]) == 0
    assert len(list((tmp_path / "p").glob("*.pdf"))) == 3
    assert main(["plot", str(dirs[0]), "--size", "big"]) == 2
    assert "size takes WIDTHxHEIGHT in inches, e.g. 3.5x2.6; got 'big'" in capsys.readouterr().err
    shared = shared_settings(dirs)
    assert shared.startswith("digits, cnn, 4 clients")
    assert f"Shared settings (as the figures' caption): {shared}." in results_markdown([], 0.8, shared)


def test_plot_defaults_to_the_test_loss_for_runs_without_an_accuracy(tmp_path, capsys):
    """Issue 46: `raysfl plot` of regression runs (test_accuracy NaN throughout) draws their test
    loss; a metric with no value in any run is one line, not empty axes and exit 0."""
    from raysfl.cli import main

    nan = float("nan")
    runs = []
    for s in (0, 1):
        d = fake_run(tmp_path, f"r{s}", [nan, nan, nan], algo="splitfed_v2", seed=s)
        rows = pq.read_table(d / "metrics.parquet").to_pylist()
        pq.write_table(pa.Table.from_pylist([{**r, "test_loss": 1.0 / r["round"]} for r in rows]),
                       d / "metrics.parquet")
        runs.append(d)
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "f"), "--formats", "png"]) == 0
    assert sorted(p.name for p in (tmp_path / "f").glob("*.png")) == [
        f"test_loss_vs_{k}.png" for k in ("bytes", "rounds", "sim_time")]
    assert main(["plot", *map(str, runs), "--out", str(tmp_path / "g"), "--metric", "test_accuracy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("no run has a value of 'test_accuracy' in any round (NaN throughout); plot another "
                            "column with --metric (e.g. test_loss)")
    classified = fake_run(tmp_path, "c", [0.3, 0.5], algo="psl")
    assert main(["plot", str(classified), "--out", str(tmp_path / "h"), "--formats", "png"]) == 0
    assert (tmp_path / "h" / "accuracy_vs_rounds.png").exists()
