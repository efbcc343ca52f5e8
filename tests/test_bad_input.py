"""Bad input and bad conditions: every bad value through the CLI (exit status 2, one line,
no traceback, the value named), resume inputs, checkpoints, the Ray address, cluster size,
diverging training. docs/reliability.md lists each case with its test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import raysfl
from raysfl import checkpoint
from raysfl.errors import ConfigError, RunFailed

CFG = {"algo": "splitfed_v2", "lr": 0.05, "rounds": 3, "resources": {"client_actors": 2}}


def _state(rnd):
    import numpy as np

    return {"round": rnd, "counters": {"stream_pos": {0: 3}, "sim_total": 1.5},
            "federation": {"fed": {"global": {"blocks.0.w": np.full(3, float(rnd), dtype=np.float32)}}}}


def test_checkpoint_round_trip_keeps_numpy(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    got = checkpoint.load_latest(tmp_path, CFG)
    arr = got["federation"]["fed"]["global"]["blocks.0.w"]
    assert arr.dtype.name == "float32" and arr.tolist() == [1.0, 1.0, 1.0]
    assert got["counters"] == {"stream_pos": {0: 3}, "sim_total": 1.5}


def test_truncated_newest_checkpoint_falls_back(tmp_path, capsys):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    newest = checkpoint.save(tmp_path, 2, _state(2), CFG)
    newest.write_bytes(newest.read_bytes()[:100])  # a crash mid-copy, a full disk, ...
    got = checkpoint.load_latest(tmp_path, CFG)
    assert got["round"] == 1
    assert "round_0002.pt is unreadable" in capsys.readouterr().err


def test_a_save_that_fails_mid_write_leaves_the_last_whole_checkpoint(tmp_path, monkeypatch):
    """Every whole-file writer goes through raysfl.whole_files.replacing: a write that raises
    leaves no file under the round's name and no temporary file behind."""
    checkpoint.save(tmp_path, 1, _state(1), CFG)

    def full_disk(obj, f, *a, **k):
        Path(f).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(tmp_path, 2, _state(2), CFG)
    assert sorted(f.name for f in (tmp_path / "checkpoints").iterdir()
                  if not f.name.startswith("manifest")) == ["round_0001.pt"]
    monkeypatch.undo()
    assert checkpoint.load_latest(tmp_path, CFG)["round"] == 1


def test_checkpoint_from_another_config_is_refused(tmp_path):
    checkpoint.save(tmp_path, 1, _state(1), CFG)
    with pytest.raises(ConfigError, match="different settings"):
        checkpoint.load_latest(tmp_path, {**CFG, "lr": 0.5})
    # settings a resume may change do not count
    assert checkpoint.load_latest(tmp_path, {**CFG, "rounds": 10, "resources": {}})["round"] == 1


class Evil:  # unpickling this would run code; weights_only loading must refuse it
    def __reduce__(self):
        return (print, ("pwned",))


def test_checkpoint_loading_never_unpickles_objects(tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"round": 1, "federation": Evil()}, tmp_path / "checkpoints" / "round_0001.pt")
    with pytest.raises(ConfigError, match="none of its 1 checkpoints is readable"):
        checkpoint.load_latest(tmp_path, CFG)
    assert "pwned" not in capsys.readouterr().out


def test_missing_checkpoints(tmp_path):
    with pytest.raises(ConfigError, match="no checkpoints"):
        checkpoint.load_latest(tmp_path, CFG)


def test_too_small_cluster_fails_fast(quick):
    with pytest.raises(RunFailed, match=r"need 100\.5 CPUs .* the Ray cluster has 4"):
        raysfl.run(quick(algo="splitfed_v2", resources={"client_actors": 2, "server_cpus": 99.0}))


def test_diverging_training_stops_with_one_line(quick):
    with pytest.raises(RunFailed, match="training diverged") as e:
        raysfl.run(quick(algo="splitfed_v2", lr=1e12, momentum=0.0, rounds=5))
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------ every bad input through the CLI
# Each case runs `raysfl run` (raysfl.cli.main, in this process: no Ray starts for any of them)
# and asserts exit status 2, one line on stderr starting "raysfl: error:", no traceback, and the
# bad value named. docs/reliability.md lists them.


def _cli(argv, capsys):
    from raysfl.cli import main

    code = main(argv)
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.strip()], err


def _one_line(argv, capsys, expected, code=2):
    got, lines, err = _cli(argv, capsys)
    assert got == code, err
    assert len(lines) == 1 and lines[0].startswith("raysfl: error: "), err
    assert "Traceback" not in err
    assert expected in lines[0], lines[0]
    return lines[0]


BAD_FLAGS = [
    (["--weight-decay", "-1"], "weight-decay must be >= 0, got -1"),
    (["--local-epochs", "inf"], "local-epochs must be a finite number, got inf"),
    (["--lr", "nan"], "lr must be a finite number, got nan"),
    (["--seed", "-1"], "seed must be an integer in [0, 2^32), got -1"),
    (["--server-tflops", "0"], "devices.server_tflops must be > 0, got 0"),
    (["--flops-per-cycle", "0"], "devices.flops_per_cycle must be > 0, got 0"),
    (["--num-cpus", "-1"], "resources.num_cpus must be >= 1"),
    (["--num-cpus", "0"], "resources.num_cpus must be >= 1 (or unset"),
    (["--num-gpus", "-1"], "resources.num_gpus must be >= 0"),
    (["--memory-gb", "inf", "inf"], "devices.memory_gb must be a finite number, got (inf, inf)"),
    (["--clients-per-actor", "-1"], "resources.clients_per_actor must be >= 1"),
    (["--name", "../../x"], "name must be one directory name inside --out"),
    (["--algo", "fedprox", "--mu", "nan"], "mu must be a finite number >= 0, got nan"),
    (["--algo", "splitfed_v1", "--mu", "0.1"], "'fedprox.mu' (--mu) belongs to algorithm 'fedprox'"),
    (["--rounds", "5", "--faults", "kill:client:round=30"], "'kill:client:round=30' is scheduled after the last round"),
    (["--faults", "delay:client:p=0.5:seconds=inf"], "seconds=inf must be finite"),
    (["--faults", "delay:client:p=nan:seconds=1"], "p must be in (0, 1], got nan"),
    (["--min-included", "2"], "min-included must be a share"),
    (["--round-deadline-s", "inf"], "round-deadline-s must be a finite number"),
    # issue 35: values that passed validation and then crashed, or were silently taken
    (["--latency-ms", "1e300", "1e300", "--cpu-ghz", "1e-300", "1e-300"],
     "devices.latency_ms must lie within [0, 1e+07]"),
    (["--cpu-ghz", "1e-300", "1e-300"], "devices.cpu_ghz must lie within [1e-06, 1e+06]"),
    (["--uplink-mbps", "1e-300", "1"], "devices.uplink_mbps must lie within"),
    (["--server-tflops", "1e300"], "devices.server_tflops must be within [1e-06, 1e+09], got 1e+300"),
    (["--flops-per-cycle", "1e-300"], "devices.flops_per_cycle must be within"),
    (["--name", "\udcff"], "name must be valid UTF-8 text, got the bytes b'\\xff'"),
    (["--name", "a\nb"], "name must not contain control characters"),
    (["--name", "tab\there"], "name must not contain control characters"),
    (["--name", "   "], "name must not be blank, got '   '"),
    (["--name", ""], "name must be one directory name inside --out"),
    (["--rounds", "99999999999999999999999"], "rounds must be between 1 and 10,000,000, got 99999999999999999999999"),
    (["--rounds", "0"], "rounds must be between 1 and 10,000,000, got 0"),
    (["--local-steps", "99999999999999999999999"], "local-steps is out of range"),
    (["--batch-size", "1e30"], "batch_size: cannot use '1e30'"),
    (["--algo", "sl", "--step-deadline-s", "5"], "not supported for the sequential algorithm 'sl'"),
    (["--algo", "sl", "--round-deadline-s", "5"], "not supported for the sequential algorithm 'sl'"),
    (["--faults", "kill:client:round=1:round=3"], "'round' is given twice"),
    (["--faults", "kill:client:round=1:rounds=1-2"], "'rounds' is given twice (or with round)"),
    (["--faults", "delay:client:p=0.5:p=0.2:seconds=1"], "'p' is given twice"),
    (["--faults", "kill:client:round=1:seconds=5"], "key 'seconds' does not apply to kill"),
    (["--faults", "kill:client:round=1:clock=real"], "key 'clock' does not apply to kill"),
    (["--faults", "delay:client:p=0.5:seconds=1:step=2"], "key 'step' does not apply to delay"),
    (["--faults", "delay:client:p=0.5:seconds=1:index=0"], "key 'index' does not apply to delay"),
    (["--faults", "unavailable:server:round=1:seconds=3"], "key 'seconds' does not apply to unavailable"),
    (["--local-steps", "3", "--faults", "kill:client:round=1:step=4"],
     "step=4 is past the round's last local step (3, --local-steps); allowed: step=0..3"),
    (["--faults", "kill:client:round=1:step=-1"], "step=S (>= 0)"),
    (["--faults", "kill:client:round=0"], "rounds are numbered from 1"),
    (["--faults", "kill:client:round=99999999999999999999999"], "is scheduled after the last round"),
    (["--faults", "kill:client:p=1e-400"], "p must be in (0, 1], got 0.0"),
    (["--faults", "kill:client:round=1:index=9"], "index 9 out of range"),
    (["--faults", "kill:client:round=1:index=x"], "index='x' is not a number"),
    (["--faults", "delay:client:p=0.5:seconds=-1"], "seconds"),
    (["--faults", "kill::round=1"], "unknown role ''"),
    (["--faults", "kill:client:=3"], "unknown key ''"),
    (["--out", ""], "out must name a directory (the runs go inside it), got ''"),
    (["--out", "  "], "out must name a directory"),
    (["--out", "/tmp/x\udcff"], "out must be valid UTF-8 text, got the bytes b'/tmp/x\\xff'"),
    (["--lr", "1e400"], "lr must be a finite number, got inf"),
    (["--momentum", "-0.0001"], "momentum must be in [0, 1)"),
    (["--clients", "0"], "clients must be >= 1"),
    (["--clients", "100000"], "training samples but clients=100000"),
    (["--seed", "4294967296"], "seed must be an integer in [0, 2^32)"),
    (["--transfer-dtype", "int8"], "unknown transfer-dtype 'int8'"),
    (["--keep-checkpoints", "-1"], "keep-checkpoints must be >= 0"),
    (["--inline-object-kb", "99999999999"], "inline_object_kb must be between 0 and 65536"),
    (["--placement-timeout-s", "nan"], "placement_timeout_s must be a finite number"),
    (["--rounds", "2.5"], "rounds: cannot use '2.5'; expected int"),
    (["--mlflow", ""], "mlflow must be a tracking URI"),  # MLflow took '' for a database in the current directory
    (["--mlflow-artifacts", "arts"], "mlflow-artifacts 'arts' needs --mlflow URI"),  # it would go unused
]


@pytest.mark.parametrize("args,expected", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_is_one_line(args, expected, tmp_path, capsys):
    _one_line(["run", "--out", str(tmp_path), *args], capsys, expected)


def test_out_must_be_a_writable_directory(tmp_path, capsys):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    _one_line(["run", "--out", str(a_file)], capsys, f"'{a_file}' is not a directory")
    _one_line(["run", "--out", str(a_file / "below")], capsys, "is not a directory")
    _one_line(["run", "--out", "/proc/raysfl-out"], capsys, "'/proc/raysfl-out' is not a writable directory")
    assert not list(tmp_path.glob(".raysfl-write-test-*"))  # the write probe leaves nothing behind


BAD_FILES = [
    ("rounds: null\n", "rounds: cannot be null; expected int"),
    ("seed: null\n", "seed: cannot be null; expected int"),
    ("devices:\n  memory_gb: null\n", "devices.memory_gb: cannot be null"),
    ("devices:\n  memory_gb: [1, null]\n", "devices.memory_gb: cannot use [1, None]"),
    ("rounds: yes\n", "rounds: cannot use True"),
    ("resource:\n  client_actors: 2\n", "unknown section 'resource' (did you mean 'resources'?)"),
    ("algo: fedprox\nfed_prox:\n  mu: 0.1\n", "unknown section 'fed_prox' (did you mean 'fedprox'?)"),
    ("algo: splitfed_v1\nfedprox:\n  mu: 0.1\n", "belongs to algorithm 'fedprox', not to this run's algorithm"),
    ("mu: 0.1\n", "'mu' is a setting of algorithm 'fedprox'"),
    ("algo: fedprox\nfedprox: 3\n", "section 'fedprox' must be a mapping"),
    ("faults:\n  - {action: delay, role: client, p: 0.5, seconds: .inf}\n", "must be finite"),
    # issue 35
    ("rounds: 2\nrounds: 500\n", "setting 'rounds' is given twice (again on line 2)"),
    ("devices:\n  latency_ms: [1, 2]\n  latency_ms: [3, 4]\n", "setting 'latency_ms' is given twice"),
    ("faults:\n  - {action: kill, role: client, round: 1, round: 2}\n", "setting 'round' is given twice"),
    ("", "holds no settings (it is empty or only comments)"),
    ("# only a comment\n\n", "holds no settings"),
    ("---\n", "holds no settings"),
    ("1: 2\n", "setting names must be text, got 1"),
    ("a: &a {b: *a}\n", "is malformed"),
    ("x: !!python/object/apply:os.system [ls]\n", "is malformed"),
    ("rounds: 2\n---\nrounds: 3\n", "is malformed"),
    ("- rounds: 2\n", "must hold a mapping of settings, got list"),
    ("rounds: .nan\n", "rounds: cannot use nan; expected int"),
    ("lr: .inf\n", "lr must be a finite number, got inf"),
    ("rounds: 1e30\n", "rounds: cannot use '1e30'"),
    ("faults: 3\n", "faults must be a comma-separated string or a list"),
    ("faults: [3]\n", "must be a string ACTION:ROLE"),
    ("faults: [{role: client}]\n", "needs 'action' and 'role'"),
    ("resources: [1, 2]\n", "section 'resources' must be a mapping"),
    ("name: \"a\\nb\"\n", "name must not contain control characters"),
]


@pytest.mark.parametrize("text,expected", BAD_FILES, ids=[repr(t[:40]) for t, _ in BAD_FILES])
def test_bad_config_file_is_one_line(text, expected, tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    _one_line(["run", "--config", str(f), "--out", str(tmp_path)], capsys, expected)


def test_config_file_that_cannot_be_read_is_one_line(tmp_path, capsys):
    """A directory, a binary file (not UTF-8, NUL bytes) or duplicate keys in JSON: one line each."""
    _one_line(["run", "--config", str(tmp_path), "--out", str(tmp_path)], capsys,
              f"config file '{tmp_path}' is a directory; expected a YAML or JSON file")
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"rounds: 2\n\xff\xfe\x00\x01")
    _one_line(["run", "--config", str(binary), "--out", str(tmp_path)], capsys, "is not UTF-8 text (byte 10 is 0xff)")
    nul = tmp_path / "n.yaml"
    nul.write_bytes(b"rounds: 2\n\x00\x00")
    _one_line(["run", "--config", str(nul), "--out", str(tmp_path)], capsys, "holds NUL bytes")
    dup = tmp_path / "c.json"
    dup.write_text('{"rounds": 2, "rounds": 500}')
    _one_line(["run", "--config", str(dup), "--out", str(tmp_path)], capsys, "setting 'rounds' is given twice")
    _one_line(["run", "--config", str(tmp_path / "nope.yaml"), "--out", str(tmp_path)], capsys, "does not exist")


@pytest.mark.parametrize("argv,expected", [
    (["run", "--plugin", ""], "--plugin '' is not a module name"),
    (["run", "--plugin", "../evil"], "--plugin '../evil' is not a module name"),
    (["export", "{run}", "--out", "/proc/x.pt"], "cannot write '/proc/x.pt'"),
    (["export", "{run}", "--out", "{tmp}"], "Is a directory"),
    (["export", "{run}", "--round", "99999999999999999999999"], "has no checkpoint of round 99999999999999999999999"),
    (["export", "{tmp}"], "is not a run directory (no config.json in it)"),
], ids=["empty plugin", "path as plugin", "export to /proc", "export onto a directory", "export huge round",
        "export of no run"])
def test_other_commands_bad_input_is_one_line(argv, expected, finished_run, tmp_path, capsys):
    argv = [a.format(run=finished_run, tmp=tmp_path) for a in argv]
    _one_line(argv, capsys, expected)


def test_a_utf8_bom_config_file_is_read(tmp_path):
    """A file saved by an editor that writes a byte-order mark is still a config file."""
    from raysfl.config import load_file

    f = tmp_path / "c.yaml"
    f.write_bytes("\ufeffrounds: 4\n".encode())
    assert load_file(f) == {"rounds": 4}


def test_huge_simulated_time_is_a_capped_tensorboard_step():
    """Even a simulated clock past 2^63 ms (or infinite) gives TensorBoard a step it can store."""
    from raysfl.metrics import TB_MAX_STEP, _sim_ms

    assert _sim_ms({"sim_time_total_s": 1e300}) == TB_MAX_STEP
    assert _sim_ms({"sim_time_total_s": float("inf")}) == TB_MAX_STEP
    assert _sim_ms({"sim_time_total_s": 1.5}) == 1500


def test_fault_step_past_the_rounds_steps_is_refused_with_local_epochs(tmp_path, capsys):
    """With --local-epochs the round's step count comes from the data split: checked once the data
    load, before any run directory or Ray."""
    out = tmp_path / "runs"
    _one_line(["run", "--out", str(out), "--clients", "4", "--faults", "kill:client:round=1:step=500"], capsys,
              "step=500 is past the round's last local step")
    assert not out.exists() or not any(out.iterdir())


def test_null_for_a_paper_setting_means_its_default(tmp_path):
    """A setting a paper may set (lr, model, ...) is None until resolved: null in a file asks
    for the default, documented, and is not an error."""
    from raysfl.cli import build_parser, config_from_args
    from raysfl.config import RUN_DEFAULTS
    from raysfl.resolve import validate

    f = tmp_path / "c.yaml"
    f.write_text("algo: splitfed_v2\nlr: null\nmodel: null\n")
    cfg = validate(config_from_args(build_parser().parse_args(["run", "--config", str(f)])))
    assert cfg.lr == RUN_DEFAULTS["lr"] and cfg.model == RUN_DEFAULTS["model"]


def test_unreadable_data_files_are_one_line(tmp_path, capsys):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = __import__("numpy").random.default_rng(0)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (raw / name).write_bytes(rng.bytes(5000))
    out = tmp_path / "runs"
    _one_line(["run", "--dataset", "mnist", "--data-root", str(tmp_path / "data"), "--out", str(out)], capsys,
              f"dataset 'mnist' under data root '{tmp_path / 'data'}' cannot be read")
    assert not out.exists() or not any(out.iterdir())  # checked before the run directory is made


def test_config_with_resume_is_refused(tmp_path, capsys):
    f = tmp_path / "c.yaml"
    f.write_text("rounds: 3\n")
    _one_line(["run", "--config", str(f), "--resume", str(tmp_path)], capsys,
              "--config cannot be combined with --resume")


def test_unexpected_error_is_one_line_with_a_log(tmp_path, capsys, monkeypatch):
    """Anything unanticipated: one line naming the error and the log file holding its traceback."""
    import raysfl.api

    def boom(cfg):
        raise RuntimeError("something nobody planned for")

    monkeypatch.setattr(raysfl.api, "run", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    line = _one_line(["run", "--out", str(tmp_path)], capsys, "unexpected RuntimeError: something nobody planned",
                     code=1)
    log = Path(line.split("traceback in ")[1].rstrip(")"))
    assert log.is_file() and "Traceback" in log.read_text() and "boom" in log.read_text()


# ------------------------------------------------------------------ resume inputs


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, ray_session):
    """A short finished run to resume (2 rounds, checkpoint every round)."""
    out = tmp_path_factory.mktemp("resume")
    return raysfl.run(raysfl.config_from_kwargs(algo="splitfed_v2", clients=4, rounds=2, local_steps=2,
                                                batch_size=16, out=str(out), progress=False, name="r",
                                                resources={"client_actors": 2})).run_dir


def _copy(run_dir, tmp_path):
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(run_dir, dst)
    return dst


def _rewrite_rows(run_dir, change):
    """Replace metrics.parquet by a valid file holding ``change(rows)``."""
    from raysfl.metrics import _write_parquet, read_rows

    _write_parquet(change(read_rows(run_dir / "metrics.parquet")), run_dir / "metrics.parquet")


def _retouch_checkpoint(path):
    """The same round, one weight changed: a valid checkpoint that is not the one written."""
    import torch

    state = torch.load(path, weights_only=True)
    fed = state["federation"]["fed"]
    key = next(k for k, v in fed["global"].items() if isinstance(v, dict))
    fed["global"][key]["__ndarray__"] += 1.0
    torch.save(state, path)


@pytest.mark.parametrize("damage,expected", [
    (lambda d: (d / "config.json").write_text(""), "its config.json is unreadable"),
    (lambda d: (d / "config.json").write_text((d / "config.json").read_text()[:40]), "its config.json is unreadable"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), "is not a raysfl run configuration"),
    (lambda d: (d / "metrics.parquet").write_bytes(b"PAR1 not really"), "metrics.parquet is unreadable"),
    (lambda d: (d / "clients.parquet").write_bytes((d / "clients.parquet").read_bytes()[:50]),
     "clients.parquet is unreadable"),
    (lambda d: [f.unlink() for f in (d / "checkpoints").glob("*.pt")], "no checkpoints/round_*.pt"),
    # issue 45: a run directory changed under the checkpoint
    (lambda d: (d / "metrics.parquet").unlink(), "metrics.parquet is missing, but checkpoint round_0002.pt goes "
     "with the metrics of rounds 1..2"),
    (lambda d: _rewrite_rows(d, lambda rows: rows[:1]), "metrics.parquet lacks round(s) 2, but checkpoint "
     "round_0002.pt goes with rounds 1..2"),
    (lambda d: _rewrite_rows(d, lambda rows: [{**r, "test_accuracy": 0.99} for r in rows]),
     "metrics.parquet's rows of rounds 1..2 differ from the ones recorded with checkpoint round_0002.pt"),
    (lambda d: (d / "checkpoints" / "round_0002.pt").write_bytes((d / "checkpoints" / "round_0001.pt").read_bytes()),
     "holds round 1 but is named round 2"),
    (lambda d: _retouch_checkpoint(d / "checkpoints" / "round_0002.pt"),
     "round_0002.pt is not the file written as round 2's checkpoint"),
], ids=["empty config", "truncated config", "config not a mapping", "corrupt metrics", "truncated clients",
        "no checkpoints", "metrics deleted", "metrics shorter", "metrics changed", "checkpoint renamed",
        "checkpoint changed"])
def test_damaged_resume_inputs_are_one_line(finished_run, tmp_path, capsys, damage, expected):
    d = _copy(finished_run, tmp_path)
    damage(d)
    before = {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()}
    _one_line(["run", "--resume", str(d), "--rounds", "3"], capsys, expected)
    assert {f.name: f.read_bytes() for f in d.iterdir() if f.is_file()} == before  # nothing changed


def test_stray_checkpoint_file_is_ignored_with_a_warning(finished_run, tmp_path, capsys):
    import shutil

    d = _copy(finished_run, tmp_path)
    shutil.copy(d / "checkpoints" / "round_0002.pt", d / "checkpoints" / "round_0002 (copy).pt")
    (d / "checkpoints" / "notes.txt").write_text("mine")
    state = checkpoint.load_latest(d, None)
    assert state["round"] == 2
    err = capsys.readouterr().err
    assert "ignoring 2 file(s)" in err and "round_0002 (copy).pt" in err and "\n" not in err.strip()


def test_resume_may_change_fault_handling(finished_run, tmp_path):
    """Retries, restarts, deadlines and the fault schedule may change on resume (a run that gave
    up can go on); what the run computes may not."""
    d = _copy(finished_run, tmp_path)
    cfg = raysfl.resume_config(d, {"rounds": 3, "max_round_retries": 5, "max_restarts": 4, "faults": "",
                                   "round_deadline_s": 30.0, "sim_deadline_s": 100.0, "min_included": 0.2})
    assert (cfg.max_round_retries, cfg.max_restarts, cfg.faults, cfg.round_deadline_s) == (5, 4, "", 30.0)
    assert checkpoint.load_latest(d, cfg.to_dict())["round"] == 2  # the checkpoint accepts them
    with pytest.raises(ConfigError, match="cannot change 'lr'"):
        raysfl.resume_config(d, {"lr": 0.5})


def _original(out):
    """The command line of ``finished_run``, as its user would have typed it."""
    return ["run", "--algo", "splitfed_v2", "--clients", "4", "--rounds", "2", "--local-steps", "2",
            "--batch-size", "16", "--out", str(out), "--name", "r", "--no-progress", "--client-actors", "2"]


def test_resume_takes_the_original_command_back(finished_run, tmp_path, capsys):
    """Repeating the original command with --resume works: every setting is compared as the typed
    value it means ('2' from a flag is the run's 2), with --rounds raised to go on."""
    import shutil

    import pyarrow.parquet as pq

    from raysfl.cli import build_parser, config_from_args, main

    d = tmp_path / "r"
    shutil.copytree(finished_run, d)
    argv = _original(tmp_path) + ["--resume", str(d)]
    argv[argv.index("--rounds") + 1] = "3"
    cfg = config_from_args(build_parser().parse_args(argv))
    assert (cfg.local_steps, cfg.rounds, cfg.resume, cfg.name, cfg.out) == (2, 3, str(d), "r", str(finished_run.parent))
    # the same values written otherwise: 2.0, a trailing slash on --out, an equal float
    same = argv + ["--lr", "0.050", "--out", str(tmp_path) + "/", "--latency-ms", "20", "200.0"]
    assert config_from_args(build_parser().parse_args(same)).lr == 0.05
    assert main(argv) == 0, capsys.readouterr().err
    assert [r["round"] for r in pq.read_table(d / "metrics.parquet").to_pylist()] == [1, 2, 3]
    assert '"out": "' + str(finished_run.parent) + '"' in (d / "config.json").read_text()  # as recorded first


@pytest.mark.parametrize("extra,expected", [
    (["--local-steps", "3"], "cannot change 'local_steps' when resuming (it was 2, asked 3)"),
    (["--lr", "0.5"], "cannot change 'lr' when resuming (it was 0.05, asked 0.5)"),
    (["--latency-ms", "20", "201"], "cannot change 'devices.latency_ms'"),
    (["--algo", "fedprox"], "cannot change 'algo'"),
    (["--out", "/tmp"], "cannot change 'out' when resuming"),
    (["--out", ""], "cannot change 'out' when resuming"),
    (["--name", "other"], "cannot change 'name' when resuming: the run is 'r'"),
    (["--seed", "1"], "cannot change 'seed'"),
    (["--seed", "-1"], "cannot change 'seed'"),
    (["--rounds", "nan"], "rounds: cannot use 'nan'"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else None)
def test_resume_refuses_what_would_make_the_record_lie(finished_run, tmp_path, capsys, extra, expected):
    import shutil

    d = tmp_path / "r"
    shutil.copytree(finished_run, d)
    before = (d / "config.json").read_text()
    _one_line(["run", "--resume", str(d), "--rounds", "3", *extra], capsys, expected)
    assert (d / "config.json").read_text() == before


@pytest.mark.parametrize("target,expected", [
    (lambda t: t / "nope", "no config.json in it"),
    (lambda t: t, "no config.json in it"),
    (lambda t: (t / "f").write_text("x") and t / "f", "no config.json in it"),
    (lambda t: Path("/proc/self"), "no config.json in it"),
], ids=["missing", "empty dir", "a file", "/proc/self"])
def test_resume_targets_that_are_not_runs_are_one_line(tmp_path, capsys, target, expected):
    _one_line(["run", "--resume", str(target(tmp_path)), "--rounds", "3"], capsys, expected)


def test_resume_of_a_finished_run_says_how_to_go_on(finished_run, tmp_path, capsys):
    d = _copy(finished_run, tmp_path)
    _one_line(["run", "--resume", str(d)], capsys, "already finished 2 rounds; pass --rounds > 2")


def test_export_says_which_round_it_took(finished_run, tmp_path, capsys):
    """The newest checkpoint unreadable: export takes the one before and says so on stdout; the
    warning on stderr is whole words."""
    from raysfl.cli import main

    d = _copy(finished_run, tmp_path)
    assert main(["export", str(d)]) == 0
    assert "of round 2 (" in capsys.readouterr().out
    newest = d / "checkpoints" / "round_0002.pt"
    newest.write_bytes(newest.read_bytes()[:100])
    assert main(["export", str(d), "--out", str(tmp_path / "m.pt")]) == 0
    got = capsys.readouterr()
    assert "of round 1 (the newest checkpoint, round 2, is unreadable)" in got.out
    warning = [line for line in got.err.splitlines() if "warning" in line]
    assert len(warning) == 1 and warning[0].endswith("; trying the one before")


def test_old_checkpoint_fingerprints_are_still_accepted(tmp_path):
    """Checkpoints written before the fault settings became resumable carry a fingerprint
    over them (and without min_included): still accepted."""
    import hashlib
    import json

    from raysfl.config import Config

    cfg = Config().to_dict()
    old = {k: v for k, v in cfg.items() if k not in checkpoint._LEGACY_FREE | checkpoint._ADDED | set(checkpoint._LATER)}
    legacy = hashlib.sha256(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:16]
    state = _state(1)
    state["config_fingerprint"] = legacy
    (tmp_path / "checkpoints").mkdir()
    torch.save(checkpoint._encode(state), tmp_path / "checkpoints" / "round_0001.pt")
    assert checkpoint.load_latest(tmp_path, cfg)["round"] == 1


# ------------------------------------------------------------------ Ray address (a fresh process each)


def _run_cli(args, env_extra, cwd, timeout=120):
    import os
    import subprocess
    import sys

    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-m", "raysfl", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env=env)


@pytest.mark.parametrize("address,expected", [
    ("not-a-host", "RAY_ADDRESS='not-a-host' is not a Ray address"),
    ("not-a-host.invalid:6379", "host 'not-a-host.invalid' does not resolve"),
    ("127.0.0.1:1", "no Ray cluster answers at 127.0.0.1:1"),
])
def test_bad_ray_address_fails_fast_with_one_line(address, expected, tmp_path):
    import time

    t0 = time.monotonic()
    proc = _run_cli(["--out", str(tmp_path / "runs"), "--rounds", "1"], {"RAY_ADDRESS": address}, tmp_path)
    took = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("raysfl: error: ") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 30, f"took {took:.0f} s"  # includes starting Python and importing torch
    assert not (tmp_path / "runs").exists()  # refused before anything was written


@pytest.mark.parametrize("address,expected", [
    ("127.0.0.1:1", "start a head node there (ray start --head --port=1)"),
    ("ray://127.0.0.1:1", "Ray Client server: start the head with ray start --head --ray-client-server-port=1"),
    ("http://127.0.0.1:8265", "is a dashboard (job submission) address, which a driver cannot connect to: submit "
                              "the run as a job (ray job submit --address http://127.0.0.1:8265 -- raysfl run"),
])
def test_ray_address_hints_fit_the_kind_of_address(address, expected):
    from raysfl.runtime.placement import check_ray_address

    with pytest.raises(ConfigError) as e:
        check_ray_address(address, timeout=2)
    assert expected in str(e.value) and "\n" not in str(e.value)


# ------------------------------------------------------------------ a checkpoint that does not fit the model


def _misshapen(run_dir, tmp_path, part):
    """A copy of ``run_dir`` whose newest checkpoint has one tensor of server 0 in another shape:
    its model's last tensor (``model``) or a momentum buffer of parameter 3 (``opt``). Returns the
    copy, the checkpoint and the (key, shape written, shape the run has)."""
    d = _copy(run_dir, tmp_path)
    path = d / "checkpoints" / "round_0002.pt"
    state = torch.load(path, weights_only=True)
    server = state["federation"]["servers"][0]
    if part == "model":
        key = list(server["model"])[-1]
        want = tuple(server["model"][key]["__ndarray__"].shape)
        server["model"][key]["__ndarray__"] = torch.zeros(3, 3)
    else:
        key, want = "3.momentum_buffer", tuple(list(server["model"].values())[3]["__ndarray__"].shape)
        server["opt"][key] = {"__ndarray__": torch.zeros(3, 3)}
    torch.save(state, path)
    manifest = d / "checkpoints" / checkpoint.MANIFEST  # as if the run had written it so (another model)
    entries = json.loads(manifest.read_text())
    entries["2"]["sha256"] = checkpoint.file_digest(path)
    manifest.write_text(json.dumps(entries))
    return d, path, (key, (3, 3), want)


@pytest.mark.parametrize("where", ["driver", pytest.param("actor", marks=pytest.mark.slow)])  # actor: 5 s each
@pytest.mark.parametrize("part", ["model", "opt"])
def test_checkpoint_of_another_shape_is_refused_with_one_line(finished_run, tmp_path, capsys, monkeypatch, part,
                                                              where):
    """A server model's tensor, or an optimiser's buffer, of another shape in the checkpoint: one
    line naming the file, the key and both shapes -- checked in the driver before anything reaches
    an actor, and by the server role as it loads (``actor``: the driver's check left out, as for
    an algorithm whose roles it cannot know), reduced to one line without Ray's traceback."""
    d, path, (key, got, want) = _misshapen(finished_run, tmp_path, part)
    if where == "actor":
        import raysfl.runtime.checkpoint_fit

        monkeypatch.setattr(raysfl.runtime.checkpoint_fit, "check_checkpoint", lambda *a, **k: None)
    before = path.read_bytes()
    whose = ("server 0's" if where == "driver" else "the server's") + (" model" if part == "model" else
                                                                       " optimiser state")
    theirs = "the run's" if part == "model" else "its parameter's"
    line = _one_line(["run", "--resume", str(d), "--rounds", "3"], capsys,
                     f"checkpoint {path} does not fit the run's model: {whose} '{key}' has shape {got}, "
                     f"{theirs} is {want}; resume with the model the run started with")
    assert "\x1b" not in line and "ray::" not in line
    assert path.read_bytes() == before


def test_a_model_that_drops_the_batch_dimension_is_refused_before_training(quick):
    """A block whose forward folds the batch away (right for the one sample the check used to
    run, wrong for every real batch): refused before any actor starts, naming the model, the block,
    where it runs at a cut, its output's shape and the (batch, ...) expected."""
    from torch import nn

    class Fold(nn.Module):
        def forward(self, x):
            return x.view(1, -1)

    blocks = [nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), Fold()), nn.Sequential(nn.Linear(16, 10))]
    with pytest.raises(ConfigError) as e:
        raysfl.run(quick(algo="splitfed_v2", dataset="digits", rounds=1), model=blocks)
    assert str(e.value) == ("model 'custom-model': block 0 (Sequential, the client side's last at cut 1) drops the "
                            "batch dimension: input (2, 1, 8, 8) gives output (1, 32), expected (2, ...); keep dim 0 "
                            "as the batch (x.flatten(1), not x.view(-1) or x.squeeze())")


# ------------------------------------------------------------------ resume trusts only its command


def _recorded(d, **settings):
    """Write ``settings`` into run directory ``d``'s config.json, as if the run had recorded them."""
    import json

    data = json.loads((d / "config.json").read_text())
    data.update(settings)
    (d / "config.json").write_text(json.dumps(data, indent=2))


def test_resume_does_not_follow_an_mlflow_uri_from_config_json(finished_run, tmp_path, capsys, monkeypatch):
    """An MLflow URI in config.json (which would receive the model and checkpoints) is shown in one
    line and not contacted; the resume's command gives it (--mlflow) or trusts the file
    (--trust-run-config). The recorded out is not followed either."""
    import raysfl.trackers
    from raysfl.cli import build_parser, config_from_args, main

    d = _copy(finished_run, tmp_path)
    uri = "http://tracker.example:5000"
    arts = "s3://bucket/raysfl"  # where MLflow would put the artifacts: a destination as well
    _recorded(d, mlflow=uri, mlflow_artifacts=arts, out=str(tmp_path / "elsewhere"))

    def contacted(u):
        raise AssertionError(f"MLflow at {u} was contacted")

    monkeypatch.setattr(raysfl.trackers, "_client", contacted)
    resume = ["run", "--resume", str(d), "--rounds", "3", "--no-progress"]
    cfg = config_from_args(build_parser().parse_args(resume))
    assert cfg.mlflow is None and cfg.mlflow_artifacts is None
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"raysfl: config.json names mlflow URI {uri}; not used -- pass --mlflow {uri} again or "
                     f"--trust-run-config",
                     f"raysfl: config.json names mlflow artifact location {arts}; not used -- pass "
                     f"--mlflow-artifacts {arts} again or --trust-run-config"]
    again = config_from_args(build_parser().parse_args(resume + ["--mlflow", "sqlite:///mine.db",
                                                                 "--mlflow-artifacts", "mine"]))
    assert (again.mlflow, again.mlflow_artifacts) == ("sqlite:///mine.db", "mine")
    assert capsys.readouterr().err == ""
    trusted = config_from_args(build_parser().parse_args(resume + ["--trust-run-config"]))
    assert (trusted.mlflow, trusted.mlflow_artifacts) == (uri, arts)
    assert f"mlflow URI {uri} (--trust-run-config)" in capsys.readouterr().err.splitlines()[0]
    assert main(resume) == 0, capsys.readouterr().err  # the run itself contacts nothing
    assert "names mlflow URI" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere").exists()
    _one_line(["run", "--trust-run-config", "--rounds", "1"], capsys, "--trust-run-config goes with --resume")


@pytest.mark.parametrize("where,expected", [
    ("run_dir", "which would be imported from inside the run directory"),
    ("nowhere", "which is not importable here (not installed, not on the Python path)"),
])
def test_resume_imports_recorded_plugins_only_from_this_environment(finished_run, tmp_path, capsys, monkeypatch,
                                                                      where, expected):
    """A plugin module config.json records is not imported from inside the run directory (code
    that came with it), nor when this environment lacks it: one line naming the module."""
    d = _copy(finished_run, tmp_path)
    name = f"came_with_the_run_{where}"
    if where == "run_dir":  # as `python -m raysfl run --resume .` from inside it would find it
        (d / f"{name}.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
        monkeypatch.syspath_prepend(str(d))
    _recorded(d, plugins=[name])
    line = _one_line(["run", "--resume", str(d), "--rounds", "3", "--no-progress"], capsys, expected)
    assert f"names plugin module '{name}'" in line
    assert not (tmp_path / "ran").exists() and name not in __import__("sys").modules


def test_resume_names_the_plugin_modules_it_imports_first(finished_run, tmp_path, capsys, monkeypatch):
    """A recorded plugin importable here is imported, and named (with its file) in the resume's first line."""
    import raysfl.algorithms
    from raysfl.cli import build_parser, config_from_args

    d = _copy(finished_run, tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "plugin_of_mine.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mine"))
    monkeypatch.setattr(raysfl.algorithms, "PLUGINS", list(raysfl.algorithms.PLUGINS))
    _recorded(d, plugins=["plugin_of_mine"])
    try:
        config_from_args(build_parser().parse_args(["run", "--resume", str(d), "--rounds", "3"]))
        first = capsys.readouterr().err.splitlines()[0]
    finally:
        __import__("sys").modules.pop("plugin_of_mine", None)
    assert first == (f"raysfl: resuming {d} with plugin module plugin_of_mine "
                     f"({tmp_path / 'mine' / 'plugin_of_mine.py'}) as its config.json records")


# ------------------------------------------------------------------ issue 45: inputs that cost without bounds
# (docs/reliability.md, "Bounded config files and short echoes")


def _alias_bomb(levels: int) -> str:
    """A "billion laughs" under devices.latency_ms: 9 ** levels values from a few hundred bytes."""
    lines = ["devices:", "  latency_ms:", "    - &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    - &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_refused_while_loading(tmp_path, capsys):
    import time

    from raysfl.config import load_file

    big = tmp_path / "big.yaml"
    big.write_text(_alias_bomb(10))  # 9**10 values: expanding it (or printing it) never ends
    assert len(big.read_bytes()) < 700
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=r"holds more than 10,000 values \(.*aliases \(\*name\) expanded\)"):
        load_file(big)
    assert time.monotonic() - t0 < 2
    small = tmp_path / "small.yaml"
    small.write_text(_alias_bomb(6))  # the 426-byte one gave an 80 MB error line
    line = _one_line(["run", "--config", str(small), "--out", str(tmp_path)], capsys, "holds more than 10,000 values")
    assert len(line) < 300


@pytest.mark.parametrize("name,text,expected", [
    ("deep.yaml", "x: " + "[" * 11 + "1" + "]" * 11 + "\n", "nest deeper than 10 levels"),
    ("deep-alias.yaml", "".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else 1}]\n" for i in range(11)),
     "nest deeper than 10 levels"),
    ("list.yaml", "devices:\n  latency_ms: [" + ", ".join(map(str, range(100_000))) + "]\n",
     "holds more than 10,000 values"),
    ("list.json", '{"devices": {"latency_ms": [' + ", ".join(map(str, range(100_000))) + "]}}",
     "holds more than 10,000 values"),
    ("huge.yaml", "rounds: 2\n" + " " * (1024 * 1024), "is larger than 1024 KiB"),
])
def test_config_file_size_and_depth_are_bounded(name, text, expected, tmp_path, capsys):
    f = tmp_path / name
    f.write_text(text)
    line = _one_line(["run", "--config", str(f), "--out", str(tmp_path)], capsys, expected)
    assert len(line) < 300


@pytest.mark.parametrize("text,expected", [
    ("name: [a, b]\n", "name: cannot use ['a', 'b']; expected str | None"),  # was runs/['a', 'b']
    ("name: yes\n", "name: cannot use True; expected str | None"),  # was runs/True
    ("progress: [1]\n", "progress: cannot use [1]; expected bool"),  # was taken as on
    ("dataset: {a: 1}\n", "dataset: cannot use {'a': 1}; expected str"),
    ("resources:\n  client_placement: [PACK]\n", "resources.client_placement: cannot use ['PACK']; expected str"),
])
def test_a_list_where_a_scalar_goes_is_refused_naming_the_key(text, expected, tmp_path):
    from raysfl.config import load_file
    from raysfl.resolve import from_dict, validate

    f = tmp_path / "c.yaml"
    f.write_text(text + f"out: {tmp_path}\n")
    with pytest.raises(ConfigError) as e:
        validate(from_dict(load_file(f)))
    assert expected in str(e.value)


def test_a_config_built_in_python_is_type_checked(tmp_path):
    import numpy as np

    from raysfl.config import Config
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"name: cannot use \['a', 'b'\]; expected str"):
        validate(Config(name=["a", "b"], out=str(tmp_path)))
    with pytest.raises(ConfigError, match=r"progress: cannot use \[1\]; expected bool"):
        validate(Config(progress=[1], out=str(tmp_path)))
    cfg = validate(Config(rounds=np.int64(3), lr=np.float32(0.5), progress=np.bool_(False), out=str(tmp_path)))
    assert (type(cfg.rounds), type(cfg.lr), cfg.progress) == (int, float, False)  # NumPy scalars still work


def test_echoed_values_are_short_excerpts(tmp_path):
    from raysfl.config import Config
    from raysfl.resolve import from_dict, validate

    cases = [
        (lambda: from_dict({"devices": {"latency_ms": list(range(100_000))}}), "(a list of 100,000 items)"),
        (lambda: from_dict({"x" * 100_000: 1}), "... (100,000 characters)"),
        (lambda: from_dict({"resources": list(range(100_000))}), "section 'resources' must be a mapping"),
        (lambda: from_dict({"faults": "kill:" + "c" * 100_000}), "... (100,005 characters)"),
        (lambda: validate(Config(dataset="d" * 100_000, out=str(tmp_path))), "unknown dataset 'ddd"),
        (lambda: validate(Config(name="n" * 100_000, out=str(tmp_path))), "name must be at most 200 bytes"),
    ]
    for make, expected in cases:
        with pytest.raises(ConfigError) as e:
            make()
        # short: the value's excerpt and what is allowed (the list of settings is ~650 characters)
        assert expected in str(e.value) and len(str(e.value)) < 1200, str(e.value)[:500]


def test_non_finite_data_is_named_when_it_is_loaded():
    """NaN or inf in your own data: one line naming the array, the sample and the column when the
    data are loaded, not a "diverged ... lower --lr" after training on it."""
    import numpy as np

    from raysfl.data.custom import as_dataset

    x, y = np.random.default_rng(0).random((40, 5)), np.arange(40) % 2
    x[7, 2] = np.nan
    with pytest.raises(ConfigError, match=r"^x holds nan at sample 7, column 2 \(1 non-finite value in all\)"):
        as_dataset((x, y))
    xt = np.ones((10, 1, 2, 2))
    xt[3, 0, 1, 0] = 1e39  # beyond float32: inf once converted
    with pytest.raises(ConfigError, match=r"^x_test holds inf at sample 3, position \(0, 1, 0\)"):
        as_dataset((np.ones((30, 1, 2, 2)), np.arange(30) % 2, xt, np.arange(10) % 2))
    targets = np.ones(40)
    targets[5] = np.inf
    with pytest.raises(ConfigError, match=r"^y holds inf at sample 5 "):
        as_dataset((np.ones((40, 3)), targets), targets="values")


def test_unreachable_mlflow_server_fails_fast_with_one_line(tmp_path):
    import socket
    import time

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    proc = _run_cli(["--out", str(tmp_path / "runs"), "--rounds", "1", "--mlflow", uri], {}, tmp_path, timeout=60)
    took = time.monotonic() - t0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and f"cannot reach the MLflow tracking server '{uri}'" in lines[0], proc.stderr
    assert took < 30, f"took {took:.0f} s"  # MLflow's own client retried for 268 s
    assert not (tmp_path / "runs").exists()


def test_mlflow_stores_without_a_server_are_not_probed(monkeypatch):
    import socket

    from raysfl import trackers

    def no_network(*args, **kwargs):
        raise AssertionError("a file or database store needs no network check")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    for uri in ("file:./mlruns", "sqlite:///mlflow.db", "./mlruns"):
        trackers._check_server(uri)


@pytest.mark.parametrize("body,code", [("import sys\nsys.exit(0)\n", "0"), ("raise SystemExit(3)\n", "3")])
def test_plugin_that_exits_at_import_is_one_line(body, code, tmp_path, capsys, monkeypatch):
    import sys

    module = f"raysfl_exiting_plugin_{code}"
    (tmp_path / f"{module}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    _one_line(["run", "--plugin", module, "--out", str(tmp_path)], capsys,
              f"--plugin {module}: importing it called sys.exit({code})")
