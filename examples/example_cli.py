"""What the paper examples share: their presets fill only the flags the user left out, and
they run, report errors and point at the results the same way.

Not an example itself; ``examples/<algo>.py`` import it (the script's directory is on
``sys.path`` both from a checkout and in a Ray job's working directory).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout or a Ray job's working dir

from raysfl.api import run  # noqa: E402
from raysfl.cli import build_parser, config_from_args, exit_with, interrupted_line  # noqa: E402
from raysfl.errors import ConfigError, RunFailed  # noqa: E402


def flag_given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def without(argv: list[str], flag: str) -> list[str]:
    """``argv`` minus ``flag VALUE`` / ``flag=VALUE`` (an example's own flag, not raysfl's)."""
    return [a for i, a in enumerate(argv) if not (a == flag or a.startswith(flag + "=") or (i and argv[i - 1] == flag))]


def preset_argv(algo: str, argv: list[str], preset: dict) -> list[str]:
    """``raysfl run`` arguments: ``--algo``, the user's flags, then every preset setting the
    user did not give (tuples become two values, e.g. ``--memory-gb 0.5 4``)."""
    out = ["run", "--algo", algo, *argv]
    for key, value in preset.items():
        flag = "--" + key.replace("_", "-")
        if not flag_given(argv, flag):
            out += [flag, *map(str, value)] if isinstance(value, tuple) else [flag, str(value)]
    return out


def model_preset_argv(algo: str, argv: list[str], presets: dict, default_model: dict) -> list[str]:
    """``preset_argv`` with the preset of (``--dataset``, ``--model``); the model defaults to
    ``default_model[dataset]`` (else the CNN)."""
    import argparse

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--dataset", default="digits")
    pre.add_argument("--model", default=None)
    known, _ = pre.parse_known_args(argv)
    model = known.model or default_model.get(known.dataset, "cnn")
    return preset_argv(algo, argv, {"dataset": known.dataset, "model": model,
                                    **presets.get((known.dataset, model), {})})


def traffic_line(rows: list[dict]) -> str:
    """The summary's last line: bytes both ways and wall time of the whole run."""
    return (f"bytes: {sum(r['bytes_up'] for r in rows) / 1e6:.2f} MB up, "
            f"{sum(r['bytes_down'] for r in rows) / 1e6:.2f} MB down; "
            f"wall time {rows[-1]['wall_time_total_s']:.1f} s")


def run_example(name: str, run_argv: list[str], report) -> int:
    """Run, print ``report(cfg, result)`` and where the results are; one-line errors (exit 2
    for bad settings, 1 for a failed run) and interruptions (SIGINT, SIGTERM: 130, 143, the
    finished rounds checkpointed), as the CLI prints them. An example's script ends with
    ``exit_with(main())`` (:func:`raysfl.cli.exit_with`)."""
    try:
        cfg = config_from_args(build_parser().parse_args(run_argv))
        result = run(cfg)
    except (ConfigError, RunFailed) as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM: one line, as the CLI prints it (no traceback)
        print(interrupted_line(e), file=sys.stderr)
        return getattr(e, "exit_code", 130)
    print(report(cfg, result))
    print(f"final test accuracy {result.final['test_accuracy']:.4f} after {result.final['round']} rounds")
    print(f"TensorBoard:  tensorboard --logdir {result.run_dir / 'tb'}")
    print(f"run directory: {result.run_dir}")
    return 0
