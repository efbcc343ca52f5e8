"""Tuning: the same search for every row of a table (``raysfl reproduce``) and for your own
run (``raysfl tune``), on Ray Tune.

- :mod:`raysfl.tuning.rules`: what a tuning run may read (the validation split, tuning seeds);
- :mod:`raysfl.tuning.grid`: what is searched (knobs, values, widening, which knobs a run reads);
- :mod:`raysfl.tuning.trial`: one setting on every tuning seed, a round per step (a Tune Trainable);
- :mod:`raysfl.tuning.schedulers`: Tune's ASHA, one bracket per row;
- :mod:`raysfl.tuning.search`: the Tuner, the choice on the validation split, widening, the cache;
- :mod:`raysfl.tuning.command`: ``raysfl tune``.

Every tuning run evaluates on a validation split held out of the training data
(``Config.validation``) and runs on tuning seeds, never the seeds a table is judged on.
"""

from raysfl.tuning.rules import TUNE_SEED_BASE, VALIDATION

__all__ = ["TUNE_SEED_BASE", "VALIDATION"]
