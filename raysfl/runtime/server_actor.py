"""Server actor: runs the server-side part of the model for a group of clients.

It keeps the server-side weights and optimizer across rounds (a shared model, or, for
SplitFed V1, one copy per client during a round that is averaged at its end). Each group
step is ONE call carrying every smashed batch routed to it (:meth:`ServerActor.step`); it
returns one gradient payload per source client actor.
"""

from __future__ import annotations

import copy
import uuid

import numpy as np
import torch

from raysfl.aggregation import weighted_average
from raysfl.optim import build_optimizer
from raysfl.runtime.placement import configure_torch, device_for_actor
from raysfl.runtime.refs import LATE, fetch, gather
from raysfl.transport import (ClientRoundStats, GradReply, load_optimizer_state, optimizer_state_to_wire, pack,
                              state_to_wire, unpack, wire_to_state)


class ServerState:
    """What server-side hooks may touch: the model, its optimizer, per-client copies."""

    def __init__(self, model, opt, device):
        self.model, self.opt, self.device = model, opt, device
        self.client_models: dict[int, torch.nn.Module] = {}
        self.client_opts: dict[int, torch.optim.Optimizer] = {}
        self.extra: dict = {}  # algorithm-specific state (kept across rounds, checkpointed)
        self.round = 0  # the round being trained (1-based)
        self.metrics: dict[str, list[float]] = {}  # this round's server-side figures (``record``)
        # rows a client's server-side model ran in this step beyond its own batch (BESplit's
        # lent rows, eq. 33): they count towards that client's server FLOPs
        self.extra_rows: dict[int, int] = {}

    def record(self, name: str, value: float) -> None:
        """Note a server-side figure of this round; its round mean becomes the metric column
        ``name`` (the algorithm lists it in ``server_metric_names``)."""
        self.metrics.setdefault(name, []).append(float(value))


class ServerActor:
    def __init__(self, index: int, cfg, algo, input_shape, num_classes, block_flops: list[int], gpus: float = 0.0,
                 model=None):
        from raysfl.models import initial_model

        configure_torch(cfg, cfg.resources.server_cpus)
        self.index, self.cfg, self.algo, self.input_shape = index, cfg, algo, tuple(input_shape)
        self.lr = cfg.server_lr if cfg.server_lr is not None else cfg.lr
        device = device_for_actor(gpus, f"server {index}")
        model = initial_model(model, cfg, input_shape, num_classes).to(device)  # the run's model object
        model.train()
        opt = self._optimizer(model.parameters())
        self.s = ServerState(model, opt, device)
        self.flops = block_flops
        self.cuts: dict[int, int] = {}
        self.lo: int | None = None  # lowest block this server has run (its server-side part starts there)
        self.stats: dict[int, ClientRoundStats] = {}
        self.deadline: float | None = None  # epoch seconds: smashed data later than this is dropped
        self.window: float | None = None  # how long a step waits for the others once its first batch is in
        self.routes: dict[int, tuple[int, int]] = {}  # client -> (its client actor, its steps) this round
        self.dropped: set[int] = set()  # clients whose smashed data missed a step's deadline this round
        self.incarnation = uuid.uuid4().hex  # changes when Ray restarts the actor

    def _optimizer(self, params):
        return build_optimizer(params, self.cfg, self.lr)

    def ping(self) -> str:
        return self.incarnation

    def warm_up(self, batch: int) -> float:
        """Before round 1 (:func:`raysfl.runtime.probe.warm_up`); seconds taken."""
        from raysfl.runtime.probe import warm_up

        return warm_up(self.s.model, self.input_shape, batch, self.s.device)

    def where(self) -> dict:
        """Node, GPU ids and device of this actor (``placement.json``)."""
        from raysfl.runtime.placement import actor_location

        return actor_location()

    def memory(self) -> int:
        """Resident set size in bytes (soak benchmarks)."""
        from raysfl.runtime.probe import rss_bytes

        return rss_bytes()

    def echo(self, activation) -> int:
        """Answer a calibration probe (SuperSFL's measured allocation): the bytes received."""
        return int(activation.nbytes)

    def begin_round(self, cuts: dict[int, int], lr: float | None = None, deadline: float | None = None,
                    rnd: int = 0, routes: dict[int, tuple[int, int]] | None = None,
                    window: float | None = None) -> None:
        """Note the round's clients and cuts; give each client its own copy if V1-style.

        ``deadline`` (epoch s) and ``window`` (s; :func:`raysfl.runtime.federation.step_window`)
        bound how long a step waits for smashed data; ``routes`` gives each client's client
        actor and step count, so that a late sender's clients are known."""
        self.cuts = dict(cuts)
        self.deadline, self.window = deadline, window
        self.routes, self.dropped = dict(routes or {}), set()
        self.s.round, self.s.metrics = rnd, {}
        if lr is not None:  # the round's learning rate (--lr-decay)
            self.lr = lr
            for group in self.s.opt.param_groups:
                group["lr"] = lr
        if cuts:
            self.lo = min(min(cuts.values()), self.lo if self.lo is not None else self.s.model.num_blocks)
        self.stats = {c: ClientRoundStats(client=c, cut=k, servers=[self.index]) for c, k in cuts.items()}
        self.s.client_models, self.s.client_opts = {}, {}
        if self.algo.protocol.per_client_server:
            for c in sorted(cuts):
                m = copy.deepcopy(self.s.model)
                self.s.client_models[c] = m
                self.s.client_opts[c] = self._optimizer(m.parameters())

    def _receive(self, step: int, payload_refs: list, sources: list[int] | None) -> list:
        """This step's payloads. Without deadlines: all of them, however long they take. With
        them (``--round-deadline-s``, ``--step-deadline-s``): the step waits for the senders
        that still have clients in the round until the first payload is in plus the step
        window (never past the round deadline), then goes on without the rest. The clients of a
        late sender are dropped from the step and, for the rest of the round, from this server:
        it does not wait for them again, so a straggler costs the others one window at most."""
        if self.window is None and self.deadline is None:
            return fetch(payload_refs)
        sources = list(sources) if sources is not None else list(range(len(payload_refs)))
        waiting_on = {a for c, (a, steps) in self.routes.items() if steps > step and c not in self.dropped}
        expected = [src in waiting_on for src in sources] if self.routes else [True] * len(payload_refs)
        payloads = gather(payload_refs, expected, self.deadline, self.window)
        for src, got in zip(sources, payloads):
            if got is LATE:
                for c, (a, steps) in self.routes.items():
                    if a == src and steps > step and c not in self.dropped:
                        self.dropped.add(c)
                        if c in self.stats and not self.algo.protocol.survives_server_loss:
                            self.stats[c].late = True  # a straggler, not a failure (its algorithm's rule
                                                       # decides: fallback clients go on alone)
        return payloads

    def step(self, step: int, payload_refs: list, sources: list[int] | None = None):
        """One group step over the smashed batches that arrived: payload_refs[i] (an ObjectRef
        of {client: Smashed}) from client actor ``sources[i]`` of the group. A dead or late
        sender's clients get no gradient (they drop out of the round); everyone else goes on."""
        payloads = self._receive(step, payload_refs, sources)
        batches, owner = [], {}
        for i, payload in enumerate(payloads):
            if not payload:
                continue
            for c, sm in payload.items():
                if c not in self.stats or c in self.dropped:
                    continue  # not this server's client this round (stale sender after a restart), or dropped
                owner[c] = i
                x = unpack(sm.activations, self.s.device)
                y = torch.from_numpy(np.array(sm.labels)).to(self.s.device)
                batches.append((c, sm.cut, x, y))
        batches.sort(key=lambda b: b[0])  # deterministic order whatever arrived first
        out: list[dict] = [{} for _ in payloads]
        if not batches:
            return out if len(out) != 1 else out[0]
        self.s.extra_rows = {}
        res = self.algo.server_step(self.s, batches)
        grads, losses = res[0], res[1]
        outputs = res[2] if len(res) > 2 and "outputs" in self.algo.protocol.server_reply else {}
        passes = self.algo.server_updates_per_step()
        for c, cut, _, y in batches:
            loss = float(losses[c]) if "loss" in self.algo.protocol.server_reply else None
            logits = pack(outputs[c], self.cfg.transfer_dtype) if c in outputs else None
            out[owner[c]][c] = GradReply(pack(grads[c], self.cfg.transfer_dtype), loss, logits)
            st = self.stats[c]
            rows = len(y) + self.s.extra_rows.get(c, 0)
            st.server_flops += passes * 3.0 * rows * float(sum(self.flops[cut:]))
            st.loss_sum += losses[c] * len(y)
            st.loss_count += len(y)
        return out if len(out) != 1 else out[0]

    def end_round(self, weights: dict[int, float], export: bool = True):
        """Average per-client copies (if any); return (server-side state, per-client stats,
        {metric: round mean} of what the server step ``record``-ed).

        The state covers blocks [lo, L) with lo the lowest cut this server has served; it is
        empty when ``export`` is False (the algorithm does not sync servers this round) or
        the server has not served any client yet.
        """
        # clients dropped at a step deadline take no part in what the server hands on
        chosen = self.algo.server_weights(self.s, {c: weights.get(c, 1.0) for c in self.stats if c not in self.dropped})
        if chosen is not None:  # the algorithm's own aggregation weights (BESplit's EA), reported per client
            weights = chosen
            for c, w in chosen.items():
                if c in self.stats:
                    self.stats[c].agg_weight = float(w)
        if self.algo.protocol.per_client_server and self.s.client_models:
            states = [(state_to_wire(self.s.client_models[c].state_dict()), weights.get(c, 1.0))
                      for c in sorted(self.s.client_models) if weights.get(c, 1.0) > 0 and c not in self.dropped]
            merged = weighted_average(states, base=state_to_wire(self.s.model.state_dict()))
            self.s.model.load_state_dict(wire_to_state(merged, self.s.device))
            self.s.client_models, self.s.client_opts = {}, {}
        state = {}
        if export and self.lo is not None:
            state = state_to_wire(self.s.model.part(self.lo, self.s.model.num_blocks).state_dict())
        metrics = {k: float(np.mean(v)) for k, v in self.s.metrics.items() if v}
        return state, [self.stats[c] for c in sorted(self.stats)], metrics

    def load_shared(self, state: dict | None) -> None:
        """Adopt a merged server-side state from the fed server (keys it holds; others stay)."""
        if state:
            self.s.model.load_state_dict(wire_to_state(state, self.s.device), strict=False)

    def get_state(self) -> dict:
        """The server-side model and optimiser state as NumPy arrays (never the GPU's tensors:
        this goes to the driver and into checkpoints) and the algorithm's state."""
        return {"model": state_to_wire(self.s.model.state_dict()),
                "opt": optimizer_state_to_wire(self.s.opt), "extra": self.s.extra, "lo": self.lo}

    def load_state(self, state: dict) -> None:
        self.s.model.load_state_dict(wire_to_state(state["model"], self.s.device))
        load_optimizer_state(self.s.opt, state["opt"])
        self.s.extra = state.get("extra", {})
        self.lo = state.get("lo")
