"""Client actor: hosts many virtual clients and runs their client-side steps.

One actor hosts every client k with ``k % num_actors == index``; only the clients selected
in a round hold a model in memory, so 1,000 clients need a handful of processes. A local
step for all of an actor's active clients is ONE call (:meth:`ClientActor.exchange`): it
applies the gradients of the previous step and forwards the next batch, returning one
payload per destination server, so tensors go actor to actor and never via the driver.

Each client draws batches from its own endless, seeded stream of its sample indices (a
fresh permutation per epoch), so a run is reproducible and resumable from a position.
"""

from __future__ import annotations

import copy
import time
import uuid

import numpy as np
import torch

from raysfl.algorithms.base import HEAD_OPTIMIZER, ClientUpdate, Training
from raysfl.optim import build_optimizer
from raysfl.runtime.placement import configure_torch, device_for_actor
from raysfl.runtime.refs import fetch
from raysfl.transport import (ClientRoundStats, Smashed, load_optimizer_state, optimizer_state_to_wire, pack,
                              state_nbytes, state_to_wire, unpack)


def sample_stream(indices: np.ndarray, client: int, seed: int, start: int, count: int) -> np.ndarray:
    """Items ``start .. start+count`` of a client's endless stream of shuffled indices."""
    n = len(indices)
    out = []
    pos = start
    while len(out) < count:
        epoch, offset = divmod(pos, n)
        perm = np.random.default_rng([seed, client, epoch, 0x57EA]).permutation(n)
        take = min(count - len(out), n - offset)
        out.extend(indices[perm[offset:offset + take]].tolist())
        pos += take
    return np.asarray(out, dtype=np.int64)


class _Active:
    """A virtual client during a round: its client-side part, optimizer, stream and stats.

    Algorithms with a client-side classifier (SuperSFL) also get ``head``/``head_opt``;
    ``extra`` is scratch space for their client hooks; ``local`` marks a round in which the
    client's server is unavailable (every step is a fallback step)."""

    def __init__(self, client, cut, steps, batch, stream_pos, part, opt, anchor, stats,
                 head=None, head_opt=None, local=False):
        self.client, self.cut, self.steps, self.batch = client, cut, steps, batch
        self.stream_pos, self.part, self.opt, self.anchor, self.stats = stream_pos, part, opt, anchor, stats
        self.head, self.head_opt, self.local = head, head_opt, local
        self.fwd_flops = 0.0  # forward FLOPs per sample of its client-side part (hooks that add passes count them)
        self.extra: dict = {}
        self.round = 0  # the round being trained (1-based)
        self.x: torch.Tensor | None = None  # the batch being trained (inputs, labels)
        self.y: torch.Tensor | None = None
        self.server_logits: torch.Tensor | None = None  # the server's outputs for it (server_reply "outputs")
        self.pending: torch.Tensor | None = None  # activations awaiting their gradient
        self.failed = False  # its server died or dropped it: it stops and its update is not used


class ClientActor:
    def __init__(self, index: int, cfg, algo, dataset, parts: dict[int, np.ndarray], block_flops: list[int],
                 gpus: float = 0.0, model=None):
        from raysfl.models import initial_model

        configure_torch(cfg, cfg.resources.client_cpus)
        self.index, self.cfg, self.algo, self.ds, self.parts = index, cfg, algo, dataset, parts
        self.device = device_for_actor(gpus, f"client actor {index}")
        self.model = initial_model(model, cfg, dataset.input_shape, dataset.num_classes)  # the run's model object (Federation), or by name
        self.flops = block_flops  # measured once by the driver (FLOP counting is slow to start)
        self.active: dict[int, _Active] = {}
        self.deadline: float | None = None  # epoch seconds (--round-deadline-s)
        self.incarnation = uuid.uuid4().hex  # changes when Ray restarts the actor

    def ping(self) -> str:
        return self.incarnation

    def warm_up(self, batch: int) -> float:
        """Before round 1 (:func:`raysfl.runtime.probe.warm_up`); seconds taken."""
        from raysfl.runtime.probe import warm_up

        return warm_up(self.model, self.ds.input_shape, batch, self.device)

    def where(self) -> dict:
        """Node, GPU ids and device of this actor (``placement.json``)."""
        from raysfl.runtime.placement import actor_location

        return actor_location()

    def memory(self) -> int:
        """Resident set size in bytes (soak benchmarks)."""
        from raysfl.runtime.probe import rss_bytes

        return rss_bytes()

    def probe(self, server, batch: int) -> dict:
        """Measure this actor's device once (SuperSFL, Sec. II-A): memory available to it
        (GB, from /proc/meminfo) and latency = a forward pass of a small dummy CNN on one
        batch plus a round trip of its activation to ``server`` (seconds)."""
        import ray

        from raysfl.runtime.probe import available_memory_bytes

        c = self.ds.input_shape[0]
        dummy = torch.nn.Sequential(torch.nn.Conv2d(c, 8, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
        x = torch.zeros((batch, *self.ds.input_shape))
        t0 = time.perf_counter()
        with torch.no_grad():
            act = pack(dummy(x))
        ray.get(server.echo.remote(act.data))
        return {"memory_gb": available_memory_bytes() / 2**30, "latency_s": time.perf_counter() - t0}

    # ------------------------------------------------------------------ round life cycle
    def begin_round(self, plan: dict[int, dict], models: dict) -> None:
        """Materialise the round's clients: plan[c] = {cut, steps, batch, stream_pos}.

        ``models`` = {"global": state, "own": {client: state}, "charged": [client, ...]}: a
        client loads its own start state when it has one (e.g. PSL, FLEX-SFL), otherwise the
        global one; receiving it counts as a download for the clients in "charged" (the
        client-side part only: a client-side classifier, ``head.*`` keys, never travels).
        ``plan[c]["delay_s"]`` makes client c a real straggler: the actor sleeps (the longest
        delay of its clients) before any of them starts -- until the round's deadline at the
        latest, after which its work would be dropped anyway (unless the algorithm applies late
        updates), so that a straggler is ready for the next round when it starts.
        """
        self.active = {}
        self.deadline = max((p.get("deadline") or 0.0 for p in plan.values()), default=0.0) or None
        delay = max((p.get("delay_s", 0.0) for p in plan.values()), default=0.0)
        if delay > 0 and self.deadline is not None and not self.algo.protocol.late_updates:
            delay = min(delay, max(0.0, self.deadline - time.time()))
        if delay > 0:
            time.sleep(delay)
        for c, p in sorted(plan.items()):
            src = models["own"].get(c, models["global"])
            hi = self.model.num_blocks if p.get("whole") else p["cut"]  # whole: a FedPairing client's full copy
            part = copy.deepcopy(self.model.part(0, hi)).to(self.device)
            keys = set(part.state_dict().keys())
            arrays = {k: v for k, v in src.items() if k in keys}
            part.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}, strict=True)
            part.train()
            opt = build_optimizer(part.parameters(), self.cfg, p["lr"])
            head = self._head(c, p["cut"], src)
            head_opt = build_optimizer(head.parameters(), self.cfg, p["lr"]) if head is not None else None
            if head_opt is not None and self.algo.protocol.client_head_optimizer:
                load_optimizer_state(head_opt, src, HEAD_OPTIMIZER)
            anchor = {k: v.detach().clone() for k, v in part.named_parameters()}
            stats = ClientRoundStats(client=c, cut=p["cut"], samples=0)
            if c in models["charged"]:
                stats.traffic.params_down += state_nbytes(arrays)
                stats.traffic.messages += 1
            self.active[c] = _Active(c, p["cut"], p["steps"], p["batch"], p["stream_pos"], part, opt, anchor, stats,
                                     head, head_opt, bool(p.get("local")))
            self.active[c].fwd_flops = float(sum(self.flops[:p["cut"]]))
            self.active[c].round = int(p.get("round", 0))
            self.active[c].extra.update({"partner": p.get("partner"), "overlap": list(p.get("overlap") or []),
                                         "weight": float(p.get("weight", 1.0))})

    def _head(self, client: int, cut: int, src: dict) -> torch.nn.Module | None:
        """The client's classifier (``Algorithm.client_head``, for algorithms with
        ``protocol.client_heads``): its saved state if it has one, else a fresh one initialised from
        (seed, client)."""
        if not self.algo.protocol.client_heads:
            return None
        with torch.random.fork_rng(devices=[]):  # the CPU generator only, restored after
            torch.random.default_generator.manual_seed(self.cfg.seed * 1_000_003 + client)
            head = self.algo.client_head(cut, self.model, self.ds.num_classes)
        saved = {k[5:]: torch.from_numpy(np.array(v)) for k, v in src.items() if k.startswith("head.")}
        if saved:
            head.load_state_dict(saved, strict=True)
        return head.to(self.device).train()

    def _next_batch(self, a: _Active) -> tuple[torch.Tensor, torch.Tensor]:
        idx = sample_stream(self.parts[a.client], a.client, self.cfg.seed, a.stream_pos, a.batch)
        a.stream_pos += a.batch
        a.stats.samples += len(idx)
        x = self.ds.to_tensor(self.ds.x_train[idx]).to(self.device)
        y = torch.from_numpy(self.ds.y_train[idx]).to(self.device)
        a.x, a.y = x, y
        return x, y

    def _client_flops(self, a: _Active, n: int) -> float:
        # forward + backward ~= 3x the forward FLOPs of the client-side blocks
        return 3.0 * n * a.fwd_flops

    def _arrived(self, replies: list):
        """(client, its activations, the gradient at its cut, the server's loss) for every
        reply a client is waiting for, counting the bytes received. An empty payload is a
        sender that died or is late (or had nothing for this actor)."""
        for payload in replies:
            for c, r in (payload or {}).items():
                a = self.active.get(c)
                if a is None or a.pending is None:
                    continue
                a.stats.traffic.grad_down += r.nbytes
                a.stats.traffic.messages += 1
                acts, a.pending = a.pending, None
                a.server_logits = unpack(r.logits, self.device) if r.logits is not None else None
                yield a, acts, unpack(r.grad, self.device), r.loss

    def _apply_grads(self, grad_refs: list) -> None:
        """Apply the gradients that arrived. A client still waiting for one lost its server
        (dead, dropped it at a deadline, or silent past ``Algorithm.server_timeout_s``): it
        takes a fallback step if its algorithm has one, otherwise it drops out of the round."""
        timeout = self.algo.server_timeout_s()
        waiting = any(a.pending is not None for a in self.active.values())
        replies = fetch(grad_refs, time.time() + timeout if timeout is not None and waiting else None)
        for a, acts, grad, loss in self._arrived(replies):
            self.algo.client_backward(a, acts, grad, loss)
        past = self.deadline is not None and time.time() > self.deadline
        for a in self.active.values():
            if a.pending is None:
                continue
            acts, a.pending = a.pending, None
            if not past and self.algo.client_fallback(a, acts):
                a.stats.fallback_steps += 1
            else:  # no gradient came back: its server is dead or dropped it (deadline)
                a.failed, a.stats.failed = True, True
                a.stats.late = a.stats.late or past

    def exchange(self, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
        """Apply last step's gradients, then forward step ``step`` for the active clients.

        ``routes[c]`` is the destination server of client c; the result holds one payload
        ({client: Smashed}) per entry of ``dests``, in that order. ``grad_refs`` are the
        previous step's gradient payloads (ObjectRefs, fetched here so a dead server only
        costs its own clients). Clients planned ``local`` (their server is unavailable this
        round) take the step on their own, with ``Algorithm.client_fallback``.
        """
        self._apply_grads(grad_refs)
        self._check_deadline()
        out: dict[int, dict[int, Smashed]] = {d: {} for d in dests}
        for c, a in self.active.items():
            if step >= a.steps or a.failed or (c not in routes and not a.local):
                continue
            x, y = self._next_batch(a)
            acts = a.part(x)
            a.stats.client_flops += self._client_flops(a, len(y))
            a.stats.steps += 1
            self.algo.client_forward(a, acts, y)
            if a.local:
                if self.algo.client_fallback(a, acts):
                    a.stats.fallback_steps += 1
                else:
                    a.failed, a.stats.failed = True, True
                continue
            out[routes[c]][c] = self._send(a, acts, y)
        result = [out[d] for d in dests]
        return result if len(result) != 1 else result[0]

    def _send(self, a: _Active, acts: torch.Tensor, y: torch.Tensor | None) -> Smashed:
        """Client ``a``'s smashed batch as it leaves the actor (counted), with its labels
        unless ``y`` is None (FedPairing keeps them home); the activations wait for their
        gradient."""
        a.pending = acts
        s = Smashed(a.client, a.cut, pack(acts, self.cfg.transfer_dtype), y.cpu().numpy() if y is not None else None)
        a.stats.traffic.smashed_up += s.nbytes
        a.stats.traffic.messages += 1
        return s

    def _check_deadline(self) -> None:
        """Past the round's deadline the round is over for this actor: skip the remaining work
        (its results would be dropped anyway), so a late actor catches up at once. Algorithms
        that apply late updates get the whole work done instead."""
        if self.deadline is not None and not self.algo.protocol.late_updates and time.time() > self.deadline:
            for a in self.active.values():
                if not a.failed:
                    a.pending, a.failed, a.stats.failed, a.stats.late = None, True, True, True

    def train_local(self) -> None:
        """All local steps of every active client when it holds the whole model (FedAvg)."""
        for a in self.active.values():
            for _ in range(a.steps):
                self._check_deadline()
                if a.failed:
                    break
                x, y = self._next_batch(a)
                loss = self.algo.client_loss(a.part(x), y)
                reg = self.algo.client_regularizer(a.part, a.anchor)
                a.opt.zero_grad(set_to_none=True)
                (loss if reg is None else loss + reg).backward()
                a.opt.step()
                a.stats.loss_sum += loss.detach().item() * len(y)
                a.stats.loss_count += len(y)
                a.stats.client_flops += self._client_flops(a, len(y))
                a.stats.steps += 1

    def pair_forward(self, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
        """FedPairing: finish last step, forward this one to the partners (peer_split.pair_forward)."""
        from raysfl.runtime.peer_split import pair_forward

        return pair_forward(self, step, dests, routes, grad_refs)

    def pair_serve(self, step: int, payload_refs: list):
        """FedPairing: the partner's forward half of the step for the activations that arrived."""
        from raysfl.runtime.peer_split import pair_serve

        return pair_serve(self, step, payload_refs)

    def pair_loss(self, step: int, dests: list[int], routes: dict[int, int], logit_refs: list):
        """FedPairing: the owners' losses on the outputs that came back (labels stay here)."""
        from raysfl.runtime.peer_split import pair_loss

        return pair_loss(self, step, dests, routes, logit_refs)

    def pair_backward(self, step: int, grad_refs: list):
        """FedPairing: the partner's backward half of the step."""
        from raysfl.runtime.peer_split import pair_backward

        return pair_backward(self, step, grad_refs)

    def finish(self, grad_refs: list):
        """Apply the last gradients; return (updates for the fed server, stats for the driver).

        Clients that lost their server mid-round report stats (``failed``) but no update.
        """
        if self.algo.protocol.training is Training.PEER:
            from raysfl.runtime.peer_split import apply_returned

            apply_returned(self, grad_refs)
        else:
            self._apply_grads(grad_refs)
        updates, stats = [], []
        for c, a in sorted(self.active.items()):
            if a.failed:
                stats.append(a.stats)
                continue
            state = state_to_wire(a.part.state_dict())
            if self.algo.protocol.aggregate_clients:
                a.stats.traffic.params_up += state_nbytes(state)
                a.stats.traffic.messages += 1
            if a.head is not None:  # stays on the device in a deployment: parked, not counted as traffic
                state.update({f"head.{k}": v for k, v in state_to_wire(a.head.state_dict()).items()})
                if self.algo.protocol.client_head_optimizer:
                    state.update(optimizer_state_to_wire(a.head_opt, HEAD_OPTIMIZER))
            updates.append(ClientUpdate(c, state, float(a.stats.samples), report=self.algo.client_report(a)))
            stats.append(a.stats)
        self.active = {}
        return updates, stats
