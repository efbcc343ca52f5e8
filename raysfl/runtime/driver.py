"""The driver: builds the actors and runs each round as DESIGN.md describes.

select -> assign cuts/servers -> dispatch models -> local steps -> aggregate -> evaluate.

A local step is a group exchange: every client actor forwards its active clients' batches
in ONE call, every server receives the smashed batches routed to it in ONE call, and the
gradients go straight back to the client actors. The driver only wires ObjectRefs
together: it submits a whole round of calls without waiting and then fetches the small
per-client statistics and the evaluation -- no tensor passes through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from raysfl.algorithms.base import Algorithm, FederationContext
from raysfl.runtime.client_actor import ClientActor
from raysfl.runtime.fed_actor import FedActor
from raysfl.runtime.server_actor import ServerActor
from raysfl.transport import ClientRoundStats


@dataclass
class ClientPlan:
    cut: int
    steps: int
    batch: int
    stream_pos: int
    lr: float = 0.0

    def as_dict(self) -> dict:
        return {"cut": self.cut, "steps": self.steps, "batch": self.batch, "stream_pos": self.stream_pos,
                "lr": self.lr}


def local_steps(cfg, n_samples: int) -> tuple[int, int]:
    """(steps, batch size) of a client with ``n_samples`` samples for one round."""
    batch = min(cfg.batch_size, n_samples)
    if cfg.local_steps is not None:
        return cfg.local_steps, batch
    return max(1, math.ceil(cfg.local_epochs * n_samples / batch)), batch


def _as_list(refs, n: int) -> list:
    return [refs] if n == 1 else list(refs)


class Federation:
    """The actors of one run and the round protocol over them."""

    def __init__(self, cfg, algo: Algorithm, dataset, parts: list[np.ndarray], num_actors: int,
                 block_flops: list[int], run_name: str = "run"):
        """Start the actors. They are named ``raysfl:<run>:client-<i>``, ``...:server-<j>``
        and ``...:fed`` so operators (and tests) can find them with ``ray.get_actor``."""
        import ray

        r = cfg.resources
        self.cfg, self.algo, self.num_actors = cfg, algo, num_actors
        ds_ref = ray.put(dataset)  # loaded once, shared through the object store
        def spawn(cls, role: str, cpus: float, gpus: float, *args):
            return ray.remote(cls).options(name=f"raysfl:{run_name}:{role}", num_cpus=cpus,
                                           num_gpus=gpus).remote(*args, gpus)

        self.clients = [
            spawn(ClientActor, f"client-{i}", r.client_cpus, r.client_gpus, i, cfg, algo, ds_ref,
                  {k: parts[k] for k in range(len(parts)) if k % num_actors == i}, block_flops)
            for i in range(num_actors)
        ]
        self.servers = [
            spawn(ServerActor, f"server-{j}", r.server_cpus, r.server_gpus, j, cfg, algo,
                  dataset.input_shape, dataset.num_classes, block_flops)
            for j in range(algo.num_servers if algo.uses_cut else 0)
        ]
        self.fed = spawn(FedActor, "fed", r.fed_cpus, r.fed_gpus, cfg, algo, ds_ref)
        ray.get([a.ping.remote() for a in self.clients + self.servers] + [self.fed.ping.remote()])

    def actor_of(self, client: int) -> int:
        return client % self.num_actors

    def shutdown(self) -> None:
        import ray

        for a in self.clients + self.servers + [self.fed]:
            ray.kill(a)

    # ------------------------------------------------------------------ one round
    def run_round(self, rnd: int, plans: dict[int, ClientPlan], server_of: dict[int, int], evaluate: bool,
                  on_step=None):
        """Submit round ``rnd``; return (per-client stats, (acc, loss, extras) or None).

        ``on_step(done, total)`` is called as the round's group steps complete (progress).
        """
        import ray

        weights = {c: float(p.steps * p.batch) for c, p in plans.items()}
        for j, srv in enumerate(self.servers):
            srv.begin_round.remote({c: p.cut for c, p in plans.items() if server_of[c] == j}, self.cfg.lr_at(rnd))
        turns = [[c] for c in plans] if self.algo.sequential else [list(plans)]
        stats_refs, update_refs, markers = [], [], []
        for turn in turns:
            u, s, m = self._run_group({c: plans[c] for c in turn}, server_of)
            stats_refs += s
            markers += m
            if self.algo.sequential:  # the next client starts from this one's model
                self.fed.aggregate.remote(rnd, 0, *u)
            else:
                update_refs += u
        sync = self.algo.sync_servers(rnd)
        server_stats = []
        server_states = []
        for srv in self.servers:
            state_ref, st_ref = srv.end_round.options(num_returns=2).remote(weights, sync)
            if sync:
                server_states.append(state_ref)
            server_stats.append(st_ref)
        merged = self.fed.aggregate.remote(rnd, len(server_states), *server_states, *update_refs)
        if sync and self.algo.broadcast_servers:  # e.g. FLEX-SFL's w_e to every edge server (eq. 26)
            for srv in self.servers:
                srv.load_shared.remote(merged)
        eval_ref = self.fed.evaluate.remote() if evaluate else None
        for k, refs in enumerate(markers):  # progress: wait for each step without fetching it
            ray.wait(refs, num_returns=len(refs), fetch_local=False)
            if on_step:
                on_step(k + 1, len(markers))
        merged: dict[int, ClientRoundStats] = {}
        for group in ray.get(stats_refs + server_stats):
            for st in group:
                if st.client in merged:
                    merged[st.client].merge(st)
                else:
                    merged[st.client] = st
        result = ray.get(eval_ref) if eval_ref is not None else None
        return merged, result

    def _run_group(self, plans: dict[int, ClientPlan], server_of: dict[int, int]):
        by_actor: dict[int, dict[int, ClientPlan]] = {}
        for c, p in plans.items():
            by_actor.setdefault(self.actor_of(c), {})[c] = p
        actors = sorted(by_actor)
        dispatch = [{c: p.cut for c, p in by_actor[i].items()} for i in actors]
        models = _as_list(self.fed.dispatch.options(num_returns=len(actors)).remote(dispatch), len(actors))
        for i, m in zip(actors, models):
            self.clients[i].begin_round.remote({c: p.as_dict() for c, p in by_actor[i].items()}, m)
        prev: dict[int, list] = {i: [] for i in actors}
        markers: list[list] = []  # per step, the refs whose completion ends that step
        if self.algo.uses_cut:
            for s in range(max(p.steps for p in plans.values())):
                sends: dict[tuple[int, int], object] = {}
                for i in actors:
                    routes = {c: server_of[c] for c, p in by_actor[i].items() if p.steps > s}
                    dests = sorted(set(routes.values()))
                    if not dests:
                        continue  # this actor's clients are done; its last grads wait for finish()
                    refs = self.clients[i].exchange.options(num_returns=len(dests)).remote(s, dests, routes, *prev[i])
                    prev[i] = []
                    for d, ref in zip(dests, _as_list(refs, len(dests))):
                        sends[(i, d)] = ref
                for d in sorted({d for _, d in sends}):
                    srcs = sorted(i for (i, dd) in sends if dd == d)
                    grads = self.servers[d].step.options(num_returns=len(srcs)).remote(s, *[sends[(i, d)] for i in srcs])
                    for i, g in zip(srcs, _as_list(grads, len(srcs))):
                        prev[i].append(g)
                markers.append([g for i in actors for g in prev[i]])
        else:
            for i in actors:
                self.clients[i].train_local.remote()
        update_refs, stats_refs = [], []
        for i in actors:
            u, st = self.clients[i].finish.options(num_returns=2).remote(*prev[i])
            update_refs.append(u)
            stats_refs.append(st)
        if not markers:
            markers.append(stats_refs)
        return update_refs, stats_refs, markers

    # ------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict:
        import ray

        return {"fed": ray.get(self.fed.get_state.remote()),
                "servers": ray.get([s.get_state.remote() for s in self.servers])}

    def load_state(self, state: dict) -> None:
        import ray

        ray.get([self.fed.load_state.remote(state["fed"])]
                + [s.load_state.remote(st) for s, st in zip(self.servers, state["servers"])])


def plan_round(cfg, algo: Algorithm, rnd: int, ctx: FederationContext, stream_pos: dict[int, int]):
    """Selection, cuts, servers and step counts for round ``rnd`` (pure, deterministic)."""
    clients = algo.select(rnd, ctx)
    cuts = algo.assign_cuts(rnd, clients, ctx)
    server_of = algo.assign_servers(rnd, clients, cuts, ctx)
    plans = {}
    for c in clients:
        steps, batch = local_steps(cfg, int(ctx.sizes[c]))
        plans[c] = ClientPlan(cuts[c], steps, batch, stream_pos.get(c, 0), cfg.lr_at(rnd))
    return plans, server_of

