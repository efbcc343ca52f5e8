"""A comparison changes one thing: each row of a table is resolved to the config it runs (its
algorithm's paper defaults filled in) and compared with its reference row's, setting by setting
and facet by facet; a difference the row does not declare is an error.

Declared: the keys of the row's ``settings`` (an algorithm's knobs as ``algo_params.KNOB``) and
the facets it ``compares`` (:meth:`raysfl.algorithms.spec.Algorithm.facets`). Where a row runs
another algorithm than the reference, that algorithm's knobs are its own (they belong to the
declared ``algo``), but its paper defaults for shared settings (lr, cut, clients, ...) are not:
a table holds those equal in its ``shared`` settings, or the row declares them.
"""

from __future__ import annotations

from raysfl.errors import ConfigError
from raysfl.run_key import BOOKKEEPING
from raysfl.paper_tables import Row, Table

class ConfoundedRow(ConfigError):
    """A row that differs from its reference in something it does not declare."""


def row_settings(table: Table, row: Row, scale: str, overrides: dict | None = None) -> dict:
    """The settings a row runs with at ``scale`` (without the seed): the scale's, the table's
    shared ones, the user's ``overrides`` (``--rounds``, ``--dataset``: every row alike), the
    reference row's and the row's own deltas. A row that changes the algorithm drops the
    reference's knobs."""
    ref = dict(table.reference.settings)
    if row is not table.reference and row.settings.get("algo", ref.get("algo")) != ref.get("algo"):
        ref.pop(ref.get("algo"), None)
    merged = {**table.scales[scale], **table.shared, **(overrides or {})}
    for layer in (ref, row.settings):
        for k, v in layer.items():
            if isinstance(v, dict) and isinstance(merged.get(k), dict):
                merged[k] = {**merged[k], **v}
            else:
                merged[k] = v
    return merged


def resolve(table: Table, row: Row, scale: str, seed: int, overrides: dict | None = None):
    """The validated Config of ``row`` at ``scale`` for ``seed``."""
    import raysfl
    from raysfl.resolve import validate

    settings = row_settings(table, row, scale, overrides)
    try:
        return validate(raysfl.config_from_kwargs(**{**settings, "seed": seed}))
    except ConfigError as e:
        raise ConfigError(f"{table.paper}/{table.name}, row '{row.label}': {e}") from None


def flat(cfg) -> dict:
    """A config as dotted keys (``devices.latency_ms``, ``algo_params.k_min``), without its
    bookkeeping, resources and seed: what the run computes."""
    out = {}
    for k, v in cfg.to_dict().items():
        if k in BOOKKEEPING or k in ("resources", "seed"):
            continue
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": _plain(vv) for kk, vv in v.items()})
        else:
            out[k] = _plain(v)
    return out


def _plain(v):
    return list(v) if isinstance(v, tuple) else v


def facets(cfg) -> dict:
    """The algorithm's facets as ``facet.NAME`` keys."""
    from raysfl.algorithms import get_algorithm

    return {f"facet.{k}": v for k, v in get_algorithm(cfg.algo).facets(cfg).items()}


def declared(row: Row) -> set[str]:
    """The keys a row declares: its settings (an algorithm's section as ``algo_params.*``,
    a shared section as ``devices.*``) and the facets it compares."""
    from raysfl.algorithms import ALGORITHMS

    keys = set()
    for k, v in row.settings.items():
        if isinstance(v, dict):
            prefix = "algo_params" if k in ALGORITHMS else k
            keys |= {f"{prefix}.{kk}" for kk in v}
        else:
            keys.add(k)
    return keys | {f"facet.{f}" for f in row.compares}


def config_diff(ref_cfg, cfg) -> dict[str, tuple]:
    """{key: (reference's value, this row's)} for every key (settings and facets) that differs."""
    a, b = {**flat(ref_cfg), **facets(ref_cfg)}, {**flat(cfg), **facets(cfg)}
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def check_row(table: Table, row: Row, ref_cfg, cfg, tuned: set[str] | frozenset = frozenset()) -> dict[str, tuple]:
    """The row's diff against its reference; :class:`ConfoundedRow` (one line) when it holds a
    difference the row does not declare (``tuned``: the knobs tuning chose per row, which
    every row may differ in)."""
    diff = config_diff(ref_cfg, cfg)
    allowed = declared(row) | set(tuned) | {f"algo_params.{k}" for k in tuned}
    other_algo = ref_cfg.algo != cfg.algo
    confounds = [k for k in diff if k not in allowed and not (other_algo and k.startswith("algo_params."))]
    if confounds:
        shown = "; ".join(f"{k}: {diff[k][0]!r} in '{table.reference.label}', {diff[k][1]!r} here"
                          for k in confounds[:4])
        raise ConfoundedRow(f"{table.paper}/{table.name}, row '{row.label}' differs from its reference in what it "
                            f"does not declare ({shown}); set it in the table's shared settings, or declare it "
                            f"in the row (settings, or compares=('{confounds[0].removeprefix('facet.')}',))")
    return diff


def check_table(table: Table, scale: str, seed: int = 0, overrides: dict | None = None) -> dict[str, dict]:
    """Every row's diff against the reference at ``scale`` ({label: diff}); raises
    :class:`ConfoundedRow` for the first confounded row."""
    ref_cfg = resolve(table, table.reference, scale, seed, overrides)
    out = {table.reference.label: {}}
    for row in table.rows:
        out[row.label] = check_row(table, row, ref_cfg, resolve(table, row, scale, seed, overrides))
    return out


# SplitFed V1 is FedAvg on the whole model: each client trains its client-side part and its own
# copy of the server-side part on its batches, in turn, and both parts are averaged with FedAvg's
# weights (Thapa et al., 2022, Alg. 1); the cut moves where the model is split, not its updates.
WHOLE_MODEL_FEDAVG = ("fedavg", "splitfed_v1")
_ANY_CUT = {"algo", "cut"}  # what may differ between two runs that learn alike


def same_by_construction(a, b) -> str | None:
    """Why the runs of resolved configs ``a`` and ``b`` learn the same model, step for step, or
    None: both are FedAvg on the whole model (``fedavg``, or ``splitfed_v1`` with one server
    update per batch, the server side at the clients' lr, full-precision smashed data), their
    other settings equal, and nothing that depends on a simulated clock decides which clients
    count (no deadlines, no faults). Their accuracies then differ by float rounding only (equal
    to 1e-9 after three rounds on digits at either cut, ``tests/algorithms/baselines/
    test_baselines.py``; on mnist5k the rounding grows over 40-100 rounds into tenths of a
    point at the end), so a table counts them once and runs the first (issue 42). Their
    simulated times and bytes differ: a table that reads those compares them as they are."""
    if a.algo not in WHOLE_MODEL_FEDAVG or b.algo not in WHOLE_MODEL_FEDAVG or a.algo == b.algo and a.cut == b.cut:
        return None
    for cfg in (a, b):
        if cfg.algo == "splitfed_v1" and (cfg.algo_params.server_updates != 1 or cfg.transfer_dtype != "float32"
                                          or cfg.server_lr not in (None, cfg.lr)):
            return None
        if cfg.faults or any(d is not None for d in (cfg.round_deadline_s, cfg.step_deadline_s, cfg.sim_deadline_s)):
            return None
    fa, fb = flat(a), flat(b)
    keys = {k for k in set(fa) | set(fb) if k not in _ANY_CUT and not k.startswith(("algo_params.", "devices."))
            and k not in ("server_lr", "transfer_dtype")}  # checked above, per algorithm
    if any(fa.get(k) != fb.get(k) for k in keys):
        return None
    return ("SplitFed V1 is FedAvg on the whole model (each client trains both parts, both averaged as "
            "FedAvg does), whatever the cut")


def describe(diff: dict[str, tuple], row: Row) -> str:
    """A row's config diff in one cell: ``algo=psl; server_reduction=sum; facet.round_steps=equal``
    (another algorithm's own knobs at their defaults are left out: they come with ``algo``)."""
    if not diff:
        return "reference"
    mine = declared(row)
    return "; ".join(f"{k.removeprefix('algo_params.')}={_short(v[1])}" for k, v in diff.items()
                     if k in mine or not k.startswith("algo_params."))


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)

