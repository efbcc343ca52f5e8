"""How a role reports a figure of the round: ``record(name, value)``, the one metrics channel
of the planner, the server side and the aggregator (a client's figures go the same way
through ``c.stats.record``, which travels with its round's stats). The runtime takes the
round means once per round (``take_records``) and writes them under the columns the
algorithm declares (``Algorithm.columns``; a column nobody recorded in a round is NaN there).
"""

from __future__ import annotations

import numpy as np


class Recorder:
    """``record`` and ``take_records`` for a role (a mixin; the figures live in ``self.metrics``,
    made on the first ``record``, so a role whose ``__init__`` does not call its base's still
    records)."""

    metrics: dict[str, list[float]]

    def record(self, name: str, value: float) -> None:
        """Note a figure of this round; its round mean becomes the metric column ``name``."""
        self.__dict__.setdefault("metrics", {}).setdefault(name, []).append(float(value))

    def take_records(self) -> dict[str, float]:
        """The round means of what was recorded since the last call, which it forgets."""
        out = {k: float(np.mean(v)) for k, v in self.__dict__.get("metrics", {}).items() if v}
        self.metrics = {}
        return out
