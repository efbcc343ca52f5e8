"""A stand-in for Ray actor handles in tests of how calls are wired (exchanges, faults)."""

from __future__ import annotations


class RecordingHandle:
    """A stand-in actor handle recording the calls an exchange submits."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __getattr__(self, method):
        handle = self

        class _Method:
            def __init__(self, n=1):
                self.n = n

            def options(self, num_returns=1, **_):
                return _Method(num_returns)

            def remote(self, *args):
                handle.log.append((handle.name, method, args))
                refs = [f"{handle.name}.{method}#{len(handle.log)}.{k}" for k in range(self.n)]
                return refs[0] if self.n == 1 else refs

        return _Method()
