"""Server actor: runs the server-side part of the model for a group of clients.

It hosts the algorithm's server role (:mod:`raysfl.algorithms.roles.server`), which owns the
server-side model(s), their optimiser and the algorithm's server state across rounds. Each
group step is ONE call carrying every smashed batch routed to it (:meth:`ServerActor.step`);
it returns one gradient payload per source client actor. With ``--server-stream on`` (ours)
and a step that allows it, a step is one call per source client actor instead
(:meth:`ServerActor.step_part`), each answered at once. This actor bounds how long a step
waits for its senders, unpacks and packs the tensors, and counts each client's server FLOPs.
"""

from __future__ import annotations


import numpy as np
import torch

from raysfl.runtime.actor_base import RunActor
from raysfl.runtime.placement import configure_torch
from raysfl.runtime.refs import LATE, fetch, gather, hand_off, require_run
from raysfl.transport import ClientRoundStats, GradReply, pack, unpack


class ServerActor(RunActor):
    """Started once and set up for each run that uses it (:mod:`raysfl.runtime.pool`)."""

    run_fields = ("cfg", "role", "flops", "cuts", "lo", "stats", "routes", "dropped", "direct")

    def __init__(self, index: int, gpus: float = 0.0):
        super().__init__(gpus, f"server {index}")
        self.index = index

    def setup(self, run_name: str, cfg, spec, ctx, shared, input_shape, model=None) -> str:
        """Take on a run: its config, its algorithm's server role on a copy of the run's initial
        model. Returns the incarnation id."""
        from raysfl.models import initial_model

        configure_torch(cfg, cfg.resources.server_cpus)
        self.run_name, self.cfg, self.input_shape = run_name, cfg, tuple(input_shape)
        model = initial_model(model, cfg, input_shape, ctx.num_classes).to(self.device)  # the run's model object
        model.train()
        self.role = spec.server(cfg, ctx, shared, model, self.device)
        self.flops = ctx.block_flops
        self.direct = cfg.resources.direct_payloads == "on"  # resolved by the driver (launch_actors)
        self.on_device = cfg.resources.device_payloads == "on"  # likewise: CUDA payloads stay on the GPU
        self.cuts: dict[int, int] = {}
        self.lo: int | None = None  # lowest block this server has run (its server-side part starts there)
        self.stats: dict[int, ClientRoundStats] = {}
        self.deadline: float | None = None  # epoch seconds: smashed data later than this is dropped
        self.window: float | None = None  # how long a step waits for the others once its first batch is in
        self.routes: dict[int, tuple[int, int]] = {}  # client -> (its client actor, its steps) this round
        self.dropped: set[int] = set()  # clients whose smashed data missed a step's deadline this round
        return self.incarnation

    def warm_target(self) -> tuple:
        return self.role.model, self.input_shape, self.role.device

    def echo(self, activation) -> int:
        """Answer a calibration probe (SuperSFL's measured allocation): the bytes received."""
        return int(activation.nbytes)

    def begin_round(self, cuts: dict[int, int], lr: float | None = None, deadline: float | None = None,
                    rnd: int = 0, routes: dict[int, tuple[int, int]] | None = None,
                    window: float | None = None, after=None) -> None:
        """Note the round's clients and cuts (the role prepares its models: per-client copies).

        ``deadline`` (epoch s) and ``window`` (s; :func:`raysfl.runtime.federation.step_window`)
        bound how long a step waits for smashed data; ``routes`` gives each client's client
        actor and step count, so that a late sender's clients are known. ``after``: not used;
        Ray resolves it before the call runs -- the round before's aggregation, which hands this
        server its merged state, where this round is submitted before that aggregation's answer
        (``--run-ahead``)."""
        require_run(self)
        self.cuts = dict(cuts)
        self.deadline, self.window = deadline, window
        self.routes, self.dropped = dict(routes or {}), set()
        if cuts:
            self.lo = min(min(cuts.values()), self.lo if self.lo is not None else self.role.model.num_blocks)
        self.stats = {c: ClientRoundStats(client=c, cut=k, servers=[self.index]) for c, k in cuts.items()}
        self.role.begin_round(rnd, self.cuts, lr)

    def _receive(self, step: int, payload_refs: list, sources: list[int] | None) -> list:
        """This step's payloads. Without deadlines: all of them, however long they take. With
        them (``--round-deadline-s``, ``--step-deadline-s``): the step waits for the senders
        that still have clients in the round until the first payload is in plus the step
        window (never past the round deadline), then goes on without the rest. The clients of a
        late sender are dropped from the step and, for the rest of the round, from this server
        (``missed_step`` in their statistics): it does not wait for them again, so a straggler
        costs the others one window at most."""
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
                        if c in self.stats:
                            self.stats[c].missed_step = True
        return payloads

    def step(self, step: int, payload_refs: list, sources: list[int] | None = None):
        """One group step over the smashed batches that arrived: payload_refs[i] (an ObjectRef
        of {client: Smashed}) from client actor ``sources[i]`` of the group. A dead or late
        sender's clients get no gradient (they drop out of the round); everyone else goes on."""
        require_run(self)
        return self._answer(self._receive(step, payload_refs, sources), self.role.step)

    def streams(self) -> bool:
        """Whether this run's steps may come one sender at a time (:meth:`step_part`)."""
        require_run(self)
        return self.role.streams()

    def step_part(self, step: int, payload_refs: list, last: bool):
        """One sender's share of a streamed step (``--server-stream``, ours): its gradients go back
        at once, while the next sender's batches are still on their way; the parameters take
        the step's one update after its ``last`` part. Calls come in the order the driver
        submitted them, so a step's parts are never mixed with another step's. A dead sender
        gives an empty part (its clients get no gradient, as in :meth:`step`)."""
        require_run(self)
        try:
            return self._answer(fetch(payload_refs), self.role.step_part)
        finally:
            if last:
                self.role.finish_step()

    def _answer(self, payloads: list, step_fn):
        """``step_fn`` over the batches of ``payloads`` (sorted by client), packed as one gradient
        payload per payload; each client's server FLOPs and loss counted."""
        device = self.role.device
        batches, owner = [], {}
        for i, payload in enumerate(payloads):
            if not payload:
                continue
            for c, sm in payload.items():
                if c not in self.stats or c in self.dropped:
                    continue  # not this server's client this round (stale sender after a restart), or dropped
                owner[c] = i
                x = unpack(sm.activations, device)
                y = torch.from_numpy(np.array(sm.labels)).to(device)
                batches.append((c, sm.cut, x, y))
        batches.sort(key=lambda b: b[0])  # deterministic order whatever arrived first
        out: list[dict] = [{} for _ in payloads]
        if not batches:
            out = hand_off(out, self.direct)
            return out if len(out) != 1 else out[0]
        res = step_fn(batches)
        passes = self.role.updates_per_step()
        for c, cut, _, y in batches:
            extra = {k: float(v) if isinstance(v, (float, int)) else pack(v, self.cfg.transfer_dtype, self.on_device)
                     for k, v in res.replies.get(c, {}).items()}
            out[owner[c]][c] = GradReply(pack(res.grads[c], self.cfg.transfer_dtype, self.on_device), extra)
            st = self.stats[c]
            rows = len(y) + res.extra_rows.get(c, 0)
            st.server_flops += passes * 3.0 * rows * float(sum(self.flops[cut:]))
            st.loss_sum += res.losses[c] * len(y)
            st.loss_count += len(y)
        out = hand_off(out, self.direct)
        return out if len(out) != 1 else out[0]

    def end_round(self, weights: dict[int, float], export: bool = True):
        """Fold the round into the server side (the role averages per-client copies, by the
        weights it chooses where it chooses them); return (server-side state, per-client stats,
        {metric: round mean} of what the role ``record``-ed).

        The state covers blocks [lo, L) with lo the lowest cut this server has served; it is
        empty when ``export`` is False (the algorithm does not sync servers this round) or
        the server has not served any client yet.
        """
        require_run(self)
        # clients dropped at a step deadline take no part in what the server hands on
        chosen = self.role.weights({c: weights.get(c, 1.0) for c in self.stats if c not in self.dropped})
        if chosen is not None:  # the algorithm's own aggregation weights (BESplit's EA), reported per client
            weights = chosen
            for c, w in chosen.items():
                if c in self.stats:
                    self.stats[c].agg_weight = float(w)
        self.role.end_round(weights, self.dropped)
        state = self.role.export(self.lo) if export and self.lo is not None else {}
        return hand_off([state], self.direct)[0], [self.stats[c] for c in sorted(self.stats)], self.role.take_records()

    def load_shared(self, state: dict | None) -> None:
        """Adopt a merged server-side state from the fed server (keys it holds; others stay)."""
        require_run(self)
        if state:
            self.role.load_shared(state)

    def get_state(self) -> dict:
        require_run(self)
        return {**self.role.get_state(), "lo": self.lo}

    def load_state(self, state: dict) -> None:
        self.role.load_state(state)
        self.lo = state.get("lo")
