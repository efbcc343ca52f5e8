"""Command line: ``raysfl run``, ``compare``, ``tune``, ``reproduce``, ``plot``, ``export``, ``list`` (also
``python -m raysfl``).

Flags are generated from the config dataclasses, so every field is a flag
(``clients_per_round`` -> ``--clients-per-round``; ``resources.client_actors`` ->
``--client-actors``; an algorithm's params, e.g. FedProx's ``mu`` -> ``--mu``, which goes to
the run's algorithm). Precedence: defaults < ``--config FILE`` < flags. Bad input prints one
line ``raysfl: error: ...`` and exits with status 2, before Ray starts.

``--plugin MODULE`` (before or after the command) imports a module of yours that registers
algorithms (``@raysfl.algorithms.register``): they are listed, take flags and run like the
built-in ones. Installed packages can declare a ``raysfl.algorithms`` entry point instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from raysfl.config import Config, DeviceConfig, ResourceConfig, load_file, type_name
from raysfl.errors import ConfigError, RunFailed, first_line
from raysfl.flags import seed_list

_SKIP = {"devices", "resources", "algo_params"}
KNOB = "knob"  # the section algorithm knobs arrive in from the command line, routed to the run's algorithm


class _Parser(argparse.ArgumentParser):
    """One-line errors with a "did you mean" where a flag or command is mistyped; no abbreviations
    (``--roun 3`` is refused, not taken for ``--rounds``, which a later flag could make ambiguous)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        if extras:  # suggestions come from the command's own flags
            self.error("unrecognized arguments: " + " ".join(extras), getattr(ns, "command", None))
        return ns

    def error(self, message, command: str | None = None):  # one line, exit 2 (argparse's usage dump is noise)
        raise ConfigError(message + did_you_mean(message, self, command))


def _parsers(parser: argparse.ArgumentParser, command: str | None) -> list[argparse.ArgumentParser]:
    """``parser`` and, where ``command`` names one of its subcommands, that subcommand's parser."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            out.append(action.choices[command])
    return out


def did_you_mean(message: str, parser: argparse.ArgumentParser, command: str | None = None) -> str:
    """`` (did you mean --rounds?)`` for an argparse error about a mistyped flag (among ``command``'s
    flags) or choice, else ""."""
    import difflib
    import re

    if message.startswith("unrecognized arguments: "):
        flags = {o for p in _parsers(parser, command) for o in p._option_string_actions if o.startswith("--")}
        given = [a.split("=", 1)[0] for a in message.split(": ", 1)[1].split() if a.startswith("--")]
        close = [m for a in given for m in difflib.get_close_matches(a, sorted(flags), n=1, cutoff=0.75)]
        return f" (did you mean {', '.join(dict.fromkeys(close))}?)" if close else ""
    m = re.match(r"argument \S+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if m:
        choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
        close = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.6)
        return f" (did you mean '{close[0]}'?)" if close else ""
    return ""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _choices() -> dict[str, tuple[str, ...]]:
    from raysfl.algorithms import ALGORITHMS
    from raysfl.config import (AGGREGATION_WEIGHTS, CLIENT_BANK, CO_HOST, DEVICE_PAYLOADS, DIRECT_PAYLOADS, EPOCH_RULES,
                               EVAL_OVERLAP, OPTIMIZERS, SERVER_STREAM, STRATEGIES, TRANSFER_DTYPES,
                               RUN_AHEAD, SNAPSHOT_REFS, UPDATE_SUMS)
    from raysfl.data import DATASETS, PARTITIONERS
    from raysfl.models import MODELS
    from raysfl.objective import BUILT_IN as LOSSES

    return {"algo": tuple(ALGORITHMS), "dataset": tuple(DATASETS), "model": tuple(MODELS),
            "partition": tuple(PARTITIONERS), "optimizer": tuple(OPTIMIZERS), "transfer_dtype": TRANSFER_DTYPES,
            "client_placement": STRATEGIES, "server_placement": STRATEGIES, "epoch": EPOCH_RULES,
            "aggregation_weights": AGGREGATION_WEIGHTS, "loss": tuple(LOSSES), "direct_payloads": DIRECT_PAYLOADS,
            "device_payloads": DEVICE_PAYLOADS, "co_host": CO_HOST, "eval_overlap": EVAL_OVERLAP,
            "client_bank": CLIENT_BANK, "server_stream": SERVER_STREAM, "update_sums": UPDATE_SUMS,
            "snapshot_refs": SNAPSHOT_REFS, "run_ahead": RUN_AHEAD}


def _default_text(cls, f) -> str:
    """What a flag defaults to, in words (paper settings included)."""
    from raysfl.algorithms.knobs import knob_of
    from raysfl.config import NONE_MEANS, RUN_DEFAULTS
    from raysfl.flags import NONE_DEFAULTS

    default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if cls is Config and f.name in RUN_DEFAULTS:
        return f"the algorithm's paper setting, else {RUN_DEFAULTS[f.name]}"
    if default is None:
        text = NONE_DEFAULTS.get(f.name) or knob_of(f).unset or "unset"
        return f"the algorithm's paper setting, else {text}" if cls is Config and f.name in NONE_MEANS else text
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, tuple):
        return " ".join(f"{v:g}" for v in default)
    return "none" if default == "" else str(default)


def _add_fields(groups, cls, dest_prefix: str, taken: set[str], group_of=None, help_of=None) -> None:
    """A flag per field of dataclass ``cls`` in ``groups[group_of(name)]``, with its help, default
    and choices (a knob already added for another algorithm sharing it is not added twice;
    registration refuses knobs that clash with a shared flag or mean two things)."""
    choices = _choices()
    for f in dataclasses.fields(cls):
        if f.name in _SKIP:
            continue
        flag = "--metric" if cls is Config and f.name == "metrics" else _flag(f.name)  # once per metric
        if flag in taken:
            continue
        taken.add(flag)
        t = type_name(f.type)
        text = f"{help_of(f.name)} (default: {_default_text(cls, f)})".replace("%", "%%")
        kwargs = {"dest": dest_prefix + f.name, "default": argparse.SUPPRESS, "help": text}
        group = groups[group_of(f.name)]
        if flag == "--metric":  # repeatable (raysfl.user_metrics)
            group.add_argument(flag, action="append", metavar="[NAME=]MODULE:FUNCTION", **kwargs)
        elif t.startswith("bool"):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        elif t.startswith("tuple"):
            group.add_argument(flag, nargs=2, metavar=("LOW", "HIGH"), **kwargs)
        elif f.name in choices and cls in (Config, ResourceConfig):  # checked by validate, like a file's
            group.add_argument(flag, metavar="{" + ",".join(choices[f.name]) + "}", **kwargs)
        else:
            group.add_argument(flag, metavar=f.name.upper(), **kwargs)


def _add_run_flags(parser, taken: set[str]) -> None:
    """Every run setting as a flag (those in ``taken`` excepted), grouped: data, model,
    training, evaluation, faults, devices, resources, then each algorithm's knobs."""
    from raysfl.algorithms import ALGORITHMS
    from raysfl.algorithms.knobs import knob_of
    from raysfl.flags import GROUPS, SETTINGS

    groups = {key: parser.add_argument_group(title) for key, title in GROUPS.items()}
    setting = lambda name: SETTINGS.get(name, ("training", ""))  # noqa: E731
    for cls, prefix in ((Config, ""), (DeviceConfig, "devices."), (ResourceConfig, "resources.")):
        _add_fields(groups, cls, prefix, taken, lambda n: setting(n)[0], lambda n: setting(n)[1])
    for name, cls in ALGORITHMS.items():
        if dataclasses.fields(cls.params_cls):
            one = {"algo": parser.add_argument_group(f"{name} (--algo {name})")}
            # a knob several algorithms share (one params dataclass) is listed under the first
            helps = {f.name: knob_of(f).help for f in dataclasses.fields(cls.params_cls)}
            _add_fields(one, cls.params_cls, f"{KNOB}.", taken, lambda n: "algo", helps.get)


def build_parser() -> argparse.ArgumentParser:
    from raysfl import __version__

    p = _Parser(prog="raysfl", description="Ray-native split federated learning")
    p.add_argument("--version", action="version", version=f"raysfl {__version__}")
    _add_plugin_flag(p)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    run = sub.add_parser("run", help="run one experiment",
                         usage="raysfl run [--config FILE] [--algo ALGO] [flags ...] (every flag below, by group)")
    run.add_argument("--config", dest="config_file", default=None, metavar="FILE", help="YAML or JSON config")
    run.add_argument("--no-faults", dest="faults", action="store_const", const="", default=argparse.SUPPRESS,
                     help="no fault schedule, e.g. to resume a run without the faults it was started with "
                          "(default: --faults)")
    run.add_argument("--trust-run-config", action="store_true", default=argparse.SUPPRESS,
                     help="with --resume: use the destinations the run's config.json names (its --mlflow URI) "
                          "and import its plugin modules also from inside the run directory; ours (default: off: "
                          "they are named and not used; give --mlflow again instead)")
    _add_plugin_flag(run)
    _add_run_flags(run, {"--config", "--help", "--no-faults", "--plugin", "--trust-run-config"})
    cmp = sub.add_parser("compare", help="run several algorithms on identical data and seeds; table and plots",
                         description="Run several algorithms on identical data, partitions, device profiles and "
                                     "seeds; write results.md, the Parquet tables and the plots into --out. An "
                                     "interrupted comparison (Ctrl-C, SIGTERM) writes the table of the runs that "
                                     "finished, marked partial; the same command with the same --out continues it, "
                                     "reusing the finished runs and resuming the others from their checkpoints.")
    cmp.add_argument("--algos", required=True, metavar="A,B,...", help="algorithms to compare, comma-separated")
    cmp.add_argument("--seeds", type=seed_list, default=seed_list("3"), metavar="N|S,S,...",
                     help="N: seeds 0..N-1; or the seeds themselves, comma-separated, e.g. 0,3,7 (default: 3)")
    cmp.add_argument("--target", type=float, default=0.8, metavar="ACC",
                     help="accuracy for the rounds/time/bytes-to-target columns (default 0.8)")
    cmp.add_argument("--parallel", type=int, default=None, metavar="N",
                     help="runs at once (default: as many as the Ray cluster's CPUs/GPUs hold, at least 1)")
    cmp.add_argument("--config", dest="config_file", default=None, metavar="FILE", help="YAML or JSON config")
    _add_plugin_flag(cmp)
    _add_run_flags(cmp, {"--config", "--help", "--algos", "--seeds", "--target", "--parallel", "--algo", "--seed",
                         "--name", "--resume", "--plugin"})
    plot = sub.add_parser("plot", help="draw accuracy against rounds, simulated time and bytes from run directories")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", default=".", metavar="DIR", help="where the PNGs go (default: here)")
    plot.add_argument("--metric", default=None, metavar="COLUMN",
                      help="metrics.parquet column on the y axis (default: test_accuracy, or test_loss for runs "
                           "without an accuracy; e.g. train_loss, test_accuracy_local, acc_mix)")
    plot.add_argument("--band", choices=("std", "minmax", "none"), default="std",
                      help="band over the seeds of a group: mean ± std (default), min-max, or none")
    plot.add_argument("--formats", default="png,pdf", metavar="EXT,...",
                      help="file formats to write (default png,pdf); PDFs embed TrueType fonts")
    plot.add_argument("--size", default="6.4x4.4", metavar="WxH",
                      help="figure size in inches, e.g. 3.5x2.6 for one IEEE column (default 6.4x4.4)")
    plot.add_argument("--legend", default="best", metavar="WHERE",
                      help="legend placement: best (covers the fewest points), outside (right of the axes), "
                           "none, or a matplotlib location such as 'lower right' (default best)")
    plot.add_argument("--caption", action=argparse.BooleanOptionalAction, default=True,
                      help="the shared settings as a grey caption under the axes (default: on; its text is "
                           "in caption.txt either way)")
    exp = sub.add_parser("export", help="write a run's trained model as a plain PyTorch state_dict file")
    exp.add_argument("run_dir", metavar="RUN_DIR")
    exp.add_argument("--out", default=None, metavar="FILE",
                     help="where the state_dict goes; with --clients a directory (default: RUN_DIR/model.pt, "
                          "with --clients RUN_DIR/client_models)")
    exp.add_argument("--round", type=int, default=None, metavar="N",
                     help="the checkpoint of round N (default: the newest; see --keep-checkpoints)")
    exp.add_argument("--clients", action="store_true",
                     help="the model each client runs, one file per client, where clients keep their own "
                          "(psl, gapsl, flex_sfl)")
    _add_plugin_flag(sub.add_parser("list", help="list algorithms, data sets, models (with their valid cuts) and "
                                                 "partitioners"))
    from raysfl.reproduce.command import add_parser as add_reproduce
    from raysfl.tuning.command import add_parser as add_tune

    add_reproduce(sub)
    add_tune(sub, _add_run_flags, _add_plugin_flag)
    return p


def _add_plugin_flag(parser) -> None:
    parser.add_argument("--plugin", action="append", metavar="MODULE", default=argparse.SUPPRESS,
                        help="import MODULE (from the current directory or installed) for the algorithms it "
                             "registers with @raysfl.algorithms.register; repeatable (default: none)")


def take_plugins(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the modules named by ``--plugin MODULE`` / ``--plugin=MODULE`` anywhere in ``argv``, the
    other arguments): plugins are loaded before the parser is built, so their algorithms' flags exist."""
    plugins, rest, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--plugin":
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise ConfigError("--plugin needs a module name, e.g. --plugin my_algo")
            plugins.append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--plugin="):
            plugins.append(a.split("=", 1)[1])
        else:
            rest.append(a)
        i += 1
    return plugins, rest


def _export(ns: argparse.Namespace) -> int:
    """``raysfl export``: the global model (or each client's) as ``torch.save(state_dict)``."""
    from pathlib import Path

    import torch

    from raysfl.api import load_run

    res = load_run(ns.run_dir)
    if ns.clients:
        states = res.client_state_dicts(ns.round)
        if not states:
            raise ConfigError(f"'{res.config.algo}' has no models of the clients' own (every client runs the "
                              f"global model): export without --clients")
        out = Path(ns.out or Path(ns.run_dir) / "client_models")
        out.mkdir(parents=True, exist_ok=True)
        for c, state in states.items():
            _save(torch, state, out / f"client_{c:04d}.pt")
        print(f"{len(states)} client models ({res.config.model}) of {_which_round(res)} -> {out}/client_NNNN.pt")
        return 0
    out = Path(ns.out or Path(ns.run_dir) / "model.pt")
    state = res.state_dict(ns.round)
    out.parent.mkdir(parents=True, exist_ok=True)
    _save(torch, state, out)
    print(f"{out}: state_dict of model '{res.config.model}' of {_which_round(res)} ({len(state)} tensors, "
          f"{sum(v.numel() for v in state.values()):,} values); load it with "
          f"model.load_state_dict(torch.load('{out}', weights_only=True))")
    return 0


def _save(torch, state: dict, path: Path) -> None:
    """``torch.save``, with a file that cannot be written as one line (torch raises a RuntimeError
    of its C++ writer for it, not an OSError)."""
    try:
        torch.save(state, path)
    except (OSError, RuntimeError) as e:
        why = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1][-160:]
        raise ConfigError(f"cannot write '{path}' ({why.strip()}); give --out a file in a writable directory") from None


def _which_round(res) -> str:
    """``round N``, and why when it is not the newest checkpoint (that one was unreadable)."""
    from raysfl.checkpoint import rounds_saved

    newest = max(rounds_saved(res.run_dir), default=None)
    r = res.checkpoint_round
    if newest is not None and r is not None and r < newest:
        return f"round {r} (the newest checkpoint, round {newest}, is unreadable)"
    return f"round {r}"


def _flags(ns: argparse.Namespace, skip=("command", "config_file", "plugin", "trust_run_config")) -> dict:
    """The flags the user gave, nested by section (``resources.client_cpus`` -> resources: {...})."""
    flat: dict = {}
    for key, value in vars(ns).items():
        if key in skip:
            continue
        section, _, name = key.rpartition(".")
        if key == "metrics" and isinstance(value, list):  # --metric given once per metric
            value = ",".join(value)
        if section:
            flat.setdefault(section, {})[name] = value
        else:
            flat[name] = value
    return flat


def route_knobs(settings: dict, algos: list[str]) -> dict:
    """Put the algorithm knobs given as flags (the ``knob`` section) under the section of each of
    ``algos`` (the run's algorithm, or a comparison's) that has them; a knob none of them has
    goes to its owner's section, which the config's validation then refuses with one line
    naming the owner."""
    from raysfl.algorithms import ALGORITHMS, get_algorithm

    knobs = settings.pop(KNOB, {})
    for name, value in knobs.items():
        owners = [a for a in algos if name in {f.name for f in dataclasses.fields(get_algorithm(a).params_cls)}]
        if not owners:
            owners = [a for a, cls in ALGORITHMS.items() if name in {f.name for f in dataclasses.fields(cls.params_cls)}][:1]
        for a in owners:
            settings.setdefault(a, {})[name] = value  # over a config file's value for it
    return settings


def _compare(ns: argparse.Namespace, argv: list[str]) -> int:
    """``raysfl compare``; ``argv``: the command's arguments as given, for the command that
    continues an interrupted comparison (with ``--out`` added where the directory was made up)."""
    import shlex
    import time
    from pathlib import Path

    from raysfl.compare import compare, comparison_configs

    import math

    if not (math.isfinite(ns.target) and 0 < ns.target <= 1):
        raise ConfigError(f"--target must be an accuracy in (0, 1], got {ns.target}")
    settings = _flags(ns, skip=("command", "config_file", "algos", "seeds", "target", "parallel", "plugin"))
    algos = [a.strip() for a in ns.algos.split(",") if a.strip()]
    settings = route_knobs(_merge(load_file(ns.config_file) if ns.config_file else {}, settings), algos)
    given = settings.pop("out", None)
    out_dir = Path(given or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S"))
    try:
        rows = compare(comparison_configs(algos, settings, ns.seeds, out_dir), out_dir, ns.target, ns.parallel)
    except KeyboardInterrupt as e:  # the same command, into the same directory, continues it
        e.raysfl_continue = shlex.join(["raysfl", *argv, *([] if given else ["--out", str(out_dir)])])
        raise
    print((out_dir / "results.md").read_text())
    print(f"comparison directory: {out_dir} ({len(rows)} algorithms)")
    return 0


def _continued(command, ns: argparse.Namespace, given: list[str], kept: str) -> int:
    """Run a command that searches with Ray Tune (``reproduce``, ``tune``) so that SIGINT and
    SIGTERM end it as they end a run: one line saying what was kept and the command to go on
    (Tune's own SIGINT handler is off: raysfl.tuning.search)."""
    import shlex

    from raysfl.runtime import interrupts

    try:
        with interrupts.handling():
            return command(ns)
    except KeyboardInterrupt as e:
        e.raysfl_compare = kept
        e.raysfl_continue = shlex.join(["raysfl", *given])
        raise


def _tune(ns: argparse.Namespace) -> int:
    """``raysfl tune``: the run the flags describe (defaults < --config FILE < flags), searched."""
    from raysfl.resolve import from_dict
    from raysfl.tuning.command import FLAGS, run

    flat = _flags(ns, skip=("command", "config_file", "plugin", *FLAGS))
    data = _merge(load_file(ns.config_file) if ns.config_file else {}, flat)
    return run(ns, from_dict(route_knobs(data, [str(data.get("algo") or Config().algo)])))


def config_from_args(ns: argparse.Namespace) -> Config:
    """defaults < --config FILE < flags; ``--resume`` reloads the run's own config."""
    from raysfl.api import resume_config
    from raysfl.resolve import from_dict

    from raysfl.api import saved_config

    flat = _flags(ns)
    trust = getattr(ns, "trust_run_config", False)
    if "resume" in flat:
        if getattr(ns, "config_file", None):
            raise ConfigError(f"--config cannot be combined with --resume: a resumed run reads its own "
                              f"{flat['resume']}/config.json (flags may change what a resume allows)")
        algo = saved_config(flat["resume"]).get("algo") if (Path(flat["resume"]) / "config.json").is_file() else None
        route_knobs(flat, [flat.get("algo") or algo or Config().algo])
        return resume_config(flat.pop("resume"), flat, trust_run_config=trust)
    if trust:
        raise ConfigError("--trust-run-config goes with --resume RUN_DIR (it trusts that run's config.json); "
                          "a new run takes its destinations from its flags and --config")
    data = _merge(load_file(ns.config_file) if ns.config_file else {}, flat)
    return from_dict(route_knobs(data, [str(data.get("algo") or Config().algo)]))


def _merge(file_data: dict, flags: dict) -> dict:
    """File settings overridden by flags, section by section (keys normalised to underscores)."""
    out = {k.replace("-", "_"): v for k, v in file_data.items()}
    for k, v in flags.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**{sk.replace("-", "_"): sv for sk, sv in out[k].items()}, **v}
        else:
            out[k] = v
    return out


def _list() -> None:
    from raysfl.algorithms import ALGORITHMS
    from raysfl.data import DATASETS, PARTITIONERS
    from raysfl.models import MODELS

    from raysfl.flags import paper_settings

    print("algorithms (and the paper settings they default to):")
    for name, cls in ALGORITHMS.items():
        print(f"  {name:<14}{cls.summary}")
        if cls.config_defaults or cls.dataset_defaults:
            print(f"  {'':<14}defaults: {paper_settings(cls)}")
    print("datasets:     " + ", ".join(DATASETS))
    print("models (valid --cut values; the blocks before a cut run on the client):")
    for name, m in MODELS.items():  # the catalogue: nothing is built
        cuts, conv = m.cuts, m.conv_blocks
        print(f"  {name:<10}{m.num_blocks} blocks, cuts {cuts[0]}..{cuts[-1]}"
              + (f"; cuts up to {conv} keep only conv modules on the client" if conv else ""))
    print("partitioners: " + ", ".join(PARTITIONERS))


def interrupted_line(e: BaseException) -> str:
    """The one line of an interrupted run or comparison: the signal, what was kept and how to go on."""
    import shlex

    from raysfl.checkpoint import rounds_saved

    what = getattr(e, "name", "SIGINT")
    if getattr(e, "raysfl_continue", None):  # a comparison (raysfl.compare): what finished, and its command again
        done = getattr(e, "raysfl_compare", None) or "no run finished"
        return f"raysfl: interrupted ({what}); {done}; continue with: {e.raysfl_continue}"
    run_dir = getattr(e, "raysfl_run_dir", None)
    if run_dir is None:
        return f"raysfl: interrupted ({what}) before the run started; nothing was written"
    saved = rounds_saved(run_dir)
    if not saved:
        return f"raysfl: interrupted ({what}); no round was checkpointed in {run_dir}: start it again"
    return (f"raysfl: interrupted ({what}); rounds 1..{saved[-1]} are checkpointed in {run_dir}; continue with: "
            f"raysfl run --resume {shlex.quote(str(run_dir))}")


def _log_traceback(e: BaseException) -> Path:
    """Write the traceback of an unexpected error to a log file: the run directory's
    ``error.log`` when the run got that far, else a file in the temp directory."""
    import tempfile
    import time
    import traceback

    text = "".join(traceback.format_exception(e))
    run_dir = getattr(e, "raysfl_run_dir", None)
    if run_dir is not None:
        try:
            path = Path(run_dir) / "error.log"
            with path.open("a") as f:
                f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} raysfl {' '.join(sys.argv[1:])}\n{text}")
            return path
        except OSError:
            pass
    fd, name = tempfile.mkstemp(prefix=f"raysfl-error-{time.strftime('%Y%m%d-%H%M%S')}-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI. Exit status 0: done; 2: bad input (one line naming the value and what is
    allowed, before Ray starts); 1: the run failed part-way (one line; what was recorded is
    kept), a file that cannot be read or written (one line naming it), or an unexpected error
    (one line and the path of a log holding the traceback); 130 / 143: interrupted by SIGINT /
    SIGTERM (one line; the finished rounds are checkpointed). No traceback
    reaches the terminal."""
    try:
        return _main(argv)
    except ConfigError as e:
        print(f"raysfl: error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        print(f"raysfl: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, SIGINT or SIGTERM (raysfl.runtime.interrupts)
        print(interrupted_line(e), file=sys.stderr)
        return getattr(e, "exit_code", 130)
    except BrokenPipeError:  # `raysfl list | head`: the reader left; say nothing, as `ls | head` does
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        except OSError:
            pass
        return 141
    except OSError as e:  # a file or directory that cannot be read or written (full disk, permissions)
        if e.filename is not None:
            print(f"raysfl: error: {e.strerror or type(e).__name__}: '{e.filename}'", file=sys.stderr)
            return 1
        log = _log_traceback(e)
        print(f"raysfl: error: {type(e).__name__}: {first_line(e, 300)} (traceback in {log})", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - anything unanticipated: one line and where the traceback is
        log = _log_traceback(e)
        print(f"raysfl: error: unexpected {type(e).__name__}: {first_line(e, 300)} (traceback in {log})",
              file=sys.stderr)
        return 1


INTERRUPTED = (130, 143)  # main's status for SIGINT / SIGTERM


def entry() -> None:
    """The ``raysfl`` command and ``python -m raysfl``: :func:`main`, then :func:`exit_with` its
    status."""
    exit_with(main())


def exit_with(code: int) -> None:
    """Exit a program of raysfl's (the CLI, the examples) with ``code``.

    An interrupted one (130, 143) leaves by ``os._exit`` once what a normal exit runs first has
    run, in its order: ``threading._shutdown`` (the threads' own exit hooks, such as the one that
    lets idle ``concurrent.futures`` workers go, then the non-daemon threads joined), then the
    ``atexit`` handlers (Ray shut down, logs flushed). The interpreter's own teardown after that
    crashed now and then: SIGSEGV, exit -11 instead of 130, in 3 of 65 interrupted ``raysfl
    tune`` searches, every time after the last ``atexit`` handler had run (so in native code,
    Ray's or Tune's, that the teardown reaches; not pinned down further). Nothing is lost by
    skipping it: what the program keeps was written and closed, and its one line printed, before
    it got here. (Joining the threads without their exit hooks first hung where an idle
    executor's worker waits for work: MLflow's asynchronous logging, a plugin's pool.) Another
    signal meanwhile leaves at once with the same status (before, it raised a KeyboardInterrupt
    in the middle of a handler: a traceback, and the teardown this skips)."""
    import threading

    if code not in INTERRUPTED:
        sys.exit(code)
    import atexit
    import signal

    for s in (signal.SIGINT, signal.SIGTERM):  # another signal on the way out: leave at once, as asked
        try:
            signal.signal(s, lambda *_: os._exit(code))
        except ValueError:  # not the main thread
            pass
    threading._shutdown()  # what Py_FinalizeEx calls before the atexit handlers
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _main(argv: list[str] | None = None) -> int:
    from raysfl.algorithms import load_entry_points, load_plugin

    given = list(sys.argv[1:] if argv is None else argv)
    plugins, argv = take_plugins(given)
    if plugins or any(a.startswith("--metric") or a.split("=", 1)[0] == "--lr-schedule" for a in given):
        sys.path.insert(0, os.getcwd())  # a module of yours beside you, as `python -m` finds it
    for module in plugins:
        load_plugin(module)
    load_entry_points()
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command == "list":
        _list()
        return 0
    if ns.command == "compare":
        return _compare(ns, given)
    if ns.command == "plot":
        from raysfl.plots import parse_size, plot_runs

        for path in plot_runs(ns.run_dirs, ns.out, metric=ns.metric, band=ns.band,
                              formats=[f.strip() for f in ns.formats.split(",") if f.strip()],
                              size=parse_size(ns.size), caption=ns.caption, legend=ns.legend):
            print(path)
        return 0
    if ns.command == "export":
        return _export(ns)
    if ns.command == "reproduce":
        from raysfl.reproduce.command import run as reproduce

        return _continued(reproduce, ns, given, "the finished tunings and runs, each trial's rounds and each "
                                                "unfinished run's last checkpoint are cached; the same command "
                                                "goes on from them")
    if ns.command == "tune":
        return _continued(_tune, ns, given, "the search's trials are not kept")
    if ns.command != "run":
        parser.print_help()
        return 2
    from raysfl.api import run
    from raysfl.resolve import validate

    cfg = validate(config_from_args(ns))
    result = run(cfg)
    print(f"run directory: {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
