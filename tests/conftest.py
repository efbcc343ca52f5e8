"""Shared fixtures: one local Ray instance for the whole session, small run configs.

Every Ray of the suite runs with the wire guard (:mod:`raysfl.runtime.wire_guard`): a torch
tensor in any actor call's arguments or result fails the call, here and in the runs the
tests start in subprocesses (they inherit ``RAYSFL_WIRE_GUARD``)."""

from __future__ import annotations

import os

import pytest

os.environ["RAYSFL_WIRE_GUARD"] = "1"


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray started with explicit resources and no dashboard, listening on loopback only
    as raysfl's own (placement.loopback_only); shut down at the end."""
    import ray

    from raysfl.runtime import wire_guard
    from raysfl.runtime.placement import loopback_only

    with loopback_only() as where:
        ray.init(address="local", num_cpus=4, include_dashboard=False, configure_logging=False,
                 log_to_driver=False, runtime_env=wire_guard.runtime_env_hook(), **where)
    wire_guard.install()
    yield ray
    ray.shutdown()


@pytest.fixture
def quick(tmp_path, ray_session):
    """Build a small, fast config: 4 clients on 2 client actors, 2 rounds, 2 local steps."""
    import raysfl

    def make(**kw):
        base = dict(clients=4, rounds=2, local_steps=2, batch_size=16, out=str(tmp_path / "runs"),
                    progress=False, resources={"client_actors": 2})
        base.update(kw)
        return raysfl.config_from_kwargs(**base)

    return make
