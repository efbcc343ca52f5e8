"""Shared fixtures: one local Ray instance for the whole session, small run configs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray started with explicit resources and no dashboard; shut down at the end."""
    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, configure_logging=False,
             log_to_driver=False)
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
