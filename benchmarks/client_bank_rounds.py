"""What the client bank (``--client-bank``) buys a whole round, against stepping clients one by one
-- or, with ``--setting server_stream``, what a streamed server step (``--server-stream``) buys,
with ``--setting update_sums`` what the client actors' summed updates (``--update-sums``) buy,
with ``--setting snapshot_refs`` what a snapshot by reference (``--snapshot-refs``) buys, with
``--setting inline_object_kb --values 1024 256`` what a smaller inline limit (``--inline-object-kb``)
buys, with ``--setting run_ahead`` what the next round submitted behind the aggregation
(``--run-ahead``) buys: any setting's values, the first the reference.

    .venv/bin/python benchmarks/client_bank_rounds.py [--setting client_bank] [--values off on] [--clients 10 100]
        [--algos psl splitfed_v2] [--eval off default] [--rounds 12] [--runs 3]
        [--model cnn --cut 2 --optimizer sgd --lr LR]

The settings of ``benchmarks/overhead.py`` (digits, the CNN at cut 2 unless ``--model``/``--cut``
say otherwise, IID, batch 32, one local epoch, seed 0, raysfl's default actors), every client
every round, for each algorithm with the
setting on and off, and the centralised loop on the same work for the ratio. Evaluation off means
only after the last round (neither setting touches the evaluation), ``default`` every round as
users run. Each figure is the median round (rounds 2..R-1) and the median over ``--runs``, the
settings taken in turn within each run so that drift of the machine falls on all alike. The
rows of a run are the same with either setting on and off within float rounding
(``tests/test_client_bank.py``, ``tests/test_server_stream.py``, ``tests/test_update_sums.py``,
``tests/test_snapshot_refs.py``, ``tests/test_run_ahead.py``).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from overhead import COMMON, flops_per_round, steady
from sweep import ROOT, run, write_tables


# resources setting -> (its name in the table, the table's title)
SETTINGS = {"client_bank": ("client bank", "The client bank against stepping clients one by one, per round"),
            "server_stream": ("server stream", "A streamed server step against the whole group's step, per round"),
            "update_sums": ("update sums", "Updates summed by their client actor against every client's, per round"),
            "snapshot_refs": ("snapshot refs", "A snapshot naming the kept states by reference against copying them, per round"),
            "inline_object_kb": ("inline limit (KB)", "Results inlined through their owner up to two limits, per round"),
            "run_ahead": ("run ahead", "The next round submitted behind the aggregation against after its answer, per round")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", choices=list(SETTINGS), default="client_bank",
                    help="the resources setting measured at each of --values")
    ap.add_argument("--values", nargs="+", default=["off", "on"],
                    help="the setting's values, the first the reference (default: off on)")
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--algos", nargs="+", default=["psl", "splitfed_v2"])
    ap.add_argument("--eval", nargs="+", choices=["off", "default"], default=["off"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--model", default="cnn", help="model (vit with --optimizer adamw: GAPSL's ViT setting)")
    ap.add_argument("--cut", type=int, default=2)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default: raysfl's)")
    ap.add_argument("--runs", type=int, default=3, help="repeat every measurement; round times are medians over them")
    ap.add_argument("--out", default=None, help="default: docs/results/<setting>_rounds.md")
    args = ap.parse_args()
    setting, (label, title) = args.setting, SETTINGS[args.setting]
    args.out = args.out or str(ROOT / f"docs/results/{'client_bank' if setting == 'client_bank' else setting}_rounds.md")
    if args.rounds < 4 or args.runs < 1:
        ap.error(f"--rounds must be >= 4 and --runs >= 1, got {args.rounds} and {args.runs}")
    if len(args.values) < 2:
        ap.error(f"--values needs at least two values (the first the reference), got {args.values}")
    values = [int(v) if v.isdigit() else v for v in args.values]
    ref = values[0]
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate_run

    for v in values:  # a bad value: one line now, not a traceback after the first runs
        try:
            validate_run(raysfl.config_from_kwargs(algo=args.algos[0], resources={setting: v}))
        except ConfigError as e:
            ap.error(str(e))
    vs_key = "vs_bank_off" if setting == "client_bank" else "vs_off" if ref == "off" else "vs_reference"
    times: dict[tuple, list[float]] = {}
    flops: dict[tuple, float] = {}
    for _ in range(args.runs):
        for n in args.clients:
            for evaluation in args.eval:
                base = dict(COMMON, model=args.model, cut=args.cut, optimizer=args.optimizer, clients=n,
                            rounds=args.rounds, eval_every=1 if evaluation == "default" else 10**6,
                            **({"lr": args.lr} if args.lr is not None else {}))
                todo = [("centralized", None)] + [(a, b) for a in args.algos for b in values]
                for algo, bank in todo:
                    rows = run(algo=algo, **base, **({"resources": {setting: bank}} if bank else {}))
                    ms = 1000 * steady(rows)
                    key = (n, evaluation, algo, bank)
                    times.setdefault(key, []).append(ms)
                    flops[key] = flops_per_round(rows)
                    print(f"{n} clients, evaluation {evaluation}, {algo}"
                          f"{'' if bank is None else f', {label} {bank}'}: {ms:.1f} ms/round", flush=True)
    out = []
    for n in args.clients:
        for evaluation in args.eval:
            c_key = (n, evaluation, "centralized", None)
            central = statistics.median(times[c_key])
            for algo in args.algos:
                off = statistics.median(times[(n, evaluation, algo, ref)])
                for bank in values:
                    key = (n, evaluation, algo, bank)
                    ms = statistics.median(times[key])
                    out.append({"clients": n, "evaluation": evaluation, "algo": algo, setting: bank,
                                "round_ms": ms, **{vs_key: ms / off}, "central_ms": central,
                                "ratio_central": ms / central * flops[c_key] / flops[key]})
    short = "bank" if setting == "client_bank" else label
    lines = [f"| clients | evaluation | algorithm | {label} | ms / round | vs {short} {ref} | centralised ms "
             "| vs centralised |", "|---:|---|---|---|---:|---:|---:|---:|"]
    for r in out:
        vs = r[vs_key]
        lines.append(f"| {r['clients']} | {r['evaluation']} | {r['algo']} | {r[setting]} | "
                     f"{r['round_ms']:.1f} | {vs:.2f} | {r['central_ms']:.1f} | "
                     f"{r['ratio_central']:.2f}x |")
    intro = (f"{args.rounds} rounds, round times the median over {args.runs} runs. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(out, args.out, title,
                 intro, "\n".join(lines), doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
