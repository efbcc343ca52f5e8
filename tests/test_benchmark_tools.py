"""The plumbing the performance benchmarks share: tables written into docs/performance.md,
and the py-spy profile summary; and the run cache of the paper tables (raysfl reproduce)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_update_section_replaces_its_own_table_and_appends_a_new_one(tmp_path):
    from sweep import update_section

    doc = tmp_path / "performance.md"
    doc.write_text("# P\n\nintro\n\n<!-- table:a -->\nold a\n<!-- /table:a -->\n\nbetween\n")
    update_section(doc, "a", "new a\n")
    update_section(doc, "b", "first b\n")
    update_section(doc, "b", "second b\n")
    text = doc.read_text()
    assert "old a" not in text and "first b" not in text
    assert text.index("intro") < text.index("new a") < text.index("between") < text.index("second b")
    assert text.count("<!-- table:b -->") == 1


def test_profile_summary_splits_each_process_by_where_its_time_went(tmp_path):
    from profile_round import summarise

    drv = 'process 1:"python -m raysfl run --algo psl"'
    act = 'process 1:"python -m raysfl run";process 7:"ray::ClientActor.exchange"'
    raw = tmp_path / "samples.txt"
    raw.write_text("\n".join([
        f"{act};main_loop (x);exchange (raysfl/runtime/client_actor.py:10);forward (torch/nn/modules/conv.py:5) 300",
        f"{act};main_loop (x);exchange (raysfl/runtime/client_actor.py:10);step (torch/optim/sgd.py:9) 100",
        f"{act};main_loop (x);exchange (raysfl/runtime/client_actor.py:10);fetch (raysfl/runtime/refs.py:3) 50",
        f"{act};Worker.main_loop (ray/_private/worker.py:1069) 900",  # idle: not counted
        f"{drv};_one_round (raysfl/api.py:1);wait (ray/_private/worker.py:3) 25",
    ]) + "\n")
    rows = summarise(raw, seconds=2.0, rate=100, top=5)
    by = {(r["process"], r["category"]): r["core_pct"] for r in rows}
    assert by[("ray::ClientActor", "(all)")] == pytest.approx(225.0)  # 450 samples / 100 Hz / 2 s
    assert by[("ray::ClientActor", "torch forward/backward")] == pytest.approx(150.0)
    assert by[("ray::ClientActor", "optimizer step")] == pytest.approx(50.0)
    assert by[("ray::ClientActor", "raysfl: fetch")] == pytest.approx(25.0)
    assert by[("driver", "raysfl: _one_round")] == pytest.approx(12.5)


def test_the_reproduce_cache_keys_on_the_resolved_configuration_not_on_the_settings_given():
    """A run cached as "the defaults" must not be read back after a default changed, and the
    same run asked for with its defaults spelled out must be found. (The paper tables' cache,
    raysfl/reproduce/engine.py, which replaced the benchmarks' own.)"""
    import raysfl
    from raysfl.run_key import cache_key as key_of
    from raysfl.resolve import validate

    def cache_key(settings):
        return key_of(validate(raysfl.config_from_kwargs(**settings)))

    base = dict(algo="besplit", dataset="digits", rounds=3, seed=0, alpha=0.1)
    assert cache_key(base) == cache_key({**base, "besplit": {"ea_sides": "both"}})  # the default, spelled out
    assert cache_key(base) != cache_key({**base, "besplit": {"ea_sides": "server"}})
    assert cache_key(base) == cache_key({**base, "out": "elsewhere", "progress": False, "name": "x"})
    assert cache_key(base) != cache_key({**base, "seed": 1})
    # the algorithm's paper setting is part of the key: BESplit's local test split is 0.2 unless asked
    assert cache_key(base) == cache_key({**base, "local_test_fraction": 0.2})
    assert cache_key(base) != cache_key({**base, "local_test_fraction": 0.1})


@pytest.mark.slow
def test_same_results_set_reaches_this_checkouts_runs_with_base():
    """``--set`` with ``--base`` changes what this checkout runs: the processed weights of issue 34
    move fedavg's round-1 test loss, so HEAD against itself with the setting is not identical."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    args = [sys.executable, str(root / "scripts" / "same_results.py"), "--base", "HEAD", "--cases", "fedavg"]
    changed = subprocess.run(args + ["--set", "aggregation_weights=processed"], capture_output=True, text=True,
                             cwd=root, timeout=600)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "DIFFERENT" in changed.stdout and "test_loss" in changed.stdout, changed.stdout


def test_tuning_margins_compares_the_choice_with_the_best_other_setting_run_to_the_end_per_seed():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from tuning_margins import margin

    def trial(lr, values, complete=True):
        return {"knobs": {"lr": lr}, "score": sum(values) / len(values), "values": values,
                "complete": complete, "error": None}

    tuning = {"row": "r", "chosen": {"lr": 0.1},
              "table": [trial(0.1, [0.90, 0.80]), trial(0.03, [0.88, 0.81]), trial(0.3, [0.99, 0.99], complete=False)]}
    m = margin(tuning)
    assert m["runner_up"] == {"lr": 0.03}  # the early-stopped 0.3 is not compared
    assert m["gap"] == pytest.approx(0.005) and m["per_seed"] == pytest.approx([0.02, -0.01])
    assert m["seeds_disagree"]
    # rounds to a target: lower is better, read from the choice
    rounds = {"row": "r", "chosen": {"lr": 0.1}, "table": [trial(0.1, [3, 4]), trial(0.03, [5, 6])]}
    assert margin(rounds)["per_seed"] == [2, 2] and not margin(rounds)["seeds_disagree"]
    assert margin({"row": "r", "chosen": {"lr": 0.1}, "table": [trial(0.1, [0.9, 0.9])]}) is None


def test_metrics_writer_benchmark_writes_the_same_files_and_hashes_both_ways():
    """benchmarks/metrics_writer.py replays a run's writes and checkpoint hashes both ways and fails
    if the files or the hashes differ."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "metrics_writer.py"), "--clients", "3",
                          "--rounds", "7", "--write-every", "2"], capture_output=True, text=True, cwd=root, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "21 client rows, 4 writes; the same file both ways: yes" in out.stdout, out.stdout
    assert "7 metrics rows; the same hashes both ways: yes" in out.stdout, out.stdout
    bad = subprocess.run([sys.executable, str(root / "benchmarks" / "metrics_writer.py"), "--rounds", "0"],
                         capture_output=True, text=True, cwd=root, timeout=120)
    assert bad.returncode == 2 and "--rounds must be >= 1, got 0" in bad.stderr, bad.stderr


def test_channels_last_benchmark_compares_the_same_logits_and_leaves_the_hook_in_place():
    """benchmarks/channels_last.py times an evaluation pass with the pools' hooks and without
    (the weights laid out the same): both give the same logits, and the hook it swaps out for
    the pass without is raysfl's again after it."""
    import channels_last

    from raysfl import evaluation

    hook = evaluation._pool_channels_last
    rows = channels_last.evaluation_passes([4], repeats=1)
    assert evaluation._pool_channels_last is hook
    assert len(rows) == len(channels_last.PASSES) and all(r["same"] for r in rows)
    assert all(r["ms_channels_last"] > 0 and r["ms_as_they_come"] > 0 for r in rows)


def test_driver_phases_name_functions_the_runtime_has():
    """Every phase benchmarks/driver_phases.py (and round_anatomy.py through it) wraps names a
    function the runtime still has: a function moved to another module fails here, not in the
    benchmark's run (``rounds.plan_round`` moved to ``round_plan`` did)."""
    import importlib

    from driver_phases import PHASES

    missing = [f"{module}.{owner + '.' if owner else ''}{name}" for module, owner, name in PHASES
               if not callable(getattr(getattr(importlib.import_module(module), owner) if owner
                                       else importlib.import_module(module), name, None))]
    assert missing == []


@pytest.mark.parametrize("ahead", [0.0, 0.015], ids=["in_its_turn", "run_ahead"])
def test_round_anatomy_splits_a_round_into_head_steps_end_and_tail_and_each_call_into_work_and_waiting(ahead):
    """``ahead``: each round submitted that much before the driver's turn to it, behind the
    round before's aggregation (``--run-ahead``): its calls still count as its own."""
    from round_anatomy import anatomy

    spans, marks = [], []
    for r in range(5):  # rounds of 100 ms: the measured ones are rounds 2 and 3 (skip 2, not the last)
        t = r * 0.1
        marks += [("rounds.run_round", t, t + 0.1), ("Federation.submit_round", t - ahead, t - ahead + 0.003),
                  ("Federation.collect_round", t + 0.003, t + 0.08),
                  ("federation.ping_all", t + 0.077, t + 0.079), ("Federation.aggregate", t + 0.081, t + 0.09),
                  ("rounds.finish_row", t + 0.095, t + 0.096)]
        c = t - ahead  # the round's calls
        for actor in range(2):
            spans.append(("ClientActor.begin_round", c + 0.005, c + 0.007, 0.0, 0.002))
            for s in range(3):  # three steps of 15 ms, 4 ms of each waiting for the server
                s0 = c + 0.010 + s * 0.015
                spans.append(("ClientActor.step", s0, s0 + 0.015, 0.004, 0.010))
            spans.append(("ClientActor.end_round", c + 0.055, c + 0.075, 0.005, 0.012))
        spans.append(("ServerActor.step", c + 0.011, c + 0.021, 0.007, 0.003))
        spans.append(("FedActor.evaluate", c + 0.020, c + 0.060, 0.0, 0.030))  # the round before's, overlapped
    parts = anatomy(spans, marks)
    expect = {"round (driver)": 100, "head": 10, "steps": 45, "end of the round": 25 + ahead * 1000, "driver's tail": 20,
              "step calls per client actor": 3, "client step: own work": 11, "client step: waiting for the server": 4,
              "client step: thread CPU of the call": 10, "server step: own work": 3,
              "server step: waiting for the smashed data": 7, "client begin_round": 2,
              "client end_round: own work": 15, "client end_round: waiting": 5, "of which the closing ping": 2,
              "of which Federation.aggregate": 9, "of which Federation.snapshot_at": 0,
              "of which Federation.confirm_snapshot": 0, "of which rounds.finish_row": 1,
              "fed server evaluate: own work": 40, "fed server evaluate: waiting": 0, "fed server evaluate: thread CPU": 30,
              "last step to the next round's first": 55}
    assert parts == pytest.approx(expect, abs=1e-6)
