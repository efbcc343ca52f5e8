"""The worked example of docs/architecture.md ("Adding an algorithm") runs as written, and the
protocol description refuses shapes that mean nothing."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import pytest
import torch

import raysfl
from raysfl.algorithms.base import Algorithm, ClientModel, Protocol, ServerModel, Training
from raysfl.errors import ConfigError


@dataclass
class SFLProxParams:
    mu: float = 0.01  # weight of (mu/2) ||w - w_global||^2 on the client side


class SFLProx(Algorithm):
    name = "sfl_prox"
    summary = "SplitFed V1 with a proximal term on each client's client-side model"
    params_cls = SFLProxParams
    protocol = Protocol(server_model=ServerModel.PER_CLIENT)
    config_defaults = {"partition": "dirichlet", "alpha": 0.3}

    @classmethod
    def validate(cls, cfg):
        if cfg.algo_params.mu < 0:
            raise ConfigError(f"mu must be >= 0, got {cfg.algo_params.mu}")

    def client_regularizer(self, part, anchor):
        terms = [((p - anchor[k]) ** 2).sum() for k, p in part.named_parameters()]
        return 0.5 * self.params.mu * torch.stack(terms).sum()


@pytest.fixture
def registered():
    from ray import cloudpickle

    from raysfl.algorithms import ALGORITHMS, register

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors cannot import the tests
    register(SFLProx)
    try:
        yield
    finally:
        ALGORITHMS.pop("sfl_prox", None)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _rows(res):
    return [{k: v for k, v in r.items() if "wall_time" not in k and k != "algo"} for r in res.metrics]


@pytest.mark.slow  # two whole runs; CI runs the slow tests (`make test` stays near 10 minutes)
def test_the_worked_example_runs_and_its_knob_matters(quick, registered):
    kw = dict(clients=4, rounds=2, local_steps=3, lr=0.1)
    with pytest.raises(ConfigError, match="mu must be >= 0"):
        raysfl.run(quick(algo="sfl_prox", sfl_prox={"mu": -1.0}, **kw))
    zero = raysfl.run(quick(algo="sfl_prox", sfl_prox={"mu": 0.0}, **kw))
    v1 = raysfl.run(quick(algo="splitfed_v1", partition="dirichlet", alpha=0.3, **kw))
    strong = raysfl.run(quick(algo="sfl_prox", sfl_prox={"mu": 50.0}, **kw))
    assert _rows(zero) == _rows(v1)        # mu = 0 is SplitFed V1 exactly (its config default included)
    assert _rows(strong) != _rows(zero)    # the proximal term changes the training


@pytest.mark.parametrize("kwargs,match", [
    (dict(training=Training.SPLIT, servers=0), "at least one server"),
    (dict(training=Training.WHOLE, servers=0, server_model=ServerModel.PER_CLIENT), "server_model"),
    (dict(training=Training.PEER, servers=0, server_reply=("loss",)), "server_reply"),
    (dict(training=Training.WHOLE, servers=1), "servers"),
    (dict(server_reply=("logits",)), "unknown server_reply"),
    (dict(servers=3, sequential=True), "sequential"),
    (dict(training=Training.CENTRAL, servers=0, late_updates=True), "late_updates"),
    (dict(client_head_optimizer=True), "needs client_heads"),
])
def test_protocols_that_mean_nothing_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Protocol(**kwargs)


def test_every_registered_protocol_is_valid_and_instances_refine_it():
    from raysfl.algorithms import ALGORITHMS
    from raysfl.config import Config

    for name, cls in ALGORITHMS.items():
        assert isinstance(cls(Config(algo=name)).protocol, Protocol)
    flex = ALGORITHMS["flex_sfl"]
    cfg = raysfl.config_from_kwargs(algo="flex_sfl", flex_sfl={"edge_servers": 5})
    assert flex(cfg).protocol.servers == 5 and flex.protocol.servers == 1
    besplit = raysfl.config_from_kwargs(algo="besplit", besplit={"dtd": False})
    p = ALGORITHMS["besplit"](besplit).protocol
    assert p.server_reply == () and not p.client_heads and p.server_model is ServerModel.PER_CLIENT
    assert ALGORITHMS["psl"].protocol.client_model is ClientModel.OWN
    assert dataclasses.replace(Protocol(), servers=2).servers == 2


class Recording(Algorithm):
    """SplitFed V2 that records the norm of the gradient each client receives at its cut."""

    name = "test_recording"

    def client_metric_names(self):
        return ["grad_norm_cut"]

    def client_backward(self, a, acts, grad, server_loss):
        a.stats.record("grad_norm_cut", float(grad.norm()))
        super().client_backward(a, acts, grad, server_loss)


def test_client_hooks_record_per_round_metrics(quick):
    from ray import cloudpickle

    from raysfl.algorithms import ALGORITHMS, register

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    register(Recording)
    try:
        res = raysfl.run(quick(algo="test_recording", clients=3, rounds=2))
        plain = raysfl.run(quick(algo="splitfed_v2", clients=3, rounds=2))
    finally:
        ALGORITHMS.pop("test_recording", None)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert all(r["grad_norm_cut"] > 0 for r in res.metrics)
    assert "grad_norm_cut" not in plain.metrics[0]
    assert [r["test_accuracy"] for r in res.metrics] == [r["test_accuracy"] for r in plain.metrics]
