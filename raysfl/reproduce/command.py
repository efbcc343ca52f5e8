"""``raysfl reproduce PAPER [--table NAME] [--seeds N|S,S,...] [--scale small|paper] [--rounds R]
[--dataset D] [--out DIR] [--results FILE]`` and ``raysfl reproduce --list``."""

from __future__ import annotations

import os
import platform
import shlex
from pathlib import Path

from raysfl.errors import ConfigError
from raysfl.flags import seed_list
from raysfl.reproduce.engine import check_grids, plan
from raysfl.paper_tables import SCALES
from raysfl.reproduce.stats import MOST_SEEDS, more_seeds


def add_parser(sub) -> None:
    rep = sub.add_parser("reproduce", help="run a paper's tables (declared rows, paired seeds, fairness checked) "
                                           "and write each as table.md and table.parquet")
    rep.add_argument("paper", nargs="?", default=None, metavar="PAPER",
                     help="gapsl, fed_pairing, besplit, flex_sfl, super_sfl, or all")
    rep.add_argument("--list", action="store_true", help="list the papers, their tables and claims, and exit")
    rep.add_argument("--table", default=None, metavar="NAME", help="one table of the paper (default: every one)")
    rep.add_argument("--seeds", type=seed_list, default=seed_list("5"), metavar="N|S,S,...",
                     help="N: seeds 0..N-1; or the seeds, comma-separated (default: 5, the fewest for a verdict)")
    rep.add_argument("--scale", default="small", choices=SCALES,
                     help="small: the embedded data, minutes on a laptop; paper: the paper's data set, model, "
                          "clients and rounds (torchvision data, --download; a GPU cluster) (default: small)")
    rep.add_argument("--rounds", type=int, default=None, metavar="R", help="rounds of every row (default: the scale's)")
    rep.add_argument("--dataset", default=None, metavar="D", help="data set of every row (default: the scale's)")
    rep.add_argument("--download", action="store_true", help="fetch torchvision data sets (--scale paper)")
    rep.add_argument("--data-root", default=None, metavar="DIR", help="where torchvision data sets are")
    rep.add_argument("--out", default="reproduce", metavar="DIR",
                     help="where the tables go, DIR/PAPER/TABLE/table.md (DIR/PAPER/TABLE-DATASET/ with --dataset) "
                          "(default: reproduce)")
    rep.add_argument("--cache", default=None, metavar="DIR",
                     help="runs kept by resolved config, read back by any later table (default: DIR/cache of --out)")
    rep.add_argument("--parallel", type=int, default=1, metavar="N", help="runs at once (default: 1)")
    rep.add_argument("--results", default=None, metavar="FILE",
                     help="then write FILE (e.g. docs/results.md) from every table.md under --out")
    rep.add_argument("--no-tune", dest="tune", action="store_false",
                     help="run every row at the table's shared settings instead of tuning each (no verdict then: "
                          "a verdict needs the same tuning budget for every row)")
    rep.add_argument("--most-seeds", type=int, default=MOST_SEEDS, metavar="N",
                     help=f"where the seeds leave a compared row undecided and up to N would decide a difference "
                          f"of its size and spread, run seeds up to N (default {MOST_SEEDS}; 0: never)")


def _seeds_text(seeds: list[int]) -> str:
    return str(len(seeds)) if seeds == list(range(len(seeds))) else ",".join(map(str, seeds))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()} {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def list_tables() -> str:
    from raysfl.reproduce import papers, tables_of

    lines = []
    for paper in papers():
        for t in tables_of(paper):
            rows = ", ".join(r.label for r in t.all_rows)
            small = t.at_scale("small")
            metric = t.metric.label + (f" (small scale: {small.metric.label})" if small.metric != t.metric else "")
            lines.append(f"{paper} --table {t.name}: {t.title} ({t.source})\n    rows: {rows}\n"
                         f"    claim: {t.claim.text}\n    metric: {metric}\n    tuning: {_tuning_text(small)}")
    return "\n".join(lines)


def _tuning_text(t) -> str:
    if t.tuning is None:
        return f"none ({t.untuned})"
    knobs = ", ".join((*t.tuning.factors, *t.tuning.values))
    return f"{knobs} per row, judged by {t.tuning_metric.label} read on a validation split in the test split's place"


def run(ns) -> int:
    from raysfl.reproduce import papers, tables_of

    if ns.list:
        print(list_tables())
        return 0
    if not ns.paper:
        raise ConfigError(f"reproduce needs a paper ({', '.join(papers())}, or all) or --list")
    known = papers()
    asked = list(known) if ns.paper == "all" else [ns.paper]
    if asked[0] not in known:
        raise ConfigError(f"unknown paper '{ns.paper}'; allowed: {', '.join(known)}, all")
    seeds = ns.seeds
    if ns.rounds is not None and ns.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {ns.rounds}")
    if ns.parallel < 1:
        raise ConfigError(f"--parallel must be >= 1, got {ns.parallel}")
    overrides = {k: v for k, v in (("rounds", ns.rounds), ("dataset", ns.dataset), ("data_root", ns.data_root))
                 if v is not None}
    if ns.download:
        overrides["download"] = True
    chosen = []
    for paper in asked:
        tables = tables_of(paper)
        if ns.table is not None:
            tables = [t for t in tables if t.name == ns.table]
            if not tables:
                raise ConfigError(f"{paper} has no table '{ns.table}'; allowed: "
                                  f"{', '.join(t.name for t in tables_of(paper))}")
        chosen += tables
    planned = [plan(t, ns.scale, seeds, overrides) for t in chosen]  # every fairness check before any run
    if ns.tune:
        from raysfl.tuning.rules import check_seeds_apart, tuning_seeds

        for t in chosen:
            if t.tuning is not None:
                check_seeds_apart(tuning_seeds(t.tuning.seeds), seeds)
                check_grids(t, ns.scale, overrides)  # the validation split, a grid wide enough: or one line
    if ns.most_seeds < 0:
        raise ConfigError(f"--most-seeds must be >= 0, got {ns.most_seeds}")
    out = Path(ns.out)
    cache = Path(ns.cache) if ns.cache else out / "cache"
    extra = "".join(f" --{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in overrides.items()
                    if k != "download") + (" --download" if ns.download else "") + ("" if ns.tune else " --no-tune")
    for p in planned:
        command = (f"raysfl reproduce {p.table.paper} --table {p.table.name} --seeds {_seeds_text(seeds)} "
                   f"--scale {ns.scale}{extra}")
        print(run_one(p, cache, out, ns.parallel, command, suffix=f"-{ns.dataset}" if ns.dataset else "",
                      tune=ns.tune, most_seeds=ns.most_seeds))
    if ns.results:
        write_results(out, Path(ns.results))
        print(ns.results)
    return 0


def run_one(planned, cache: Path, out: Path, parallel: int, command: str, suffix: str = "", tune: bool = False,
            most_seeds: int = 0, say=None) -> Path:
    """Tune (where the table is tuned and ``tune``), run and decide one planned table, with more
    seeds (up to ``most_seeds``) where its seeds leave a compared row undecided and that many
    would decide it; write it to ``out/PAPER/TABLE{suffix}/``."""
    import time

    from raysfl.data import dataset_info
    from raysfl.reproduce import report
    from raysfl.reproduce.engine import cached, plan, run_planned, tune_table
    from raysfl.tuning.rules import tuning_seeds

    t = planned.table
    started = time.perf_counter()
    tuned = {}
    if tune and t.tuning is not None:
        tuned = tune_table(t, planned.scale, planned.overrides, cache, say=say)
        planned = plan(t, planned.scale, planned.seeds, planned.overrides, tuned=tuned)
    tuning_s = time.perf_counter() - started
    ref = planned.configs[t.reference.label][0]
    classes = dataset_info(ref.dataset).num_classes
    untuned = not tune and t.tuning is not None
    fresh = 0
    while True:
        fresh += sum(1 for label, cfgs in planned.configs.items() if label not in planned.same
                     for c in cfgs if not cached(c, cache))
        runs = run_planned(planned, cache, parallel, say=say)
        results = report.row_results(planned.table, planned.seeds, runs, planned.diffs, classes, tuned, planned.same)
        decision = report.decide(planned.table, results, len(planned.seeds), untuned, most_seeds)
        target = min(max(decision.settle.values(), default=0), most_seeds)
        if target <= len(planned.seeds) or decision.verdict.startswith(("inconclusive", "too few", "untuned")):
            break
        seeds = more_seeds(planned.seeds, target, tuning_seeds(t.tuning.seeds) if t.tuning is not None else ())
        (say or _say)(f"reproduce {t.paper}/{t.name}: {', '.join(decision.settle)} undecided at "
                      f"{len(planned.seeds)} seeds; running {len(seeds)}")
        planned = plan(t, planned.scale, seeds, planned.overrides, tuned=tuned)
    if untuned:
        note = "none (--no-tune): every row at the table's shared settings; no verdict without tuning"
    else:
        note = tuning_line(planned) if tuned else f"none: {t.untuned}"
    total = time.perf_counter() - started
    (say or _say)(f"reproduce {t.paper}/{t.name}: {total:.0f} s")
    own = {k: r for k, r in tuned.items() if k not in planned.same}  # a row run as another by construction: its tuning
    ran = {k: v for k, v in runs.items() if k not in planned.same}
    trials = sum(r.trials for r in own.values() if not r.from_cache)
    read = sum(r.from_cache for r in own.values())
    timing = (f"{total:.0f} s: tuning {tuning_s:.0f} s ({trials} trials"
              + (f"; {read} of {len(own)} rows' tunings read from the cache" if read else "") + "), "
              f"runs {total - tuning_s:.0f} s ({fresh} of {sum(len(c) for c in ran.values())} run here, "
              f"the others read from the cache; {parallel} at a time)" + first_cost(own, ran))
    return report.write(planned.table, planned.scale, planned.seeds, results, out / t.paper / f"{t.name}{suffix}",
                        _with_seeds(command, planned.seeds), machine(), settings_line(ref), note, untuned, timing)


def first_cost(tuned: dict, runs: dict) -> str:
    """What the table cost where it was run, cached parts included (a table re-rendered from the
    cache took seconds here): its searches' seconds (each search once: the rows of one search
    share its time) and the seconds of every run's rounds, one after the other (``wall_time_s``)."""
    searches = sum({r.seconds for r in tuned.values()})
    rounds = sum(m.get("wall_time_s", 0.0) for per_seed in runs.values() for rows in per_seed for m in rows)
    # a search saved before its seconds were kept across invocations counted the last one alone
    part = any(not r.seconds_whole for r in tuned.values())
    why = " (part of a search begun by a version before 2026-11-29 was not timed)"
    return (f"; where run: tuning {'at least ' if part else ''}{searches:.0f} s{why if part else ''}, "
            f"rounds {rounds:.0f} s one after the other")


def _say(text: str) -> None:
    import sys

    print(text, file=sys.stderr, flush=True)


def _with_seeds(command: str, seeds: list[int]) -> str:
    import re

    return re.sub(r"--seeds \S+", f"--seeds {_seeds_text(seeds)}", command, count=1)


def tuning_line(planned) -> str:
    """What tuning did, in one line: the grid (the reference's; every row the same factors),
    the seeds, the split, the metric, the search and its trials."""
    from raysfl.tuning.rules import REDUCTION, grace, tuning_seeds

    t = planned.table
    tuning = t.tuning
    ref = planned.tuned.get(t.reference.label)
    grid = "; ".join(f"{k} in {{{', '.join(f'{v:g}' for v in vals)}}}" for k, vals in (ref.grid if ref else {}).items())
    trials = sorted({r.trials for k, r in planned.tuned.items() if k not in planned.same})
    rounds = planned.configs[t.reference.label][0].rounds
    shared = "".join(f"; {k} takes {rep}'s (it learns alike by construction)" for k, (rep, _) in planned.same.items()
                     if k in planned.tuned and planned.tuned[k] is planned.tuned.get(rep))
    return (f"each row's {grid} (its own value first; a knob its algorithm does not read left out), on tuning seeds "
            f"{', '.join(map(str, tuning_seeds(tuning.seeds)))} and a validation split of "
            f"{100 * tuning.validation:g} % of the training data in the test split's place (never the test split), "
            f"judged by {t.tuning_metric.label} read there; Ray Tune's ASHA per row (reduction {REDUCTION}, first rung at round "
            f"{grace(rounds)}), a choice at a grid's edge widened once; {'-'.join(map(str, trials))} trials per row{shared}")


def settings_line(cfg) -> str:
    """The settings every row shares, as a figure caption states them."""
    from raysfl.plots import caption
    from raysfl.reproduce.schedule import schedule_text

    return f"{caption(cfg.to_dict())}, {cfg.rounds} rounds, {cfg.optimizer} lr {cfg.lr:g}" + \
        (f" (server {cfg.server_lr:g})" if cfg.server_lr is not None else "") + \
        f", momentum {cfg.momentum:g}, epoch rule {cfg.epoch}, weights {cfg.aggregation_weights}" + schedule_text(cfg)


def write_results(out: Path, path: Path) -> None:
    """``path`` from every ``table.md`` under ``out``, in paper order: no number copied by hand."""
    import re

    from raysfl.reproduce import papers, tables_of

    parts, summary = [RESULTS_HEADER], ["| paper | table | data set | seeds | verdict |", "|---|---|---|---:|---|"]
    for paper in papers():
        parts.append(f"## {paper}\n")
        found = {md.parent.name: md for md in (out / paper).glob("*/table.md")}
        for t in tables_of(paper):
            runs = sorted(name for name in found if name == t.name or name.startswith(f"{t.name}-"))
            for name in runs:
                body = found[name].read_text()
                verdict = re.search(r"\*\*Verdict: (.*?)\.\*\*", body)
                seeds = re.search(r"seeds: ([0-9, ]+);", body)
                data = re.search(r"shared settings: ([^,]+),", body)
                variant = name[len(t.name) + 1:] if name != t.name else ""  # the data set of a --dataset run
                title = f"{t.title} ({variant})" if variant else t.title
                if variant and body.startswith("# "):
                    first, _, rest = body.partition("\n")
                    body = f"{first} ({variant})\n{rest}"
                summary.append(f"| {paper} | [{t.name}](#{_anchor(paper, title)}) | {data.group(1) if data else '—'} | "
                               f"{len(seeds.group(1).split(',')) if seeds else '—'} | "
                               f"{verdict.group(1) if verdict else '—'} |")
                parts.append("### " + body[2:] if body.startswith("# ") else body)
            if not runs:
                parts.append(f"### {paper}: {t.title}\n\n{t.source}. Claim: {t.claim.text}\n\n"
                             f"Not run at this version. Command: `raysfl reproduce {paper} --table {t.name} "
                             f"--seeds 5` (small scale; `--scale paper`: {t.paper_hours or 'a GPU cluster'}).\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    parts.insert(1, "## Verdicts\n\n" + "\n".join(summary) + "\n")
    path.write_text("\n".join(parts))


def _anchor(paper: str, title: str) -> str:
    """GitHub's anchor of the heading ``### {paper}: {title}``."""
    import re

    text = f"{paper}: {title}".lower()
    return re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-")


RESULTS_HEADER = """# Results: each paper's tables, reproduced at small scale

Written by `raysfl reproduce ... --results docs/results.md` from the tables under its `--out`
(each table's own command is printed under it): no number here is copied by hand. Each table
declares a reference row and rows that name their deltas from it; a row whose resolved
configuration differs from the reference in anything it does not declare is refused before
it runs (`raysfl/reproduce/fairness.py`), and the last column shows each row's diff.

**Every row gets the same tuning budget** (`raysfl/tuning/`): its learning rate (and, where the
method has them and the paper leaves them open, its server lr and momentum) chosen from the
table's declared grid -- at least 4 values over at least 1.5 decades, the paper's own value
among them -- by Ray Tune with asynchronous successive halving, judged by the table's metric on
a validation split held out of the training data (never the test split) on tuning seeds 1000
and 1001 (never the seeds a table is judged on); a choice at a grid's edge widens it once
(one or two trials more for that row: the only way rows differ in trials).
A trial evaluates only the rounds its search reads (the last 5 before each rung; ours,
`--eval-rounds`), which changes no score. The runs a table is judged on evaluate round 1,
every 5th and the last 10 (ours, since 2026-11-29: what its metric and its guards read; every
round where a metric reads the whole run, a best or a round or time to a target), which changes
no score either; a run an earlier version evaluated every round is read at those rounds.
Tables whose metric no learning rate changes (simulated time of a fixed number of rounds) say
so and are not tuned.

**The verdict** comes from the claim on paired seeds (the same seed gives every row the same
partition, device profiles and initial model): Student's t at the table's own seed count,
two-sided at 5 %, Holm-Bonferroni across the rows the claim compares, rows whose results
repeat another compared row's exactly counted once. A row that learns as an earlier row does by
construction (SplitFed V1 and FedAvg at the same settings, SplitFed V1 at another cut: FedAvg on
the whole model) is neither tuned nor run where the table reads what runs learn: the earlier
row's tuning and runs stand for it, it counts once, and its simulated times are not shown
(since 2026-12-05; a table of simulated time or bytes runs both). *Reproduced* when every compared row is
decided the paper's way, *contradicted* when one is decided the other way, *not shown*
otherwise; *inconclusive* when the reference or a compared row collapsed on some seed (at
chance: final accuracy at most 1.5x chance, and on the clients' own test splits at most what a
constant prediction scores there plus half of chance -- each client's commonest class for
models of each client's own, one class for a shared model: `chance_local`, ours, since
2026-12-07, also for runs cached before; fallen: its last 5 evaluations keep less than half
of its best gain over chance; or diverging: a non-finite training loss, or the loss rising
over the last 5 rounds) or, where the metric is the accuracy at the end, is still
climbing on most seeds (its last 5 evaluations a point above the 5 before: unconverged); no
verdict with fewer than five seeds or without tuning.
Where five seeds leave a row undecided and at most ten (`--most-seeds`) would decide a difference
of its size and spread, the table runs that many (7 to 10, the next seeds that are not tuning
seeds; estimated from the first seeds, and the seeds added after that look are not corrected
for it: ours. Measured for one compared row with no true difference, the rule then calls 8.3 % of
such rows significant, against 5.0 % where no seeds are added: `scripts/seed_extension_error.py`). Warnings under a table name a reference still climbing at the end,
a row that barely moved, an evaluation period the last round cuts, a tuned value still at its
grid's edge. Each table states the raysfl version, commit and date that wrote it (runs read
back from the cache were made by the same resolved configs, possibly at an earlier commit;
`-dirty`: the checkout had uncommitted changes then), and its time on the machine that made it; a table made before tuning says "not re-run at this version" and
gives no verdict (what the earlier rule read is quoted beside it). Simulated
time is on one cost model for every row (device profiles: compute, links, a latency per hop),
with the compute-only clock beside it.
"""
