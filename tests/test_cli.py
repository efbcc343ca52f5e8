"""Bad input: one line naming the bad value and what is allowed, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = [
    (["--algo", "nosuch"], "unknown algorithm 'nosuch'; allowed:"),
    (["--dataset", "imagenet"], "unknown dataset 'imagenet'; allowed:"),
    (["--model", "gpt"], "unknown model 'gpt'; allowed:"),
    (["--alpha", "0"], "alpha must be > 0, got 0"),
    (["--alpha", "-1", "--partition", "dirichlet"], "alpha must be > 0, got -1"),
    (["--cut", "7"], "cut 7 is not valid for model 'cnn'; valid cuts: 1..3"),
    (["--clients", "4", "--clients-per-round", "5"], "clients-per-round must be between 1 and clients (4), got 5"),
    (["--clients", "2000"], "has 1437 training samples but clients=2000"),
    (["--rounds", "0"], "rounds must be between 1 and 10,000,000, got 0"),
    (["--dataset", "mnist"], "dataset 'mnist' needs --data-root"),
    (["--partition", "zipf"], "unknown partition 'zipf'; allowed:"),
    (["--lr", "fast"], "lr: cannot use 'fast'"),
    (["--algo", "super_sfl", "--fusion", "mean"], "unknown fusion 'mean'; allowed: full, no_loss, no_depth, equal"),
    (["--algo", "super_sfl", "--server-availability", "2"], "server_availability must be a finite number in [0, 1], got 2"),
]


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "raysfl", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def _assert_one_line_error(proc, expected):
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("raysfl: error: ")
    assert expected in lines[0]


@pytest.mark.parametrize("args,expected", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_flag(args, expected, tmp_path):
    _assert_one_line_error(_run(args, tmp_path), expected)


def test_missing_data_root_dir(tmp_path):
    proc = _run(["--dataset", "fashion_mnist", "--data-root", str(tmp_path / "nope")], tmp_path)
    _assert_one_line_error(proc, "nope")


@pytest.mark.parametrize("name,text,expected", [
    ("bad.yaml", "algo: [splitfed\nrounds: 3\n", "config file"),
    ("bad.json", "{\"algo\": ", "is malformed"),
    ("list.yaml", "- 1\n- 2\n", "must hold a mapping"),
    ("unknown.yaml", "rounds: 2\nspeed: 9\n", "unknown setting 'speed'"),
    ("badvalue.yaml", "rounds: two\n", "rounds: cannot use 'two'"),
])
def test_malformed_config_file(tmp_path, name, text, expected):
    f = tmp_path / name
    f.write_text(text)
    _assert_one_line_error(_run(["--config", str(f)], tmp_path), expected)


def test_missing_config_file(tmp_path):
    _assert_one_line_error(_run(["--config", str(tmp_path / "none.yaml")], tmp_path), "does not exist")


def test_list():
    proc = subprocess.run([sys.executable, "-m", "raysfl", "list"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    for word in ("splitfed_v1", "psl", "centralized", "digits", "mnist5k", "cifar100", "resnet18", "dirichlet"):
        assert word in proc.stdout


def test_config_file_and_flag_precedence(tmp_path):
    from raysfl.cli import build_parser, config_from_args

    f = tmp_path / "c.yaml"
    f.write_text("algo: fedprox\nrounds: 7\nlr: 0.2\nfedprox:\n  mu: 0.3\nresources:\n  client_actors: 3\n")
    ns = build_parser().parse_args(["run", "--config", str(f), "--rounds", "9", "--mu", "0.5"])
    cfg = config_from_args(ns)
    assert (cfg.algo, cfg.rounds, cfg.lr, cfg.algo_params.mu, cfg.resources.client_actors) == (
        "fedprox", 9, 0.2, 0.5, 3)


def test_cli_run_end_to_end(tmp_path):
    """`raysfl run` starts its own local Ray, trains, prints progress and a summary."""
    proc = subprocess.run(
        [sys.executable, "-m", "raysfl", "run", "--algo", "splitfed_v2", "--clients", "4", "--rounds", "2",
         "--local-steps", "2", "--out", str(tmp_path), "--name", "cli", "--num-cpus", "4"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "round    2/2" in proc.stderr and "final test accuracy" in proc.stderr
    assert (tmp_path / "cli" / "metrics.parquet").is_file()
    resumed = subprocess.run(
        [sys.executable, "-m", "raysfl", "run", "--resume", str(tmp_path / "cli"), "--rounds", "3",
         "--num-cpus", "4"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    import pyarrow.parquet as pq

    assert [r["round"] for r in pq.read_table(tmp_path / "cli" / "metrics.parquet").to_pylist()] == [1, 2, 3]


@pytest.mark.slow  # a whole run; CI runs the slow tests
def test_fractional_fake_gpus_fall_back_to_cpu(tmp_path):
    """Fractional GPU shares are placed by Ray (fake GPUs here); with no CUDA behind them the
    actors run on the CPU and the run completes."""
    proc = subprocess.run(
        [sys.executable, "-m", "raysfl", "run", "--algo", "splitfed_v1", "--clients", "4", "--rounds", "1",
         "--local-steps", "1", "--out", str(tmp_path), "--name", "gpu", "--num-cpus", "4", "--num-gpus", "2",
         "--client-gpus", "0.25", "--server-gpus", "0.5", "--fed-gpus", "0.25"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    clients = json.loads((tmp_path / "gpu" / "clients.json").read_text())
    assert len(clients) == 4 and sum(c["samples"] for c in clients) == 1437
    assert all(sum(c["label_histogram"]) == c["samples"] for c in clients)


def test_every_run_flag_has_help_with_its_default_and_groups_are_named():
    from raysfl.cli import build_parser

    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]
    missing = []
    for action in run._actions:
        if not action.option_strings or action.dest in ("help", "config_file"):
            continue
        text = action.help or ""
        if not text.split("(default:")[0].strip() or "(default:" not in text:
            missing.append(action.option_strings[0])
    assert not missing, f"flags without help or default: {missing}"
    titles = [g.title for g in run._action_groups]
    assert "data and federation" in titles and "training" in titles and "flex_sfl (--algo flex_sfl)" in titles
    assert run.format_help()  # renders (no stray % in any help)


def test_version_and_list_show_what_a_user_needs(capsys):
    from raysfl import __version__
    from raysfl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cnn       4 blocks, cuts 1..3" in out and "mnist5k" in out


def test_a_choice_flag_refuses_a_typo_in_one_line(capsys):
    from raysfl.cli import main

    assert main(["run", "--model", "cnnn"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cnnn" in err and "vgg16" in err


@pytest.mark.parametrize("argv,expected", [
    (["run", "--algo", "spitfed_v2"], "(did you mean 'splitfed_v2'?)"),
    (["run", "--rouns", "3"], "unrecognized arguments: --rouns 3 (did you mean --rounds?)"),
    (["run", "--roun", "3"], "unrecognized arguments: --roun 3 (did you mean --rounds?)"),  # no abbreviations
    (["compare", "--algos", "psl", "--seeds", "0,x"], "takes a count N (seeds 0..N-1) or seeds such as 0,3,7"),
    (["compare", "--algos", "psl", "--seeds", "1,1"], "seed 1 is listed twice"),
    (["compare", "--algos", "psl", "--seeds", "0"], "a count must be >= 1"),
])
def test_typos_and_abbreviations_are_refused_with_a_suggestion(capsys, argv, expected):
    from raysfl.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


def test_compare_seeds_take_a_count_or_a_list(tmp_path):
    from raysfl.cli import build_parser
    from raysfl.compare import comparison_configs

    parser = build_parser()
    assert parser.parse_args(["compare", "--algos", "psl", "--seeds", "2"]).seeds == [0, 1]
    assert parser.parse_args(["compare", "--algos", "psl", "--seeds", "0,3,7"]).seeds == [0, 3, 7]
    assert parser.parse_args(["compare", "--algos", "psl"]).seeds == [0, 1, 2]
    cfgs = comparison_configs(["psl"], {"clients": 2, "rounds": 1}, [3, 7], tmp_path)
    assert [c.seed for c in cfgs] == [3, 7] and [c.name for c in cfgs] == ["psl-s3", "psl-s7"]


def test_help_says_each_default_once():
    from raysfl.cli import build_parser

    run = build_parser()._subparsers._group_actions[0].choices["run"]
    twice = [a.option_strings[0] for a in run._actions if (a.help or "").count("default") > 1]
    assert not twice, twice


def test_a_reader_that_leaves_the_pipe_early_gets_no_error():
    """``raysfl reproduce --list | true``: the reader is gone before raysfl writes (as with
    ``| head`` on a long listing); raysfl says nothing and exits as ``ls`` would."""
    import subprocess
    import sys

    p = subprocess.run(f"{sys.executable} -m raysfl reproduce --list | true; echo rc=${{PIPESTATUS[0]}}",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=60)
    assert p.stderr == "" and p.stdout.strip() in ("rc=141", "rc=0"), (p.stdout, p.stderr)
