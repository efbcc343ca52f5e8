"""Errors raised for bad user input.

Every message is one line naming the bad value and what is allowed; the CLI prints it
and exits with status 2 (no traceback).
"""


class ConfigError(ValueError):
    """A configuration value, CLI flag, data set or file that cannot be used."""


class RunFailed(RuntimeError):
    """A run stopped part-way (an actor died, the cluster went away); finished rounds are
    kept in the run directory and the message says how to resume."""


class Diverged(RunFailed):
    """Training diverged: a client's loss became NaN or inf in round ``round`` (that round's
    metrics row is kept, its loss not finite; the run's checkpoints stop before it)."""

    def __init__(self, message: str, round: int):
        super().__init__(message)
        self.round = round
