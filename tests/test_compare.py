"""``raysfl compare`` and ``raysfl plot``: identical data for every algorithm, a results table
that matches the runs' own Parquet files, and the PNGs."""

from __future__ import annotations

import json
import statistics

import pyarrow.parquet as pq
import pytest

from raysfl.errors import ConfigError


@pytest.mark.slow
def test_compare_two_algorithms_writes_a_table_matching_the_runs_and_every_png(tmp_path, ray_session):
    from raysfl.compare import compare, comparison_configs
    from raysfl.plots import PLOTS

    out = tmp_path / "cmp"
    settings = {"clients": 4, "rounds": 2, "local_steps": 2, "batch_size": 16, "partition": "dirichlet",
                "alpha": 0.3, "progress": False, "resources": {"client_actors": 2}}
    configs = comparison_configs(["splitfed_v2", "gapsl"], settings, 2, out)
    # gapsl's own config_defaults (Dirichlet 0.1, 10 clients) do not leak into a comparison
    assert {(c.partition, c.alpha, c.clients, c.rounds) for c in configs} == {("dirichlet", 0.3, 4, 2)}
    assert [(c.algo, c.seed) for c in configs] == [("splitfed_v2", 0), ("splitfed_v2", 1), ("gapsl", 0),
                                                    ("gapsl", 1)]
    rows = compare(configs, out, target=0.2)
    for fname, _ in PLOTS.values():
        assert (out / fname).stat().st_size > 1000
    table = pq.read_table(out / "results.parquet").to_pylist()
    assert [r["algo"] for r in table] == ["splitfed_v2", "gapsl"] == [r["algo"] for r in rows]
    md = (out / "results.md").read_text()
    for r in table:
        runs = [out / "runs" / f"{r['algo']}-s{s}" for s in (0, 1)]
        metrics = [pq.read_table(d / "metrics.parquet").to_pylist() for d in runs]
        finals = [m[-1]["test_accuracy"] for m in metrics]
        assert r["final_accuracy_mean"] == pytest.approx(statistics.mean(finals))
        assert r["final_accuracy_std"] == pytest.approx(statistics.stdev(finals))
        assert r["total_bytes"] == pytest.approx(statistics.mean(sum(x["bytes_up"] + x["bytes_down"] for x in m)
                                                                 for m in metrics))
        hits = [next((x["round"] for x in m if x["test_accuracy"] >= 0.2), None) for m in metrics]
        assert r["reached_target"] == sum(h is not None for h in hits)
        assert f"| {r['algo']} | 2 | 4.0 | {r['final_accuracy_mean']:.4f} ± {r['final_accuracy_std']:.4f} |" in md
        # identical data: the same seed gives both algorithms the same clients and partition
        for s in (0, 1):
            a = json.loads((out / "runs" / f"splitfed_v2-s{s}" / "clients.json").read_text())
            b = json.loads((out / "runs" / f"gapsl-s{s}" / "clients.json").read_text())
            assert [c["label_histogram"] for c in a] == [c["label_histogram"] for c in b]
    # raysfl plot: the same PNGs from existing run directories
    from raysfl.cli import main

    assert main(["plot", *map(str, sorted((out / "runs").iterdir())), "--out", str(tmp_path / "plots")]) == 0
    assert all((tmp_path / "plots" / fname).exists() for fname, _ in PLOTS.values())


@pytest.mark.slow
def test_parallel_compare_gives_the_same_runs_as_one_at_a_time(tmp_path, ray_session):
    """Two runs at once on the session's 4 CPUs (each asks for 1.25): the same tables as
    running them one after another; only the timing columns may differ."""
    from raysfl.compare import compare, comparison_configs
    from raysfl.metrics import TIMING_COLUMNS

    settings = {"clients": 4, "rounds": 2, "local_steps": 2, "batch_size": 16, "progress": False,
                "resources": {"client_actors": 2, "client_cpus": 0.25, "server_cpus": 0.5, "fed_cpus": 0.25}}
    tables = []
    for parallel in (1, 2):
        out = tmp_path / f"p{parallel}"
        compare(comparison_configs(["splitfed_v2", "psl"], settings, 1, out), out, target=0.2, parallel=parallel)
        runs = sorted((out / "runs").iterdir())
        tables.append([[{k: v for k, v in r.items() if k not in TIMING_COLUMNS}
                        for r in pq.read_table(d / "metrics.parquet").to_pylist()] for d in runs])
        assert [d.name for d in runs] == ["psl-s0", "splitfed_v2-s0"]
    assert tables[0] == tables[1]


def test_runs_at_once_fills_the_cluster_and_refuses_bad_values():
    from raysfl.compare import comparison_configs
    from raysfl.runtime.many_runs import run_demand, runs_at_once

    configs = comparison_configs(["splitfed_v2", "psl", "fedavg"], {}, 2, __import__("pathlib").Path("unused"))
    need = max(run_demand(c)[0] for c in configs)
    assert need == 2.5  # 2 client actors x 0.5 + 1 server + 0.5 fed server
    assert runs_at_once(configs, cpus=2, gpus=0) == 1  # never fewer than one
    assert runs_at_once(configs, cpus=10, gpus=0) == 4
    assert runs_at_once(configs, cpus=1000, gpus=0) == 6  # at most one per run
    assert runs_at_once(configs, cpus=2, gpus=0, requested=3) == 3
    with pytest.raises(ConfigError, match="--parallel must be >= 1, got 0"):
        runs_at_once(configs, cpus=8, gpus=0, requested=0)


def test_compare_and_plot_refuse_bad_input(tmp_path, capsys):
    from raysfl.cli import main
    from raysfl.compare import comparison_configs

    with pytest.raises(ConfigError, match="unknown algorithm 'nope'"):
        comparison_configs(["psl", "nope"], {}, 1, tmp_path)
    with pytest.raises(ConfigError, match="--algos lists an algorithm twice: psl,psl"):
        comparison_configs(["psl", "psl"], {}, 1, tmp_path)
    with pytest.raises(ConfigError, match="--seeds must be >= 1, got 0"):
        comparison_configs(["psl"], {}, 0, tmp_path)
    assert main(["plot", str(tmp_path)]) == 2
    assert "is not a run directory (no metrics.parquet)" in capsys.readouterr().err


def test_a_comparison_runs_in_the_first_algorithms_paper_setting(tmp_path):
    """``--algos gapsl,psl``: GAPSL's data setting for both, and GAPSL's learning settings for
    the baseline that has none of its own; another paper's algorithm keeps its own learning
    settings; what the user gives wins; a baseline first gives raysfl's defaults."""
    from raysfl.algorithms import ALGORITHMS
    from raysfl.compare import comparison_configs
    from raysfl.config import RUN_DEFAULTS

    paper = ALGORITHMS["gapsl"].config_defaults
    gapsl, psl, pairing = comparison_configs(["gapsl", "psl", "fed_pairing"], {}, 1, tmp_path)
    for c in (gapsl, psl, pairing):
        assert (c.clients, c.partition, c.alpha, c.cut) == (paper["clients"], paper["partition"], paper["alpha"],
                                                           paper["cut"])
    assert (psl.lr, psl.server_lr, psl.momentum) == (paper["lr"], paper["server_lr"], paper["momentum"])
    assert (pairing.lr, pairing.momentum) == (ALGORITHMS["fed_pairing"].config_defaults["lr"],
                                              ALGORITHMS["fed_pairing"].config_defaults["momentum"])
    _, psl = comparison_configs(["gapsl", "psl"], {"alpha": 0.5, "lr": 0.02}, 1, tmp_path)
    assert (psl.alpha, psl.lr, psl.server_lr) == (0.5, 0.02, paper["server_lr"])
    psl, gapsl = comparison_configs(["psl", "gapsl"], {}, 1, tmp_path)
    assert {(c.partition, c.cut) for c in (psl, gapsl)} == {(RUN_DEFAULTS["partition"], RUN_DEFAULTS["cut"])}
    assert (psl.lr, gapsl.lr) == (RUN_DEFAULTS["lr"], paper["lr"])
