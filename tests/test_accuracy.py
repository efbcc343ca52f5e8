"""splitfed_v1 with its default settings learns digits.

Measured on a 2-core machine (seeds 0-3, 10 clients, IID, defaults: 20 rounds, 1 local
epoch, batch 32, lr 0.05, momentum 0.9): final accuracy 0.925-0.947. The threshold keeps
a margin below the worst seed.
"""

from __future__ import annotations

import raysfl


def test_splitfed_v1_digits_default_reaches_85_percent(tmp_path, ray_session):
    cfg = raysfl.config_from_kwargs(algo="splitfed_v1", clients=10, partition="iid",
                                    out=str(tmp_path), progress=False)
    result = raysfl.run(cfg)
    assert len(result.metrics) == cfg.rounds == 20
    assert result.final["test_accuracy"] >= 0.88
