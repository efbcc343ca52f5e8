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
LATER_SETTINGS = {"loss": "cross_entropy", "validation": 0.0, "eval_passes": 10}


def cache_key(cfg) -> str:
    """A run's cache name (``raysfl reproduce``'s run cache, the tuning cache's keys): a hash of
    everything it computes (its resolved config without the bookkeeping and resources; the seed
    included)."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in BOOKKEEPING and k != "resources"}
    for name, default in LATER_SETTINGS.items():  # runs cached before a setting existed stay found
        if d.get(name) == default:
            del d[name]
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:20]
