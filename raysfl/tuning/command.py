"""``raysfl tune --algo A --grid lr=0.01,0.03,0.1,0.3 [--grid KNOB=...] [run flags ...]``: the
grid's settings on tuning seeds (1000, 1001, ... by default), each run judged on a validation
split held out of its training data (``--validation``, never the test split), stopped early by
Tune's successive halving; prints every setting's score and the best, and writes
``OUT/tune.json`` (every trial) and ``OUT/best.json`` (a config file of the best setting at
seed 0 on the test split: ``raysfl run --config OUT/best.json``)."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from raysfl.errors import ConfigError
from raysfl.flags import seed_list
from raysfl.paper_tables import READS, Metric
from raysfl.tuning.rules import TUNE_SEED_BASE, VALIDATION, check_reads_validation

FLAGS = ("grid", "seeds", "metric", "column", "k", "target", "trials_at_once")  # tune's own, not run settings


def tune_seeds(text: str) -> list[int]:
    """``--seeds`` of ``raysfl tune``: a count N (the tuning seeds 1000..1000+N-1) or the seeds."""
    seeds = seed_list(text)
    return seeds if "," in str(text) else [TUNE_SEED_BASE + s for s in seeds]


def add_parser(sub, add_run_flags, add_plugin_flag) -> None:
    tune = sub.add_parser("tune", help="search a grid of settings (lr, server lr, momentum, an algorithm's knobs) on "
                                       "a validation split with Ray Tune; print and save the best",
                          usage="raysfl tune --grid KNOB=V1,V2,... [--grid ...] [--config FILE] [--algo ALGO] "
                                "[run flags ...]")
    tune.add_argument("--grid", action="append", default=[], metavar="KNOB=V1,V2,...",
                      help="a knob and its values: a run setting (lr, server_lr, momentum, weight_decay, lr_decay) "
                           "or the algorithm's own (mu, ...); V1,V2,... or log:LOW:HIGH:N; repeatable (the "
                           "settings are every combination)")
    tune.add_argument("--seeds", type=tune_seeds, default=None, metavar="N|S,S,...",
                      help="tuning seeds: N (1000..1000+N-1) or the seeds (default: 2, i.e. 1000,1001; keep them "
                           "apart from the seeds you evaluate on)")
    tune.add_argument("--metric", default="mean_last", choices=READS,
                      help="how a run is scored: final, mean_last (the last --k evaluations), best, or rounds / "
                           "simulated s / MB to --target (default: mean_last)")
    tune.add_argument("--column", default="test_accuracy", metavar="COLUMN",
                      help="the metrics column scored (on the validation split; default test_accuracy)")
    tune.add_argument("--k", type=int, default=5, metavar="K", help="rounds mean_last averages (default 5)")
    tune.add_argument("--target", type=float, default=None, metavar="ACC", help="the accuracy of a *_to metric")
    tune.add_argument("--trials-at-once", type=int, default=None, metavar="N",
                      help="trials at once (default: as many as the Ray cluster holds)")
    tune.add_argument("--config", dest="config_file", default=None, metavar="FILE", help="YAML or JSON config")
    add_plugin_flag(tune)
    add_run_flags(tune, {"--config", "--help", "--grid", "--seeds", "--metric", "--column", "--k", "--target",
                         "--trials-at-once", "--seed", "--resume", "--plugin"})


def run(ns: argparse.Namespace, base) -> int:
    """``raysfl tune``: ``base`` is the run the flags describe (not yet validated); ``ns`` holds
    tune's own flags (``FLAGS``) and, where given, ``validation``."""
    import dataclasses

    from raysfl.algorithms import get_algorithm
    from raysfl.resolve import validate
    from raysfl.tuning.grid import known, parse_grid, reads
    from raysfl.tuning.search import row_grid, tune_rows

    grid = parse_grid(ns.grid)
    if ns.k < 1:
        raise ConfigError(f"--k must be >= 1, got {ns.k}")
    if ns.metric.endswith("_to") and not (ns.target is not None and math.isfinite(ns.target) and 0 < ns.target <= 1):
        raise ConfigError(f"--metric {ns.metric} needs --target, an accuracy in (0, 1]")
    if ns.trials_at_once is not None and ns.trials_at_once < 1:
        raise ConfigError(f"--trials-at-once must be >= 1, got {ns.trials_at_once}")
    metric = Metric(ns.metric, k=ns.k, target=ns.target, column=ns.column)
    seeds = ns.seeds if ns.seeds is not None else [TUNE_SEED_BASE, TUNE_SEED_BASE + 1]
    if not hasattr(ns, "validation") and not base.validation:
        base = dataclasses.replace(base, validation=VALIDATION)
    base = validate(base)
    check_reads_validation(base)
    for knob in grid:
        if not known(base, knob):
            raise ConfigError(f"--grid {knob}: not a setting a run can be given; allowed: lr, server_lr, momentum, "
                              f"weight_decay, lr_decay, or a knob of the algorithm ({base.algo})")
        if not reads(base, knob):
            raise ConfigError(f"--grid {knob}: a {base.algo} run does not read it (e.g. server_lr without a server, "
                              f"momentum without SGD, another algorithm's knob)")
    written = get_algorithm(base.algo).columns_written(base)
    if metric.column not in written:
        raise ConfigError(f"--column {metric.column}: a {base.algo} run with these settings does not write it; it "
                          f"writes: {', '.join(sorted(written))}")
    configs = [validate(dataclasses.replace(base, seed=s)) for s in seeds]
    out = Path(base.out) / time.strftime("tune-%Y%m%d-%H%M%S") if base.name is None else Path(base.out) / base.name
    label = base.algo
    res = tune_rows({label: configs}, {label: row_grid(base, grid)}, {label: metric},
                    trials_at_once=ns.trials_at_once)[label]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tune.json").write_text(json.dumps({"metric": metric.label, "split": "validation",
                                               "validation": base.validation, **res.to_dict()}, indent=2,
                                              default=float) + "\n")
    best = dataclasses.replace(base, validation=0.0, seed=0, name=None)
    top = {k: v for k, v in res.chosen.items() if hasattr(best, k)}
    own = {k: v for k, v in res.chosen.items() if k not in top}
    best = dataclasses.replace(best, **top)
    if own:
        best = dataclasses.replace(best, algo_params=dataclasses.replace(best.algo_params, **own))
    (out / "best.json").write_text(json.dumps(best.to_dict(), indent=2, default=str) + "\n")
    print(report(res, metric, base))
    print(f"tuning directory: {out} (every trial: tune.json; the best as a config: raysfl run --config "
          f"{out / 'best.json'})")
    return 0


def report(res, metric: Metric, cfg) -> str:
    """Every setting's score on the validation split and the best, as a table."""
    pct = metric.higher_is_better and "acc" in metric.column
    fmt = (lambda v: f"{100 * v:.2f} %") if pct else (lambda v: f"{v:.4g}")  # noqa: E731
    knobs = list(res.grid)
    lines = [f"{cfg.algo}: {metric.label} on the validation split ({cfg.validation:g} of the training data), "
             f"mean over tuning seeds {', '.join(map(str, res.seeds))}; {res.trials} trials, stopped early by "
             f"successive halving", "",
             "| " + " | ".join(knobs) + " | rounds run | score |", "|" + "---:|" * (len(knobs) + 2)]
    for t in res.table:
        score = "diverged" if t.get("diverged") else fmt(t["score"]) if math.isfinite(t["score"]) else "—"
        mark = " (best)" if t["knobs"] == res.chosen else ""
        why = f" ({t['error'][:60]})" if t.get("error") else ""
        lines.append("| " + " | ".join(f"{t['knobs'][k]:g}" for k in knobs) + f" | {t['rounds']}{why} | {score}{mark} |")
    best = ", ".join(f"{k} {v:g}" for k, v in res.chosen.items())
    lines += ["", f"best: {best} ({fmt(res.score)})"
              + (f"; still at the grid's edge after widening it once: {', '.join(res.at_edge)}" if res.at_edge else "")]
    return "\n".join(lines)
