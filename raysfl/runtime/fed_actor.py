"""Fed server actor: holds the global model, aggregates, evaluates, keeps per-client state.

The global model is one full state dict (every block). Client updates and server-side
states are merged into it layer by layer (:func:`raysfl.aggregation.weighted_average`).
Algorithms without client-side aggregation (PSL) keep each client's own client-side
model here between rounds, so client actors hold nothing across rounds and a restarted
actor loses nothing.
"""

from __future__ import annotations

import numpy as np

from raysfl.evaluation import evaluate
from raysfl.runtime.placement import device_for_actor, set_threads
from raysfl.transport import state_to_wire, wire_to_state


class FedActor:
    def __init__(self, cfg, algo, dataset, gpus: float = 0.0):
        from raysfl.models import build_model

        set_threads(cfg.resources.fed_cpus)
        self.cfg, self.algo, self.ds = cfg, algo, dataset
        self.device = device_for_actor(gpus)
        self.model = build_model(cfg.model, dataset.input_shape, dataset.num_classes, seed=cfg.seed).to(self.device)
        self.global_state = state_to_wire(self.model.state_dict())
        self.own: dict[int, dict[str, np.ndarray]] = {}
        self.last_clients: list[int] = []

    def ping(self) -> int:
        return 0

    def dispatch(self, actor_plans: list[dict[int, int]]):
        """Models for each client actor: {"global": blocks its clients need, "own": {...}}."""
        out = []
        for plan in actor_plans:
            top = max(plan.values()) if plan else 0
            keys = [k for k in self.global_state if _block(k) < top]
            own = {c: self.own[c] for c in plan if c in self.own and not self.algo.aggregate_clients}
            out.append({"global": {k: self.global_state[k] for k in keys}, "own": own})
        return out if len(out) != 1 else out[0]

    def aggregate(self, num_server_states: int, *items) -> None:
        """Merge this round's server-side states (the first ``num_server_states`` items) and
        client updates (the rest: one list per client actor) into the global model."""
        server_states, client_results = items[:num_server_states], items[num_server_states:]
        updates = sorted((u for res in client_results for u in res), key=lambda u: u.client)
        self.last_clients = [u.client for u in updates]
        if self.algo.aggregate_clients:
            self.global_state = self.algo.aggregate(self.global_state, updates)
        else:
            for u in updates:
                self.own[u.client] = u.state
        for state in server_states:
            self.global_state.update(state)

    def evaluate(self) -> tuple[float, float]:
        """Test accuracy/loss of the global model; without client aggregation, the mean over
        this round's participants of (own client-side model + global server side)."""
        ds = self.ds
        if self.algo.aggregate_clients or not self.last_clients:
            self.model.load_state_dict(wire_to_state(self.global_state, self.device))
            return evaluate(self.model, ds.x_test, ds.y_test, ds.to_tensor, device=self.device)
        accs, losses = [], []
        for c in self.last_clients:
            state = dict(self.global_state)
            state.update(self.own.get(c, {}))
            self.model.load_state_dict(wire_to_state(state, self.device))
            a, l = evaluate(self.model, ds.x_test, ds.y_test, ds.to_tensor, device=self.device)
            accs.append(a)
            losses.append(l)
        return float(np.mean(accs)), float(np.mean(losses))

    def get_state(self) -> dict:
        return {"global": self.global_state, "own": self.own, "last_clients": self.last_clients}

    def load_state(self, state: dict) -> None:
        self.global_state = state["global"]
        self.own = state["own"]
        self.last_clients = state["last_clients"]


def _block(key: str) -> int:
    return int(key.split(".")[1])
