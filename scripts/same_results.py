"""Do two revisions compute the same thing? Runs every algorithm for a fixed seed on both and
compares metrics.parquet and clients.parquet row by row (timing columns excepted).

    python scripts/same_results.py --base HEAD~1          # this checkout against a revision
    python scripts/same_results.py --fingerprint out.json  # only record this checkout's rows
    python scripts/same_results.py --against out.json      # this checkout against recorded rows
    python scripts/same_results.py --base REV --rel-tol 1e-5  # floats equal within a relative tolerance
    python scripts/same_results.py --base REV --set aggregation_weights=processed  # a setting here only
    python scripts/same_results.py --against out.json --set resources.direct_payloads=on  # one key of a section

``--base REV`` checks REV out into a temporary git worktree and runs this same script there
(``PYTHONPATH`` pointing at the worktree, so the driver and its Ray actors import the old
code), then runs it here, and prints, per case, ``identical`` or the first differences. The
exit status is 1 when any case differs. A refactoring that says "behaviour unchanged" is
proved by this script; a change that means to alter results shows here what it altered.
``--rel-tol T`` compares floats within a relative tolerance T (and an absolute one of T for
values near 0), for a change that only reorders float sums (SplitFed V1's stacked per-client
copies); every other column must still match exactly, and the report says which cases
matched only within the tolerance.

Only the public API is used (``raysfl.config_from_kwargs``, ``raysfl.run``), so the script
runs against any revision that has it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Small settings that still exercise each algorithm's own path (selection, cuts, several
# servers, fallbacks, per-client state, faults). Keys a case leaves out take the defaults.
COMMON = dict(clients=6, clients_per_round=4, rounds=3, local_steps=2, batch_size=16, seed=0,
              partition="dirichlet", alpha=0.5, progress=False, resources={"client_actors": 2})
CASES: dict[str, dict] = {
    "fedavg": dict(algo="fedavg"),
    "fedprox": dict(algo="fedprox", fedprox={"mu": 0.1}),
    "sl": dict(algo="sl"),
    "splitfed_v1": dict(algo="splitfed_v1"),
    # a local epoch over quantity-skewed shares: clients leave the steps one by one (its copies'
    # rows absent), with momentum
    "splitfed_v1+uneven": dict(algo="splitfed_v1", local_steps=None, local_epochs=1.0, partition="iid",
                               quantity_skew=1.0, momentum=0.9, batch_size=32),
    "splitfed_v2": dict(algo="splitfed_v2"),
    "psl": dict(algo="psl"),
    "centralized": dict(algo="centralized"),
    "flex_sfl": dict(algo="flex_sfl", clients=12, clients_per_round=None, partition="pathological",
                     flex_sfl={"edge_servers": 2, "rho": 0.5, "tau_c": 2, "tau_e": 1, "tau_r": 2}),
    "super_sfl": dict(algo="super_sfl", model="cnn", super_sfl={"server_availability": 0.5}),
    "gapsl": dict(algo="gapsl", rounds=4),
    "fed_pairing": dict(algo="fed_pairing"),
    "besplit": dict(algo="besplit"),
    "epsl": dict(algo="epsl"),
    "besplit+no_dtd": dict(algo="besplit", besplit={"dtd": False}),
    "gapsl+second_order": dict(algo="gapsl", rounds=2, gapsl={"gda_regularizer": "second_order"}),
    # GAPSL's ViT setting (Sec. IV-4): AdamW, its clients stepped in a bank
    "gapsl+vit+adamw": dict(algo="gapsl", model="vit", optimizer="adamw", lr=1e-3, rounds=3),
    "splitfed_v2+kill": dict(algo="splitfed_v2", faults="kill:client:round=2", rounds=3),
    "psl+sim_deadline": dict(algo="psl", sim_deadline_s=0.8),
    # every client every round: each starts from the state its client actor kept (resident
    # states), through a killed client actor, a killed fed server and a killed server (retries)
    "psl+everyone": dict(algo="psl", clients_per_round=None, rounds=4),
    "psl+everyone+faults": dict(algo="psl", clients_per_round=None, rounds=5,
                                faults="kill:client:round=2:index=1,kill:fed:round=3:step=1,kill:server:round=4:step=1"),
    "fed_pairing+sim_deadline": dict(algo="fed_pairing", model="cnn", sim_deadline_s=0.05,
                                     faults="delay:client:p=0.3:seconds=1"),
}


SETTINGS: dict[str, str] = {}  # --set: applied to every case of this checkout


def _is_timing(column: str) -> bool:
    return "wall_time" in column


def _clean(v):
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return v


def _rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    if not path.exists():
        return []
    return [{k: _clean(v) for k, v in r.items() if not _is_timing(k)} for r in pq.read_table(path).to_pylist()]


def fingerprint(out_file: Path, cases: list[str]) -> None:
    """Run the cases here and write their rows to ``out_file`` (JSON)."""
    import ray

    import raysfl

    ray.init(address="local", num_cpus=4, include_dashboard=False, configure_logging=False, log_to_driver=False)
    result = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in cases:
                kw = {**COMMON, **CASES[name], "out": tmp, "name": name.replace("+", "-")}
                for key, value in SETTINGS.items():  # "section.key" sets one key of a section (resources)
                    section, _, sub = key.rpartition(".")
                    if section:
                        kw[section] = {**(kw.get(section) or {}), sub: value}
                    else:
                        kw[key] = value
                kw = {k: v for k, v in kw.items() if v is not None}
                run = raysfl.run(raysfl.config_from_kwargs(**kw))
                result[name] = {"metrics": _rows(run.run_dir / "metrics.parquet"),
                                "clients": _rows(run.run_dir / "clients.parquet")}
                print(f"  {name}: {len(result[name]['metrics'])} rounds", file=sys.stderr, flush=True)
    finally:
        ray.shutdown()
    out_file.write_text(json.dumps(result, default=str))


REL_TOL = 0.0  # --rel-tol


def _equal(x, y) -> bool:
    if x == y:
        return True
    if REL_TOL and isinstance(x, float) and isinstance(y, float):
        return math.isclose(x, y, rel_tol=REL_TOL, abs_tol=REL_TOL)
    return False


def _differences(a: list[dict], b: list[dict], limit: int = 3) -> list[str]:
    out = []
    if len(a) != len(b):
        out.append(f"{len(a)} rows against {len(b)}")
    for i, (ra, rb) in enumerate(zip(a, b)):
        for k in sorted(set(ra) & set(rb)):
            if not _equal(ra[k], rb[k]):
                out.append(f"row {i} (round {ra.get('round')}) {k}: {ra[k]!r} -> {rb[k]!r}")
                if len(out) >= limit:
                    return out
    return out


def _exact(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(ra.get(k) == rb.get(k) for ra, rb in zip(a, b) for k in set(ra) & set(rb))


def compare(base: dict, here: dict) -> bool:
    same = True
    for name in base:
        if name not in here:
            continue
        notes, differs = [], False
        for table in ("metrics", "clients"):
            a, b = base[name][table], here[name][table]
            cols_a = set(a[0]) if a else set()
            cols_b = set(b[0]) if b else set()
            if cols_b - cols_a:
                notes.append(f"{table}: new columns {sorted(cols_b - cols_a)}")
            if cols_a - cols_b:
                notes.append(f"{table}: removed columns {sorted(cols_a - cols_b)}")
            diff = _differences(a, b)
            if diff:
                differs = True
                notes += [f"{table}: {d}" for d in diff]
        same = same and not differs
        exact = all(_exact(base[name][t], here[name][t]) for t in ("metrics", "clients"))
        verdict = "DIFFERENT" if differs else "identical" if exact else f"equal within {REL_TOL:g}"
        print(f"{name:<26}{verdict}" + "".join(f"\n    {n}" for n in notes))
    return same


def fingerprint_argv(script: Path, out_file: Path, cases: list[str], settings: list[str]) -> list[str]:
    """The command that records one checkout's rows; ``settings`` (``--set KEY=VALUE`` items) go to it,
    so that with ``--base`` they reach this checkout's runs and not the base's."""
    return [sys.executable, str(script), "--fingerprint", str(out_file), "--cases", ",".join(cases),
            *[a for item in settings for a in ("--set", item)]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", metavar="REV", help="revision to compare this checkout with")
    ap.add_argument("--fingerprint", metavar="FILE", help="only record this checkout's rows in FILE")
    ap.add_argument("--against", metavar="FILE", help="compare this checkout with rows recorded by --fingerprint")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated subset of: {', '.join(CASES)}")
    ap.add_argument("--rel-tol", type=float, default=0.0, help="floats equal within this relative tolerance "
                                                               "(default 0: to the bit)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting for this checkout's runs (not the base's), e.g. an "
                         "earlier rule kept as an option: --set epoch=stream --set aggregation_weights=processed")
    ns = ap.parse_args()
    global REL_TOL
    REL_TOL = ns.rel_tol
    for item in ns.set:
        if "=" not in item:
            ap.error(f"--set takes KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        SETTINGS[k.strip().replace("-", "_")] = v.strip()
    cases = [c.strip() for c in ns.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; allowed: {', '.join(CASES)}")
    if ns.fingerprint:
        fingerprint(Path(ns.fingerprint), cases)
        return 0
    if ns.against:
        with tempfile.TemporaryDirectory() as tmp:
            fingerprint(Path(tmp) / "here.json", cases)
            here = json.loads((Path(tmp) / "here.json").read_text())
        same = compare(json.loads(Path(ns.against).read_text()), here)
        print("same results" if same else "results differ")
        return 0 if same else 1
    if not ns.base:
        ap.error("give --base REV, --against FILE or --fingerprint FILE")
    root = Path(__file__).resolve().parents[1]
    me = Path(__file__).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(tree), ns.base], check=True,
                       capture_output=True)
        try:
            files = {}
            for label, src in (("base", tree), ("here", root)):
                print(f"{label}: {src}", file=sys.stderr, flush=True)
                env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), env.get("PYTHONPATH")]))
                files[label] = Path(tmp) / f"{label}.json"
                subprocess.run(fingerprint_argv(me, files[label], cases, ns.set if label == "here" else []),
                               check=True, env=env, cwd=str(src))
            base = json.loads(files["base"].read_text())
            here = json.loads(files["here"].read_text())
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True)
    if ns.set:
        print(f"this checkout ran with {' '.join(ns.set)}; {ns.base} without", file=sys.stderr)
    same = compare(base, here)
    print("same results" if same else "results differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
