"""What a run computes, as one key: the name of its entry in a run cache (``raysfl reproduce``'s
runs, the tuning's results). Two configs with the same key compute the same rows; where and how
a run is written, shown or restarted does not enter it.
"""

from __future__ import annotations

import hashlib
import json

# where and how a run is written and shown, and where its actors run: not what it computes
BOOKKEEPING = ("out", "name", "progress", "mlflow", "mlflow_artifacts", "keep_checkpoints", "keep_best", "checkpoint_every", "resume",
               "max_restarts", "max_round_retries", "min_included")


# settings added after runs were cached, at the value every earlier run had: left out of the key
LATER_SETTINGS = {"loss": "cross_entropy", "validation": 0.0, "eval_passes": 10, "eval_rounds": ""}


# settings issue 46 added (schedules, targets binned, metrics of your own, warm starts), at the
# value every run before them had. Runs are kept under keys that name them (a cache written since
# issue 46 stays valid); runs cached before it are found under the key without them
# (:func:`cache_keys`), so that a table re-rendered or continued reads them.
ISSUE_46_SETTINGS = {"lr_schedule": None, "target_bins": 10, "metrics": "", "metrics_aggregation": "samples",
                     "init_from": None}


def cache_key(cfg, leave_out: dict | None = None) -> str:
    """A run's cache name (``raysfl reproduce``'s run cache, the tuning cache's keys): a hash of
    everything it computes (its resolved config without the bookkeeping and resources; the seed
    included). ``leave_out``: more settings dropped where they hold the value given."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in BOOKKEEPING and k != "resources"}
    for name, default in {**LATER_SETTINGS, **(leave_out or {})}.items():  # runs cached before a setting existed stay found
        if name in d and d[name] == default:
            del d[name]
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cache_keys(cfg) -> list[str]:
    """The key a run is kept under, then the key a version before issue 46 kept the same run
    under (where it differs): a lookup tries them in turn."""
    keys = [cache_key(cfg)]
    older = cache_key(cfg, ISSUE_46_SETTINGS)
    return keys + [older] * (older != keys[0])
