"""Adding an algorithm: the worked example of docs/architecture.md runs as written, through the
command line with ``--plugin``, and the registry refuses what would make a flag mean two things."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import raysfl
from raysfl.algorithms import ALGORITHMS, register
from raysfl.algorithms.roles import (Aggregator, ClientSide, OwnModels, PerClientServer, Planner, ServerSide,
                                     SplitExchange)
from raysfl.algorithms.spec import Algorithm
from raysfl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def worked_example(into: Path) -> Path:
    """The files of docs/architecture.md's worked example (the ```python blocks whose first line
    names a file of the package), written under ``into``."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    files = {}
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        first = block.splitlines()[0]
        if first.startswith("# sfl_prox/"):
            files[first[2:].strip()] = block
    assert set(files) == {"sfl_prox/__init__.py", "sfl_prox/algorithm.py"}, sorted(files)
    for name, code in files.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_text(code)
    return into


def _cli(args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "raysfl", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)


def test_the_worked_example_is_declared_through_the_cli(tmp_path):
    """Its own package and the registry line in it, nothing else: listed, its knob in the help,
    refused on a bad value before Ray starts, and unknown without ``--plugin``."""
    worked_example(tmp_path)
    listed = _cli(["list", "--plugin", "sfl_prox"], tmp_path)
    assert listed.returncode == 0 and "sfl_prox" in listed.stdout, listed.stderr
    bad = _cli(["run", "--plugin", "sfl_prox", "--algo", "sfl_prox", "--prox-mu", "-1"], tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == "raysfl: error: prox_mu must be a finite number >= 0, got -1.0"
    helped = _cli(["run", "--plugin", "sfl_prox", "--help"], tmp_path)  # the help declared with the knob
    assert "sfl_prox: weight of (mu/2) ||w - w_global||^2 on the client side" in " ".join(helped.stdout.split())
    unknown = _cli(["run", "--algo", "sfl_prox", "--rounds", "1"], tmp_path)
    assert unknown.returncode == 2 and "unknown algorithm 'sfl_prox'" in unknown.stderr
    assert "--plugin MODULE" in unknown.stderr.strip().splitlines()[-1], unknown.stderr


@pytest.mark.slow  # two whole processes that each start Ray (~50 s on CI); CI runs the slow tests
def test_the_worked_example_runs_and_resumes_through_the_cli(tmp_path):
    """Run with its own flag through ``raysfl run --plugin``; the run records its plugin, so its
    resume needs no ``--plugin``."""
    worked_example(tmp_path)
    run = _cli(["run", "--plugin", "sfl_prox", "--algo", "sfl_prox", "--prox-mu", "0.1", "--clients", "4",
                "--rounds", "2", "--local-steps", "2", "--batch-size", "16", "--out", str(tmp_path / "runs"),
                "--name", "ex", "--num-cpus", "2", "--no-progress"], tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    import json

    import pyarrow.parquet as pq

    saved = json.loads((tmp_path / "runs" / "ex" / "config.json").read_text())
    assert saved["algo"] == "sfl_prox" and saved["algo_params"] == {"prox_mu": 0.1}
    assert saved["partition"] == "dirichlet" and saved["alpha"] == 0.3  # its paper setting
    metrics = pq.read_table(tmp_path / "runs" / "ex" / "metrics.parquet").to_pylist()
    assert len(metrics) == 2 and all(r["client_drift"] > 0 for r in metrics)  # its aggregator's own metric
    # the run records its plugin: a resume needs no --plugin, and without the record one line says what to give
    assert saved["plugins"] == ["sfl_prox"]
    resumed = _cli(["run", "--resume", str(tmp_path / "runs" / "ex"), "--rounds", "3", "--num-cpus", "2",
                    "--no-progress"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert pq.read_table(tmp_path / "runs" / "ex" / "metrics.parquet").num_rows == 3


def _rows(res):
    return [{k: v for k, v in r.items() if "wall_time" not in k and k not in ("algo", "client_drift")}
            for r in res.metrics]


def test_the_worked_example_changes_exactly_what_it_says(quick, tmp_path, monkeypatch):
    """prox_mu = 0 is SplitFed V1 exactly (its paper setting included); a strong term changes
    the training. (A role with a regulariser steps its clients one by one; SplitFed V1's plain
    clients would step in a client bank, equal within float rounding only: off here.)"""
    monkeypatch.syspath_prepend(str(worked_example(tmp_path)))
    import sfl_prox  # noqa: F401 - registers sfl_prox

    try:
        kw = dict(clients=4, rounds=2, local_steps=3, lr=0.1)
        zero = raysfl.run(quick(algo="sfl_prox", sfl_prox={"prox_mu": 0.0}, **kw))
        v1 = raysfl.run(quick(algo="splitfed_v1", partition="dirichlet", alpha=0.3,
                              resources={"client_actors": 2, "client_bank": "off"}, **kw))
        strong = raysfl.run(quick(algo="sfl_prox", sfl_prox={"prox_mu": 50.0}, **kw))
    finally:
        ALGORITHMS.pop("sfl_prox", None)
    assert _rows(zero) == _rows(v1)
    assert _rows(strong) != _rows(zero)


# ----------------------------------------------------------------------------- the registry
@dataclass
class MuParams:
    mu: float = 0.5


@dataclass
class RoundsParams:
    rounds: int = 3


def test_register_refuses_a_taken_name_and_a_flag_with_two_meanings():
    class Again(Algorithm):
        name = "psl"

    with pytest.raises(ConfigError, match="algorithm name 'psl' is taken"):
        register(Again)

    class OtherMu(Algorithm):
        name = "test_other_mu"
        params_cls = MuParams

    with pytest.raises(ConfigError, match=r"knob 'mu' \(--mu\) is already a knob of 'fedprox' with another meaning"):
        register(OtherMu)

    class Shadow(Algorithm):
        name = "test_shadow"
        params_cls = RoundsParams

    with pytest.raises(ConfigError, match=r"knob 'rounds' \(--rounds\) has the name of a shared setting"):
        register(Shadow)
    assert "test_other_mu" not in ALGORITHMS and "test_shadow" not in ALGORITHMS


def test_an_algorithm_sharing_a_params_dataclass_shares_its_flags(tmp_path):
    """A variant built on GAPSL's knobs registers, and ``--k-min`` goes to whichever of the two runs."""
    from raysfl.algorithms.gapsl import GAPSL
    from raysfl.cli import build_parser, config_from_args

    class Variant(GAPSL):
        name = "test_gapsl_variant"

    register(Variant)
    try:
        ns = build_parser().parse_args(["run", "--algo", "test_gapsl_variant", "--k-min", "0.3", "--out", str(tmp_path)])
        assert config_from_args(ns).algo_params.k_min == 0.3
        ns = build_parser().parse_args(["run", "--algo", "gapsl", "--k-min", "0.4", "--out", str(tmp_path)])
        assert config_from_args(ns).algo_params.k_min == 0.4
    finally:
        ALGORITHMS.pop("test_gapsl_variant", None)


def test_a_flag_of_another_algorithm_is_refused_with_its_owner(tmp_path):
    from raysfl.cli import build_parser, config_from_args

    ns = build_parser().parse_args(["run", "--algo", "psl", "--mu", "0.1", "--out", str(tmp_path)])
    with pytest.raises(ConfigError, match=r"'fedprox.mu' \(--mu\) belongs to algorithm 'fedprox', not to this "
                                          r"run's algorithm 'psl'"):
        config_from_args(ns)


def test_every_algorithm_is_four_roles_and_papers_change_only_theirs():
    bases = {"planner": Planner, "client": ClientSide, "server": ServerSide, "aggregator": Aggregator}
    for name, cls in ALGORITHMS.items():
        for role, base in bases.items():
            assert issubclass(cls.roles()[role], base), (name, role)
    assert ALGORITHMS["splitfed_v2"].roles() == {"planner": Planner, "client": ClientSide, "server": ServerSide,
                                                 "aggregator": Aggregator}  # SplitFed: every default
    assert ALGORITHMS["splitfed_v1"].server is PerClientServer and ALGORITHMS["psl"].aggregator is OwnModels
    assert not ALGORITHMS["psl"].client.uploads_model
    flex = raysfl.config_from_kwargs(algo="flex_sfl", flex_sfl={"edge_servers": 5})
    assert ALGORITHMS["flex_sfl"].make_planner(flex).servers == 5
    assert ALGORITHMS["fedavg"].make_planner(raysfl.config_from_kwargs(algo="fedavg")).servers == 0
    assert ALGORITHMS["splitfed_v2"].planner.exchange is SplitExchange
    assert ALGORITHMS["centralized"].planner.exchange is None


# ----------------------------------------------------------------------------- a role records a metric
class RecordingClient(ClientSide):
    """SplitFed's client that records the norm of the gradient it receives at its cut."""

    @classmethod
    def columns(cls, cfg):
        return ["grad_norm_cut"]

    def backward(self, c, acts, reply):
        c.stats.record("grad_norm_cut", float(reply.grad.norm()))
        super().backward(c, acts, reply)


class Recording(Algorithm):
    name = "test_recording"
    client = RecordingClient


def test_client_roles_record_per_round_metrics(quick):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors cannot import the tests
    register(Recording)
    try:
        res = raysfl.run(quick(algo="test_recording", clients=3, rounds=2))
        plain = raysfl.run(quick(algo="splitfed_v2", clients=3, rounds=2))
    finally:
        ALGORITHMS.pop("test_recording", None)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert all(r["grad_norm_cut"] > 0 for r in res.metrics)
    assert "grad_norm_cut" not in plain.metrics[0]
    assert [r["test_accuracy"] for r in res.metrics] == [r["test_accuracy"] for r in plain.metrics]


class CountingFailures(Aggregator):
    """FedAvg that records how many of the round's clients the simulated deadline dropped,
    from the ``failures`` the runtime hands it (as Flower's aggregate_fit receives them)."""

    @classmethod
    def columns(cls, cfg):
        return ["past_sim_deadline"]

    def aggregate(self, rnd, server_states, updates, failures):
        assert not set(failures) & {u.client for u in updates}  # a failure has no update
        self.record("past_sim_deadline", sum(why == "past_sim_deadline" for why in failures.values()))
        return super().aggregate(rnd, server_states, updates, failures)


class FailureCounting(Algorithm):
    name = "test_failure_counting"
    aggregator = CountingFailures


def test_a_role_records_even_when_its_init_skips_the_base_classs():
    """A plugin planner (or server side, or aggregator) whose __init__ does not call its base's
    still records: the figures' store is made on the first record."""
    from raysfl.algorithms.roles.planner import Planner

    class Bare(Planner):
        def __init__(self):  # no super().__init__()
            pass

    p = Bare()
    assert p.take_records() == {}
    p.record("servers_up", 2)
    p.record("servers_up", 3)
    assert p.take_records() == {"servers_up": 2.5}
    assert p.take_records() == {}


def test_the_aggregator_receives_the_rounds_failures(quick):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    register(FailureCounting)
    try:
        res = raysfl.run(quick(algo="test_failure_counting", clients=10, rounds=3, sim_deadline_s=30.0,
                               faults="delay:client:p=0.3:seconds=100"))
    finally:
        ALGORITHMS.pop("test_failure_counting", None)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert sum(r["dropped"] for r in res.metrics) >= 1
    assert [r["past_sim_deadline"] for r in res.metrics] == [float(r["dropped"]) for r in res.metrics]


def test_failures_name_every_client_that_trained_without_an_update():
    from raysfl.runtime.federation import RoundResult, failures

    res = RoundResult(stats={c: None for c in range(5)})
    res.failed, res.late = {1}, {3}
    assert failures(res, [0, 2]) == {1: "failed", 3: "late", 4: "past_sim_deadline"}
    assert failures(res, None) == {1: "failed", 3: "late"}


def test_a_role_state_round_trips_through_a_checkpoint():
    """A role's typed state is checkpointed as plain data and comes back as its dataclass."""
    from raysfl import checkpoint
    from raysfl.algorithms.gapsl.algorithm import GAPSLServer, LGIState
    from raysfl.models import build_model

    cfg = raysfl.config_from_kwargs(algo="gapsl")
    srv = GAPSLServer(cfg, None, None, build_model("cnn", (1, 8, 8), 10, seed=0), "cpu")
    srv.state = LGIState(calls=7, nu_range=(0.1, 0.4))
    saved = checkpoint._decode(checkpoint._encode(srv.get_state()))
    other = GAPSLServer(cfg, None, None, build_model("cnn", (1, 8, 8), 10, seed=0), "cpu")
    other.load_state(saved)
    assert other.state == LGIState(calls=7, nu_range=(0.1, 0.4))
    assert dataclasses.is_dataclass(other.state)


def test_a_knob_declares_its_help_choices_and_bounds_and_validation_checks_them():
    """``knob(...)`` on a params field: every algorithm's knobs are checked from their declaration
    (a plugin's too), in one line naming the knob, the value and what is allowed."""
    from raysfl.algorithms.knobs import check_knobs, knob, knob_of

    @dataclass
    class Params:
        mode: str = knob("a", "how: a | b", choices=("a", "b"))
        share: float = knob(0.5, "a share", above=0, at_most=1)
        beta: float = knob(0.9, "an EMA factor", at_least=0, below=1)
        steps: int | None = knob(None, "steps", integer=True, at_least=1, unset="the run's rounds")
        on: bool = knob(True, "a switch")
        plain: float = 1.0  # declared without knob: its name is its help

    check_knobs(Params())
    check_knobs(Params(steps=3, on=False))
    assert knob_of(dataclasses.fields(Params)[0]).help == "how: a | b"
    assert knob_of(dataclasses.fields(Params)[3]).unset == "the run's rounds"
    assert knob_of(dataclasses.fields(Params)[5]).help == "plain"
    for bad, message in (({"mode": "c"}, "unknown mode 'c'; allowed: a, b"),
                         ({"share": 0.0}, r"share must be a finite number in \(0, 1\], got 0.0"),
                         ({"share": float("nan")}, r"share must be a finite number in \(0, 1\], got nan"),
                         ({"beta": 1.0}, r"beta must be a finite number in \[0, 1\), got 1.0"),
                         ({"steps": 0}, "steps must be an integer >= 1, got 0"),
                         ({"steps": 2.5}, "steps must be an integer >= 1, got 2.5"),
                         ({"plain": float("inf")}, "plain must be a finite number, got inf")):
        with pytest.raises(ConfigError, match=message):
            check_knobs(Params(**bad))
    # every built-in knob is declared with its help
    for cls in ALGORITHMS.values():
        for f in dataclasses.fields(cls.params_cls):
            assert f.metadata.get("raysfl.knob"), f"{cls.name}.{f.name} is declared without knob(...)"


def test_the_architecture_page_lists_each_roles_interface_as_the_code_has_it():
    """docs/architecture.md's "Each role's interface" is scripts/role_interfaces.py's output."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from role_interfaces import END, START, render

    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index(START):doc.index(END) + len(END)]
    assert section == render(), "run: python scripts/role_interfaces.py --write"
