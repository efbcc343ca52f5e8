"""Per-round settings (issue 46, item 3): ``--lr-schedule`` (raysfl.schedules) and
``--init-from RUN`` (raysfl.warm_start)."""

from __future__ import annotations

import json
import math

import pytest
import torch

import raysfl
from raysfl.errors import ConfigError
from raysfl.resolve import from_dict, validate


def frozen(rnd: int) -> float:
    """A schedule of ours: no training at all (multiplier 0), so a run keeps its initial model."""
    return 0.0


def halving(rnd: int) -> float:
    return 0.5 ** (rnd - 1)


def negative_at_three(rnd: int) -> float:
    return -1.0 if rnd == 3 else 1.0


def _lrs(rounds: int, **kw) -> list[float]:
    cfg = from_dict({"rounds": rounds, "lr": 0.1, **kw})
    return [cfg.lr_at(t) for t in range(1, rounds + 1)]


def _torch_lrs(rounds: int, make) -> list[float]:
    """What a torch scheduler, stepped once a round, gives an optimiser of lr 0.1."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched, out = make(opt), []
    for _ in range(rounds):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


# ----------------------------------------------------------------- each named schedule, round by round
def test_named_schedules_give_torchs_per_round_lr():
    from torch.optim.lr_scheduler import CosineAnnealingLR, ExponentialLR, StepLR

    assert _lrs(8, lr_schedule="cosine:floor=0.1") == pytest.approx(
        _torch_lrs(8, lambda o: CosineAnnealingLR(o, T_max=8, eta_min=0.01)), rel=1e-9)
    assert _lrs(8, lr_schedule="cosine") == pytest.approx(_torch_lrs(8, lambda o: CosineAnnealingLR(o, T_max=8)),
                                                          rel=1e-9, abs=1e-15)
    assert _lrs(9, lr_schedule="step:every=3,gamma=0.5") == pytest.approx(
        _torch_lrs(9, lambda o: StepLR(o, step_size=3, gamma=0.5)), rel=1e-12)
    assert _lrs(6, lr_schedule="exp:gamma=0.8") == pytest.approx(
        _torch_lrs(6, lambda o: ExponentialLR(o, gamma=0.8)), rel=1e-12)
    assert _lrs(4, lr_schedule="constant") == [0.1] * 4


def test_warmup_ramps_linearly_then_hands_over_to_the_schedule():
    assert _lrs(5, lr_schedule="warmup:rounds=3") == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1])
    # cosine after 2 warm-up rounds runs over the other 4 rounds, to its floor
    lrs = _lrs(6, lr_schedule="cosine:warmup=2:floor=0.2")
    cos = [0.02 + 0.08 * (1 + math.cos(math.pi * s / 4)) / 2 for s in range(4)]
    assert lrs == pytest.approx([0.1 / 3, 0.2 / 3, *cos])
    # the server side follows the same schedule over its own lr
    cfg = from_dict({"rounds": 6, "lr": 0.1, "server_lr": 0.01, "lr_schedule": "cosine:warmup=2:floor=0.2"})
    assert [cfg.server_lr_at(t) for t in range(1, 7)] == pytest.approx([x / 10 for x in lrs])


def test_lr_decay_is_the_exp_schedule_and_the_recorded_text_keeps_the_curve():
    old = _lrs(6, lr_decay=0.9)
    assert old == [0.1 * 0.9 ** (t - 1) for t in range(1, 7)]  # the rule --lr-decay always had
    assert _lrs(6, lr_schedule="exp:gamma=0.9") == old
    # what a run records: every key written; read back (a resume with more rounds) it is the same curve
    cfg = from_dict({"rounds": 4, "lr_schedule": "cosine"})
    assert (cfg.lr_schedule, cfg.lr_decay) == ("cosine:rounds=4:floor=0", 1.0)
    again = from_dict({**cfg.to_dict(), "rounds": 6})
    assert [again.lr_at(t) for t in range(1, 5)] == [cfg.lr_at(t) for t in range(1, 5)]
    assert again.lr_at(5) == again.lr_at(6) == 0.0  # past its rounds: the floor
    # a paper's decay (FLEX-SFL's 0.98) gives way to a schedule the user gives
    assert from_dict({"algo": "flex_sfl", "lr_schedule": "constant"}).lr_decay == 1.0
    assert from_dict({"algo": "flex_sfl"}).lr_decay == 0.98


def test_a_function_of_the_round_from_python_is_recorded_by_its_path(tmp_path):
    cfg = validate(raysfl.Config(rounds=4, lr=0.2, lr_schedule=halving, out=str(tmp_path)))
    assert cfg.lr_schedule == f"{__name__}:halving"
    assert [cfg.lr_at(t) for t in range(1, 5)] == [0.2, 0.1, 0.05, 0.025]
    assert from_dict({"rounds": 4, "lr_schedule": halving}).lr_schedule == f"{__name__}:halving"
    # the same text from a file or the command line names the same function
    assert from_dict({"rounds": 4, "lr": 0.2, "lr_schedule": f"{__name__}:halving"}).lr_at(3) == 0.05


def test_runs_checkpointed_before_these_settings_still_resume():
    """The two settings left unset mean what their absence meant: a checkpoint's fingerprint of a
    config written before they existed is the one a resume computes now."""
    from raysfl import checkpoint

    now = raysfl.Config().to_dict()
    before = {k: v for k, v in now.items() if k not in ("lr_schedule", "init_from")}
    assert checkpoint.fingerprint(before) == checkpoint.fingerprint(now)
    assert checkpoint.fingerprint({**now, "lr_schedule": "cosine:rounds=20:floor=0"}) != checkpoint.fingerprint(now)


@pytest.mark.parametrize("settings, says", [
    ({"lr_schedule": "cosin"}, "unknown lr-schedule 'cosin'; allowed: constant, exp:gamma=G"),
    ({"lr_schedule": "exp"}, "needs gamma="),
    ({"lr_schedule": "exp:gamma=1.5"}, "gamma=1.5 must be in (0, 1]"),
    ({"lr_schedule": "step:every=0"}, "every=0 must be >= 1"),
    ({"lr_schedule": "step:every=2.5"}, "every=2.5 is not an integer"),
    ({"lr_schedule": "cosine:floor=1"}, "floor=1 must be in [0, 1)"),
    ({"lr_schedule": "cosine:flor=0.1"}, "'flor=0.1' is not a key of cosine; cosine takes rounds=, floor=, warmup="),
    ({"lr_schedule": "warmup:rounds=5", "rounds": 5}, "the warm-up (5 rounds) must be shorter than the run"),
    ({"lr_schedule": "cosine", "lr_decay": 0.9}, "lr-decay 0.9 and lr-schedule 'cosine' both set the lr schedule"),
    ({"lr_schedule": "no_such_module_x:fn"}, "cannot import no_such_module_x"),
    ({"lr_schedule": f"{__name__}:nothing_here"}, "has no function nothing_here"),
    ({"lr_schedule": f"{__name__}:negative_at_three"}, "negative_at_three(3) returned -1.0; it must return"),
    ({"lr_schedule": lambda r: 1.0}, "a lambda or a nested function"),
    ({"lr_schedule": "cosine", "init_from": "/nonexistent/run"}, "init-from '/nonexistent/run' is not a directory"),
])
def test_bad_schedules_and_sources_are_one_line_naming_the_value(settings, says, tmp_path):
    with pytest.raises(ConfigError) as e:
        validate(from_dict({"rounds": 5, "out": str(tmp_path), **settings}))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_cli_takes_both_flags_and_refuses_a_bad_schedule_in_one_line(tmp_path, capsys):
    from raysfl.cli import build_parser, config_from_args, main

    ns = build_parser().parse_args(["run", "--lr-schedule", "step:every=2:gamma=0.5", "--rounds", "4",
                                    "--init-from", str(tmp_path)])
    cfg = config_from_args(ns)
    assert (cfg.lr_schedule, cfg.init_from) == ("step:every=2:gamma=0.5", str(tmp_path))
    assert main(["run", "--lr-schedule", "exp:gamma=2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "raysfl: error: lr-schedule exp: gamma=2 must be in (0, 1] (1 = constant)"


def test_a_function_beside_you_on_the_command_line_and_none_from_inside_a_resumed_run(tmp_path, monkeypatch, capsys):
    import sys

    from raysfl.cli import main

    (tmp_path / "my_sched.py").write_text("def fn(rnd):\n    return -0.5\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert main(["run", "--lr-schedule", "my_sched:fn", "--rounds", "2", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("raysfl: error: lr-schedule my_sched:fn(1) returned -0.5; it must return the round's multiplier "
                   "of --lr, a finite number >= 0")
    # a run directory that brings its own schedule module: a resume does not import it
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**raysfl.Config(rounds=2).to_dict(), "lr_schedule": "shipped:fn"}))
    (run / "shipped.py").write_text("import pathlib\npathlib.Path('imported').write_text('yes')\n"
                                    "def fn(rnd):\n    return 1.0\n")
    monkeypatch.chdir(run)
    sys.path.insert(0, str(run))
    with pytest.raises(ConfigError, match=r"names an lr-schedule of module 'shipped', which would be imported from "
                                          r"inside the run directory .*; a resume runs no code that came with the run"):
        raysfl.resume_config(run, {"rounds": 3})
    assert not (run / "imported").exists()


# ----------------------------------------------------------------- runs
def _cfg(out, **kw):
    base = dict(clients=4, rounds=2, local_steps=2, batch_size=16, out=str(out), progress=False,
                resources={"client_actors": 2})
    return raysfl.config_from_kwargs(**{**base, **kw})


@pytest.fixture(scope="module")
def source(tmp_path_factory, ray_session):
    """A finished run of the default algorithm (constant lr) to compare with and start from."""
    return raysfl.run(_cfg(tmp_path_factory.mktemp("source"), lr=0.1))


def _losses(res) -> list[tuple[float, float]]:
    return [(r["train_loss"], r["test_loss"]) for r in res.metrics]


def test_a_run_trains_with_its_schedule_and_lr_decay_runs_as_exp(source, tmp_path):
    decay = raysfl.run(_cfg(tmp_path, lr=0.1, lr_decay=0.5, name="decay"))
    exp = raysfl.run(_cfg(tmp_path, lr=0.1, lr_schedule="exp:gamma=0.5", name="exp"))
    assert _losses(exp) == _losses(decay)  # the same run, round by round
    # round 1 has the full lr in all three; round 2 trains with half of it
    assert _losses(exp)[0] == _losses(source)[0]
    assert _losses(exp)[1] != _losses(source)[1]
    assert json.loads((exp.run_dir / "config.json").read_text())["lr_schedule"] == "exp:gamma=0.5"


def test_init_from_starts_at_the_source_runs_final_model_and_is_recorded(source, tmp_path):
    from raysfl import checkpoint

    final = source.final["test_loss"]
    assert abs(source.metrics[0]["test_loss"] - final) > 1e-3 * final  # its final model is not its round-1 one
    # a schedule of zeros: round 1 trains nothing, so it evaluates the model the run started from
    res = raysfl.run(_cfg(tmp_path, init_from=str(source.run_dir), lr_schedule=frozen, name="warm"))
    assert [r["round"] for r in res.metrics] == [1, 2]
    assert [r["test_loss"] for r in res.metrics] == pytest.approx([final, final], rel=1e-5)
    recorded = json.loads((res.run_dir / "config.json").read_text())
    manifest = checkpoint.read_manifest(source.run_dir)
    assert recorded["init_from"] == str(source.run_dir)
    assert recorded["init_from_checkpoint"] == {"round": 2, "file": "round_0002.pt", "sha256": manifest["2"]["sha256"]}
    assert recorded["lr_schedule"] == f"{__name__}:frozen"
    # a resume of the warm-started run goes on from its own checkpoint, schedule and record kept
    more = raysfl.run(raysfl.resume_config(res.run_dir, {"rounds": 3}))
    assert more.metrics[-1]["round"] == 3 and more.metrics[-1]["test_loss"] == pytest.approx(final, rel=1e-5)
    assert json.loads((res.run_dir / "config.json").read_text())["init_from_checkpoint"] == \
        recorded["init_from_checkpoint"]


def test_init_from_weights_that_do_not_fit_is_refused_in_one_line_before_a_run_directory(source, tmp_path, capsys):
    from raysfl.cli import main

    out = tmp_path / "runs"
    assert main(["run", "--init-from", str(source.run_dir), "--model", "vit", "--rounds", "1",
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"raysfl: error: init-from '{source.run_dir}' does not fit this "
                                              f"run's model: its final model")
    assert "it trained model 'cnn' on 'digits'; this run: model 'vit' on 'digits'" in err
    # a checkpoint that is not the one its manifest records
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(source.run_dir, copy)
    manifest = json.loads((copy / "checkpoints" / "manifest.json").read_text())
    manifest["2"]["sha256"] = "0" * 64
    (copy / "checkpoints" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["run", "--init-from", str(copy), "--rounds", "1", "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (f"raysfl: error: init-from '{copy}': round_0002.pt is not the file "
                                               f"written as round 2's checkpoint (its sha256 differs from "
                                               f"manifest.json's)")
    # a run whose clients keep models of their own has no single final model to start from
    psl = raysfl.run(_cfg(tmp_path / "psl", algo="psl", rounds=1))
    assert main(["run", "--init-from", str(psl.run_dir), "--rounds", "1", "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (f"raysfl: error: init-from '{psl.run_dir}': psl keeps no single "
                                               f"global model (each client runs its own) to start from; give a "
                                               f"run of an algorithm with one")
    assert not out.exists() or not any(out.iterdir())
