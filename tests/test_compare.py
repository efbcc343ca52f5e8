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


@pytest.fixture
def sigterm_raises():
    """SIGTERM raises KeyboardInterrupt here (a handler raysfl's may replace) instead of ending
    the test process, should a compare not take it over."""
    import signal

    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    yield
    signal.signal(signal.SIGTERM, before)


def _rows(path: Path) -> int:
    """Rows of a metrics file another thread is replacing (0 until it is there): pyarrow opens a
    path more than once, so a read that straddles an os.replace sees half of each and is retried."""
    try:
        return len(pq.read_table(path)) if path.exists() else 0
    except OSError:  # pyarrow.ArrowInvalid is one
        return 0


def _fake_runs(monkeypatch, calls: list, interrupt: str | None = None, after: str | None = None):
    """``raysfl.api.run`` as a stand-in that writes what a run writes (config.json, a metrics row
    and a checkpoint file per round; a resume goes on from the rows there), stops after a round
    where a callback asks to, and, in run ``interrupt``, sends this process a SIGTERM after round
    1 (once run ``after`` finished) inside interrupts.handling, as a real run is interrupted; no
    Ray, no plots."""
    import os
    import signal
    import time
    from pathlib import Path
    from types import SimpleNamespace

    import pyarrow as pa

    from raysfl.runtime import interrupts

    def run(cfg, callbacks=None):
        calls.append((cfg.name, cfg.resume))
        d = Path(cfg.resume or Path(cfg.out) / cfg.name)
        d.mkdir(parents=True, exist_ok=cfg.resume is not None)
        (d / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
        rows = pq.read_table(d / "metrics.parquet").to_pylist() if cfg.resume else []
        with interrupts.handling():
            for rnd in range(len(rows) + 1, cfg.rounds + 1):
                rows.append({"round": rnd, "test_accuracy": 0.1 * rnd + 0.01 * cfg.seed, "bytes_up": 1e6,
                             "bytes_down": 1e6, "sim_time_total_s": float(rnd), "participants": 3, "fallbacks": 0,
                             "failures": 0})
                pq.write_table(pa.Table.from_pylist(rows), d / "metrics.tmp")
                os.replace(d / "metrics.tmp", d / "metrics.parquet")  # atomically, as the run's logger does
                (d / "checkpoints").mkdir(exist_ok=True)
                (d / "checkpoints" / f"round_{rnd:04d}.pt").write_bytes(b"")
                if cfg.name == interrupt and rnd == 1:
                    done = Path(cfg.out) / str(after) / "metrics.parquet"
                    while after and _rows(done) < cfg.rounds:
                        time.sleep(0.05)
                    os.kill(os.getpid(), signal.SIGTERM)
                    for _ in range(200):  # in the main thread the handler raises Interrupted here
                        if any(cb(rows[-1]) for cb in callbacks or []):
                            break
                        time.sleep(0.05)
                if any(cb(rows[-1]) for cb in callbacks or []):
                    break
        return SimpleNamespace(run_dir=d)

    monkeypatch.setattr("raysfl.api.run", run)
    monkeypatch.setattr("raysfl.plots.plot_runs", lambda dirs, out: [])
    monkeypatch.setattr("raysfl.compare.start_local_ray", lambda configs, at_once: False)
    monkeypatch.setattr("ray.cluster_resources", lambda: {"CPU": 4.0})


def test_interrupted_compare_continues_with_its_finished_runs_reused(tmp_path, monkeypatch, capsys,
                                                                      sigterm_raises):
    """SIGTERM in the second run of a comparison: exit 143, one line naming what finished and the
    command that continues it, the finished run's table marked partial; that command then reuses
    the finished run (not run again, its files untouched), continues the other from its
    checkpoint and writes the whole table. A comparison an older raysfl left (no compare.json)
    is taken back the same way."""
    import os

    from raysfl.cli import main

    out = tmp_path / "cmp"
    argv = ["compare", "--algos", "splitfed_v2", "--seeds", "2", "--clients", "3", "--rounds", "2", "--parallel", "1",
            "--out", str(out)]
    calls: list = []
    _fake_runs(monkeypatch, calls, interrupt="splitfed_v2-s1")
    assert main(argv) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"raysfl: interrupted (SIGTERM); 1 of 2 runs finished (their table, marked partial: "
                   f"{out / 'results.md'}); continue with: raysfl {' '.join(argv)}"]
    md = (out / "results.md").read_text()
    assert md.startswith("**Partial**") and "still to run: splitfed_v2-s1" in md and "| splitfed_v2 | 1 |" in md
    first = out / "runs" / "splitfed_v2-s0"
    stamps = {f: f.stat().st_mtime_ns for f in first.rglob("*")}
    calls.clear()
    _fake_runs(monkeypatch, calls)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "1 of 2 runs finished before (reused), 1 continue from their checkpoints" in text
    assert "seed 0: reused (finished before)" in text and "seed 1: continued from its checkpoint of round 1" in text
    assert calls == [("splitfed_v2-s1", str(out / "runs" / "splitfed_v2-s1"))]  # s0 not run again
    assert {f: f.stat().st_mtime_ns for f in first.rglob("*")} == stamps
    rest = pq.read_table(out / "runs" / "splitfed_v2-s1" / "metrics.parquet").to_pylist()
    assert [r["round"] for r in rest] == [1, 2]
    md = (out / "results.md").read_text()
    assert "Partial" not in md and "| splitfed_v2 | 2 |" in md
    # what today's raysfl left before compare.json existed: the run directories alone
    os.remove(out / "compare.json")
    calls.clear()
    assert main(argv) == 0 and calls == []
    assert "2 of 2 runs finished before (reused)" in capsys.readouterr().out


def test_another_comparison_into_the_same_out_is_refused_with_one_line(tmp_path, monkeypatch, capsys):
    """Other settings, other seeds or algorithms, or a run directory of other settings, into an
    --out that holds a comparison: refused before anything runs, one line naming the difference;
    a different --target is the same comparison (the table is written again at that target)."""
    from raysfl.cli import main

    out = tmp_path / "cmp"
    base = ["compare", "--algos", "splitfed_v2", "--seeds", "1", "--clients", "3", "--rounds", "2", "--out", str(out)]
    calls: list = []
    _fake_runs(monkeypatch, calls)
    assert main(base) == 0 and len(calls) == 1
    capsys.readouterr()
    md = (out / "results.md").read_text()
    fix = "give compare a new --out, or repeat that comparison's own command to finish it"
    for extra, why in ((["--rounds", "3"], "run splitfed_v2-s0: rounds 2 there, 3 here"),
                       (["--seeds", "2"], "its runs: splitfed_v2-s0; this one's: splitfed_v2-s0, splitfed_v2-s1"),
                       (["--algos", "splitfed_v2,psl"], "its runs: splitfed_v2-s0; this one's: psl-s0, splitfed_v2-s0"),
                       (["--lr", "0.5"], "run splitfed_v2-s0: lr")):
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"raysfl: error: {out} holds another comparison ({why}"), err
        assert err[0].endswith(fix)
    assert len(calls) == 1 and (out / "results.md").read_text() == md
    assert main(base + ["--target", "0.5"]) == 0 and len(calls) == 1
    assert "reached 50%" in (out / "results.md").read_text()
    # without compare.json (an older raysfl's), the run directories' own configs are checked
    (out / "compare.json").unlink()
    assert main(base + ["--rounds", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"raysfl: error: {out / 'runs' / 'splitfed_v2-s0'} was made with other settings (rounds 2 there, "
                   f"3 here); {fix}"]


def test_interrupted_parallel_compare_stops_its_runs_after_their_round(tmp_path, monkeypatch, capsys,
                                                                        sigterm_raises):
    """Runs in threads (--parallel 2) cannot take a signal: on SIGTERM they stop after their round
    in flight (checkpointed), the finished one's table is written, exit 143; the same command
    continues the stopped run from its checkpoint."""
    from raysfl.cli import main

    out = tmp_path / "cmp"
    argv = ["compare", "--algos", "splitfed_v2", "--seeds", "2", "--clients", "3", "--rounds", "2", "--parallel", "2",
            "--out", str(out)]
    calls: list = []
    _fake_runs(monkeypatch, calls, interrupt="splitfed_v2-s1", after="splitfed_v2-s0")
    assert main(argv) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("raysfl: interrupted (SIGTERM); 1 of 2 runs finished"), err
    assert [r["round"] for r in pq.read_table(out / "runs" / "splitfed_v2-s1" / "metrics.parquet").to_pylist()] == [1]
    calls.clear()
    _fake_runs(monkeypatch, calls)
    assert main(argv) == 0
    assert calls == [("splitfed_v2-s1", str(out / "runs" / "splitfed_v2-s1"))]
    assert "| splitfed_v2 | 2 |" in (out / "results.md").read_text()
