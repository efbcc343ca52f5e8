"""The command line answers at once: ``raysfl --help``, ``raysfl run --help``, ``raysfl list`` and
every refusal of bad input (argparse's and validation's) import nothing heavy -- no torch, no
Ray, no Parquet, no plotting, no trackers (docs/architecture.md). Checked by the modules a fresh
process holds after the command, never by timings (those belong in benchmarks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "pyarrow", "matplotlib", "mlflow", "torchvision", "tensorboard", "tensorboardX", "pandas")

# run the command's own code path, then name the heavy top-level modules the process holds
_MAIN = f"""
import sys
import raysfl.cli
try:
    rc = raysfl.cli.main(sys.argv[1:])
except SystemExit as e:  # --help, --version
    rc = e.code
print("HEAVY:" + ",".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))), file=sys.stderr)
sys.exit(rc)
"""


def _heavy_after(code: str, args: list[str], cwd) -> tuple[int, str, list[str]]:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("HEAVY:"), proc.stderr[-2000:]
    heavy = [m for m in lines[-1][len("HEAVY:"):].split(",") if m]
    return proc.returncode, "\n".join(lines[:-1]), heavy


@pytest.mark.parametrize("args,rc,message", [
    (["--help"], 0, ""),
    (["--version"], 0, ""),
    (["run", "--help"], 0, ""),
    (["compare", "--help"], 0, ""),
    (["list"], 0, ""),
    (["reproduce", "--list"], 0, ""),
    (["reproduce", "gapsl", "--table", "nope"], 2, "gapsl has no table 'nope'; allowed: main, ablations, eta"),
    (["reproduce", "nope"], 2, "unknown paper 'nope'"),
    (["tune", "--help"], 0, ""),
    (["tune", "--grid", "lr=0.1,x"], 2, "--grid lr=0.1,x: allowed: comma-separated numbers"),
    (["tune", "--grid", "lr=0.1", "--validation", "0"], 2, "tuning reads a validation split held out of the training"),
    (["tune", "--grid", "server_lr=0.1", "--algo", "fedavg"], 2, "--grid server_lr: a fedavg run does not read it"),
    (["run", "--validation", "0.9"], 2, "validation must be a share of the training split in [0, 0.5]"),
    (["run", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["run", "--rounds", "-1"], 2, "rounds must be between 1 and 10,000,000, got -1"),
    (["run", "--algo", "nope"], 2, "unknown algorithm 'nope'"),
    (["run", "--cut", "9"], 2, "cut 9 is not valid for model 'cnn'; valid cuts: 1..3"),
    (["run", "--alpha", "0"], 2, "alpha must be > 0, got 0.0"),
    (["run", "--optimizer", "x"], 2, "unknown optimizer 'x'"),
    (["run", "--client-placement", "x"], 2, "unknown resources.client_placement 'x'"),
    (["run", "--model", "vit", "--cut", "8"], 2, "cut 8 is not valid for model 'vit'; valid cuts: 1..7"),
    (["run", "--algo", "gapsl", "--k-min", "2"], 2, "k_min must be a finite number in (0, 1], got 2"),
    (["run", "--algo", "flex_sfl", "--min-cut", "5"], 2, "min_cut..max_cut = 5..2 holds no valid cut of model 'cnn'"),
    (["run", "--algo", "super_sfl", "--fusion", "x"], 2, "unknown fusion 'x'"),
    (["run", "--algo", "besplit", "--kd-c-distance", "x"], 2, "unknown kd_c_distance 'x'"),
    (["run", "--algo", "fed_pairing", "--pairing", "x"], 2, "unknown pairing 'x'"),
    (["run", "--algo", "psl", "--server-reduction", "x"], 2, "unknown server_reduction 'x'"),
    (["run", "--algo", "epsl", "--phi", "2"], 2, "phi must be a finite number in [0, 1]"),
    (["run", "--algo", "fedprox", "--mu", "-1"], 2, "mu must be a finite number >= 0"),
    (["run", "--max-restarts", "0", "--faults", "kill:client:round=2"], 2, "kill faults need --max-restarts >= 1"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_commands_and_refusals_import_nothing_heavy(args, rc, message, tmp_path):
    code, stderr, heavy = _heavy_after(_MAIN, args, tmp_path)
    assert code == rc, stderr
    assert message in stderr
    assert heavy == [], f"raysfl {' '.join(args)} imported {heavy}"


def test_python_m_raysfl_help_imports_nothing_heavy(tmp_path):
    """The module entry point itself (``python -m raysfl``), seen through ``-X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "raysfl", "--help"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "usage: raysfl" in proc.stdout
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "raysfl" in imported and not imported & set(HEAVY), sorted(imported & set(HEAVY))


_VALIDATE = f"""
import sys
from raysfl.algorithms import ALGORITHMS
from raysfl.config import Config
from raysfl.resolve import validate

for name, spec in ALGORITHMS.items():
    validate(Config(algo=name, dataset="digits", out=sys.argv[1]))  # the planner is built too
    spec.make_planner(Config(algo=name))
print("HEAVY:" + ",".join(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))), file=sys.stderr)
"""


def test_every_algorithm_validates_without_torch(tmp_path):
    """Every built-in algorithm's spec, checks and planner are light; its other roles are
    imported only where they run."""
    code, stderr, heavy = _heavy_after(_VALIDATE, [str(tmp_path / "runs")], ROOT)
    assert code == 0, stderr
    assert heavy == []


def test_a_role_named_by_path_is_imported_on_first_use():
    from raysfl.algorithms import ALGORITHMS
    from raysfl.algorithms.roles.client import ClientSide
    from raysfl.algorithms.roles.planner import Planner
    from raysfl.algorithms.spec import Algorithm, role

    assert Algorithm.planner is Planner and Algorithm.client is ClientSide
    assert ALGORITHMS["gapsl"].planner.__module__ == "raysfl.algorithms.baselines.planner"

    class Mine(Algorithm):
        client = role("raysfl.algorithms.baselines.fedavg:ProximalClient")

    assert Mine.client.__name__ == "ProximalClient" and Mine.server is Algorithm.server
    with pytest.raises(ValueError, match="package.module:Class"):
        role("raysfl.algorithms.roles.client.ClientSide")


_RUN_WATCHING_TORCH = """
import sys, threading
import raysfl.cli

first = []


class FirstImportOfTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not first:
            first.append(threading.current_thread().name)
        return None


sys.meta_path.insert(0, FirstImportOfTorch())
rc = raysfl.cli.main(sys.argv[1:])
print("TORCH FIRST IMPORTED BY:" + ",".join(first), file=sys.stderr)
sys.exit(rc)
"""


def test_a_run_starts_ray_while_its_set_up_imports_torch(tmp_path):
    """A run's driver starts Ray before anything on its own thread imports torch: torch (about
    1.1 s of imports) comes in with the model, on the set-up thread that runs beside Ray's start
    (``runtime.experiment``), so the two overlap. Modules the driver needs before Ray is up
    (``runtime.placement``) import torch only inside the functions that use it."""
    proc = subprocess.run([sys.executable, "-c", _RUN_WATCHING_TORCH, "run", "--algo", "splitfed_v2", "--clients", "2",
                           "--rounds", "1", "--local-steps", "1", "--out", str(tmp_path), "--num-cpus", "2",
                           "--no-progress"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    who = proc.stderr.strip().splitlines()[-1]
    assert who.startswith("TORCH FIRST IMPORTED BY:raysfl-setup"), who
