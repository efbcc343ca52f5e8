"""Client actor: hosts many virtual clients and runs their client-side steps.

One actor hosts every client k with ``k % num_actors == index``; only the clients selected
in a round hold a model in memory, so 1,000 clients need a handful of processes. A local
step for all of an actor's active clients is ONE call (:meth:`ClientActor.step`): it applies
the gradients of the previous step and forwards the next batch, returning one payload per
destination server, so tensors go actor to actor and never via the driver.

What an algorithm's client does is its client role (:mod:`raysfl.algorithms.roles.client`),
which this actor hosts; an exchange of another shape calls the role's own methods through
:meth:`ClientActor.call_role`, with this actor as the host (``active``, ``next_batch``,
``send``, ``arrived``, ``apply_grads``).

Each client draws batches from its own endless, seeded stream of its sample indices (a
fresh permutation per epoch), so a run is reproducible and resumable from a position.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from raysfl.aggregation import sum_updates
from raysfl.algorithms.roles import ClientRound, Reply
from raysfl.data.landing import on_this_node
from raysfl.optim import build_optimizer
from raysfl.runtime.actor_base import RunActor
from raysfl.runtime.client_bank import BankGroup, batch_order, part_is_stackable, role_is_plain, vmap_runs
from raysfl.runtime.placement import configure_torch
from raysfl.runtime.refs import fetch, hand_off, require_run, unwrap
from raysfl.runtime.resident import KeptStates, new_token
from raysfl.transport import ClientRoundStats, Smashed, pack, state_nbytes, unpack


def sample_stream(indices: np.ndarray, client: int, seed: int, start: int, count: int,
                  perms: dict | None = None) -> np.ndarray:
    """Items ``start .. start+count`` of a client's endless stream of shuffled indices.
    ``perms``: a cache of each (client, epoch)'s permutation (they are drawn once, not per batch)."""
    n = len(indices)
    out = []
    pos = start
    while len(out) < count:
        epoch, offset = divmod(pos, n)
        key = (client, epoch)
        perm = perms.get(key) if perms is not None else None
        if perm is None:
            perm = np.random.default_rng([seed, client, epoch, 0x57EA]).permutation(n)
            if perms is not None:
                if len(perms) > 4096:  # epochs long past
                    perms.clear()
                perms[key] = perm
        take = min(count - len(out), n - offset)
        out.extend(indices[perm[offset:offset + take]].tolist())
        pos += take
    return np.asarray(out, dtype=np.int64)


class ClientActor(RunActor):
    """Started once (its process, torch, its device) and set up for each run that uses it
    (:mod:`raysfl.runtime.pool`: a warm federation's next run reuses it)."""

    run_fields = ("cfg", "ds", "parts", "model", "flops", "role", "_spare", "_keys", "_perms", "direct",
                  "bank_of", "_bank_blocks", "kept", "update_weight", "_round")

    def __init__(self, index: int, gpus: float = 0.0):
        super().__init__(gpus, f"client actor {index}")
        self.index = index
        self.active: dict[int, ClientRound] = {}
        self.bank_of: dict = {}
        self.deadline: float | None = None  # epoch seconds (--round-deadline-s)

    def setup(self, run_name: str, cfg, spec, ctx, shared, dataset, parts: dict[int, np.ndarray], model=None) -> str:
        """Take on a run: its config, its algorithm's client role, the data, this actor's clients'
        sample indices and the run's initial model. Returns the incarnation id."""
        from raysfl.models import initial_model

        configure_torch(cfg, cfg.resources.client_cpus)
        dataset = on_this_node(dataset)  # a file-backed set on a cluster: read here (raysfl.data.landing)
        self.run_name, self.cfg, self.ds, self.parts = run_name, cfg, dataset, parts
        self.model = initial_model(model, cfg, dataset.input_shape, dataset.num_classes)  # the run's model object
        self.flops = ctx.block_flops  # measured once by the driver (FLOP counting is slow to start)
        self.role = spec.client(cfg, ctx, shared)
        self.active, self.deadline = {}, None
        self.direct = cfg.resources.direct_payloads == "on"  # resolved by the driver (launch_actors)
        self.on_device = cfg.resources.device_payloads == "on"  # likewise: CUDA payloads stay on the GPU
        self._spare: dict[int, list] = {}  # client-side parts of earlier rounds, by blocks: reused, not copied
        self._keys: dict[int, frozenset] = {}  # block count -> its parts' state-dict keys
        self._perms: dict = {}  # each client's permutation per epoch of its stream
        self.bank_of: dict[int, BankGroup] = {}  # the round's clients that step in a bank: their group
        self._bank_blocks: dict[int, bool] = {}  # block count -> whether its clients may (client_bank.py)
        # the updates it sent, kept to start their clients' next round from (raysfl.runtime.resident)
        self.kept = KeptStates() if cfg.resources.client_bank == "on" and spec.aggregator.keeps_updates else None
        self.update_weight = spec.aggregator.update_weight  # what an update weighs in a sum (--update-sums)
        self._round = 0
        return self.incarnation

    def teardown(self) -> None:
        """Drop the run (its data, model and role) and wait for the next one."""
        super().teardown()
        self.active, self.bank_of, self.deadline = {}, {}, None

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
    def begin_round(self, plans: dict, models: dict) -> None:
        """Materialise the round's clients (``plans``: {client: ClientPlan}).

        ``models`` = {"global": state, "own": {client: state}, "resident": {client: name},
        "charged": [client, ...]}: a client loads its own start state when it has one (e.g. PSL,
        FLEX-SFL), sent or, under "resident", the update this actor sent and kept under that name
        (:mod:`raysfl.runtime.resident`), otherwise the global one; receiving it counts as a
        download for the clients in "charged" (the
        client-side part only: a module of the client's own, ``head.*`` keys, never travels).
        A plan's ``delay_s`` makes its client a real straggler: the actor sleeps (the longest
        delay of its clients) before any of them starts -- until the round's deadline at the
        latest, after which its work would be dropped anyway, so that a straggler is ready for
        the next round when it starts. A plan without a deadline (the aggregator takes late
        updates) sleeps the whole delay and finishes its work.
        """
        require_run(self)
        models = unwrap(models)
        self.active, self.bank_of = {}, {}
        self._round = max((p.round for p in plans.values()), default=0)
        self.deadline = max((p.deadline or 0.0 for p in plans.values()), default=0.0) or None
        delay = max((p.delay_s for p in plans.values()), default=0.0)
        if delay > 0 and self.deadline is not None:
            delay = min(delay, max(0.0, self.deadline - time.time()))
        if delay > 0:
            time.sleep(delay)
        banked: dict[tuple, list] = {}  # (blocks, lr) -> [(ClientRound, its start state)]: see client_bank.py
        for c, p in sorted(plans.items()):
            src = models["own"].get(c)
            if src is None:
                token = models.get("resident", {}).get(c)
                src = models["global"] if token is None else self.kept.take(c, token, f"client actor {self.index}")
            part = self._part(p.blocks)
            keys = self._state_keys(p.blocks, part)
            arrays = {k: v for k, v in src.items() if k in keys}
            in_bank = not p.local and self._bankable(p.blocks, part) and len(arrays) == len(keys)
            part.train()
            stats = ClientRoundStats(client=c, cut=p.cut, samples=0)
            if c in models["charged"]:
                stats.traffic.params_down += state_nbytes(arrays)
                stats.traffic.messages += 1
            a = ClientRound(c, p.cut, p.steps, p.batch, p.stream_pos, part,
                            None, {}, stats,  # its optimiser: _load_alone, or its bank group's
                            round=p.round, local=p.local, plan=p.role, fwd_flops=float(sum(self.flops[:p.cut])),
                            device=self.device,
                            extra_state={k: v for k, v in src.items() if k not in keys and not k.startswith("blocks.")},
                            bounded=p.bounded, weight=p.weight)
            if in_bank:
                banked.setdefault((p.blocks, p.lr), []).append((a, arrays))
            else:
                self._load_alone(a, arrays, p.lr)
        for (_, lr), rows in banked.items():
            if len(rows) == 1:  # a group of one: its own module and optimiser, as without a bank
                self._load_alone(*rows[0], lr)
                continue
            rank = {c: k for k, c in enumerate(batch_order({a.client: self._batch_sizes(a) for a, _ in rows}))}
            rows = sorted(rows, key=lambda r: rank[r[0].client])  # each step's batch sizes in runs of rows
            group = BankGroup([a for a, _ in rows], [s for _, s in rows], self.cfg, lr, self.device)
            for a, _ in rows:
                self.bank_of[a.client] = group
                self._begin(a)
        self.active = dict(sorted(self.active.items()))

    def _load_alone(self, a: ClientRound, arrays: dict, lr: float) -> None:
        """Client ``a`` outside a bank: its start state loaded into its part, its own optimiser."""
        a.part.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in arrays.items()}, strict=True)
        a.opt = build_optimizer(a.part.parameters(), self.cfg, lr)
        self._begin(a)

    def _begin(self, a: ClientRound) -> None:
        """Client ``a`` (its part loaded) starts its round: its role's ``begin``, anchor and scratch."""
        self.role.begin(a, self.model)
        if self.role.needs_anchor:
            a.anchor = {k: v.detach().clone() for k, v in a.part.named_parameters()}
        a.state = self.role.new_state(a)
        self.active[a.client] = a

    def _bankable(self, blocks: int, part: torch.nn.Module) -> bool:
        """Whether this run's clients of ``blocks`` client-side blocks step in a bank
        (:mod:`raysfl.runtime.client_bank`; decided once per run and block count)."""
        known = self._bank_blocks.get(blocks)
        if known is None:
            known = (self.cfg.resources.client_bank == "on"
                     and blocks < self.model.num_blocks  # a split client (a whole model trains locally: FedAvg)
                     and role_is_plain(self.role) and part_is_stackable(part)
                     and vmap_runs(part, self.ds.input_shape, self.device))
            self._bank_blocks[blocks] = known
        return known

    def _state_keys(self, blocks: int, part: torch.nn.Module) -> frozenset:
        """The state-dict keys of a part of ``blocks`` blocks, read once per run and block count
        (``state_dict()`` walks the module: 18 us a client, 9 ms a round at 500 clients)."""
        keys = self._keys.get(blocks)
        if keys is None:
            keys = self._keys[blocks] = frozenset(part.state_dict().keys())
        return keys

    def _part(self, blocks: int) -> torch.nn.Module:
        """A module for blocks [0, ``blocks``) of the run's model: one an earlier round of this run
        used (its weights are about to be replaced), else a new copy. Copying a module for every
        client of every round was most of a 100-client round's time."""
        spare = self._spare.get(blocks)
        if spare:
            part = spare.pop()
            for q in part.parameters():
                q.grad = None
            return part
        return copy.deepcopy(self.model.part(0, blocks)).to(self.device)

    def next_batch(self, a: ClientRound) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``a``'s next batch from its stream (counted in its samples)."""
        count = self._batch_size(a, a.stream_pos)
        idx = sample_stream(self.parts[a.client], a.client, self.cfg.seed, a.stream_pos, count, self._perms)
        a.stream_pos += count
        a.stats.samples += len(idx)
        x = self.ds.to_tensor(self.ds.x_train[idx]).to(self.device)
        labels = self.ds.y_train[idx]
        y = torch.from_numpy(labels).to(self.device)
        a.x, a.y, a.labels = x, y, labels
        return x, y

    def _batch_size(self, a: ClientRound, pos: int) -> int:
        """Client ``a``'s batch drawn at position ``pos`` of its stream: ``--epoch pass`` ends a
        batch with the epoch."""
        n = len(self.parts[a.client])
        return min(a.batch, n - pos % n) if a.bounded else a.batch

    def _batch_sizes(self, a: ClientRound) -> list[int]:
        """Client ``a``'s batch sizes this round, step by step, as :meth:`next_batch` draws them."""
        pos, out = a.stream_pos, []
        for _ in range(a.steps):
            out.append(self._batch_size(a, pos))
            pos += out[-1]
        return out

    def fetch(self, refs: list, deadline: float | None = None) -> list:
        """The values of ``refs`` (other actors' payloads): DEAD / LATE for a dead or late sender."""
        return fetch(refs, deadline)

    def client_flops(self, a: ClientRound, n: int) -> float:
        """Forward + backward ~= 3x the forward FLOPs of the client-side blocks, for ``n`` samples."""
        return 3.0 * n * a.fwd_flops

    def arrived(self, replies: list):
        """(client, its activations, the server's :class:`Reply`) for every reply a client is
        waiting for, counting the bytes received. An empty payload is a sender that died or is
        late (or had nothing for this actor)."""
        for payload in replies:
            for c, r in (payload or {}).items():
                a = self.active.get(c)
                if a is None or a.pending is None:
                    continue
                a.stats.traffic.grad_down += r.nbytes
                a.stats.traffic.messages += 1
                acts, a.pending = a.pending, None
                extra = {k: v if isinstance(v, float) else unpack(v, self.device) for k, v in r.extra.items()}
                yield a, acts, Reply(unpack(r.grad, self.device), extra)

    def apply_grads(self, grad_refs: list) -> None:
        """Apply the gradients that arrived. A client still waiting for one lost its server
        (dead, dropped it at a deadline, or silent past the role's ``server_timeout_s``): it
        takes a fallback step if its role has one, otherwise it drops out of the round."""
        timeout = self.role.server_timeout_s
        waiting = any(a.pending is not None for a in self.active.values())
        replies = fetch(grad_refs, time.time() + timeout if timeout is not None and waiting else None)
        for a, acts, reply in self.arrived(replies):
            group = self.bank_of.get(a.client)
            if group is None:
                self.role.backward(a, acts, reply)
            else:  # its backward and step come with its group's, below
                group.receive(a.client, reply.grad)
        for group in self._groups():
            group.step()
        past = self.deadline is not None and time.time() > self.deadline
        for a in self.active.values():
            if a.pending is None:
                continue
            acts, a.pending = a.pending, None
            if not past and self.role.fallback(a, acts):
                a.stats.fallback_steps += 1
            else:  # no gradient came back: its server is dead or dropped it (deadline)
                a.failed, a.stats.failed = True, True
                a.stats.past_deadline = a.stats.past_deadline or past

    def step(self, step: int, dests: list[int], routes: dict[int, int], grad_refs: list):
        """Apply last step's gradients, then forward step ``step`` for the active clients.

        ``routes[c]`` is the destination server of client c; the result holds one payload
        ({client: Smashed}) per entry of ``dests``, in that order. ``grad_refs`` are the
        previous step's gradient payloads (ObjectRefs, fetched here so a dead server only
        costs its own clients). Clients planned ``local`` (their server is unavailable this
        round) take the step on their own, with the role's ``fallback``.
        """
        require_run(self)
        self.apply_grads(grad_refs)
        self._stop_past_deadline()
        out: dict[int, dict[int, Smashed]] = {d: {} for d in dests}
        stepping = [a for c, a in self.active.items()
                    if not (step >= a.steps or a.failed or (c not in routes and not a.local))]
        banked = [a for a in stepping if a.client in self.bank_of]
        batches = {a.client: self.next_batch(a) for a in banked}
        banked_acts = self._bank_forward(banked, batches)
        for a in stepping:
            c = a.client
            x, y = batches[c] if c in batches else self.next_batch(a)
            acts = banked_acts[c] if c in banked_acts else a.part(x)
            a.stats.client_flops += self.client_flops(a, len(y))
            a.stats.steps += 1
            self.role.forward(a, acts, y)
            if a.local:
                if self.role.fallback(a, acts):
                    a.stats.fallback_steps += 1
                else:
                    a.failed, a.stats.failed = True, True
                continue
            out[routes[c]][c] = self.send(a, acts, y)
        result = hand_off([out[d] for d in dests], self.direct)
        return result if len(result) != 1 else result[0]

    def _groups(self) -> list[BankGroup]:
        """The round's bank groups, each once."""
        return list({id(g): g for g in self.bank_of.values()}.values())

    def _bank_forward(self, members: list[ClientRound], batches: dict) -> dict[int, torch.Tensor]:
        """The activations of the banked clients ``members`` on their ``batches``, one stacked
        forward per group (:class:`~raysfl.runtime.client_bank.BankGroup`)."""
        by_group: dict[int, list[ClientRound]] = {}
        for a in members:
            by_group.setdefault(id(self.bank_of[a.client]), []).append(a)
        acts = {}
        for rows in by_group.values():
            group = self.bank_of[rows[0].client]
            out = group.forward([group.row[a.client] for a in rows], [batches[a.client][0] for a in rows])
            acts.update({a.client: t for a, t in zip(rows, out)})
        return acts

    def send(self, a: ClientRound, acts: torch.Tensor, y: torch.Tensor | None,
             on_device: bool | None = None) -> Smashed:
        """Client ``a``'s smashed batch as it leaves the actor (counted), with its labels
        unless ``y`` is None (FedPairing keeps them home); the activations wait for their
        gradient. ``on_device``: as the run's ``--device-payloads`` unless given (False where
        the receiver may be this process: FedPairing's partners)."""
        a.pending = acts
        labels = None if y is None else a.labels if y is a.y else y.cpu().numpy()  # the host's copy: no GPU sync
        wire = pack(acts, self.cfg.transfer_dtype, self.on_device if on_device is None else on_device)
        s = Smashed(a.client, a.cut, wire, labels)
        a.stats.traffic.smashed_up += s.nbytes
        a.stats.traffic.messages += 1
        return s

    def _stop_past_deadline(self) -> None:
        """Past the round's deadline the round is over for this actor: skip the remaining work
        (its results would be dropped anyway), so a late actor catches up at once."""
        if self.deadline is not None and time.time() > self.deadline:
            for a in self.active.values():
                if not a.failed:
                    a.pending, a.failed, a.stats.failed, a.stats.past_deadline = None, True, True, True

    def train_local(self) -> None:
        """All local steps of every active client when it holds the whole model (FedAvg)."""
        require_run(self)
        for a in self.active.values():
            for _ in range(a.steps):
                self._stop_past_deadline()
                if a.failed:
                    break
                x, y = self.next_batch(a)
                loss = self.role.local_step(a, x, y)
                a.stats.loss_sum += loss * len(y)
                a.stats.loss_count += len(y)
                a.stats.client_flops += self.client_flops(a, len(y))
                a.stats.steps += 1

    def call_role(self, method: str, *args):
        """An exchange of the algorithm's own (FedPairing's): its client role's ``method``, with
        this actor as the host."""
        require_run(self)
        out = getattr(self.role, method)(self, *args)  # a list for a call with several returns
        sent = hand_off(out if isinstance(out, list) else [out], self.direct)
        return sent if isinstance(out, list) else sent[0]

    def end_round(self, grad_refs: list, sum_by: dict[int, int] | None = None):
        """Apply the last gradients; return (updates for the fed server, stats for the driver).

        Clients that lost their server mid-round report stats (``failed``) but no update.
        ``sum_by`` ({client: group}, where the aggregator takes sums: ``--update-sums``, ours):
        the updates of a group's clients go as one weighted sum (``aggregation.sum_updates``). Where
        the fed server keeps updates as they came (``Aggregator.keeps_updates``, ``--client-bank
        on``), this actor keeps each update too, named in it and in its stats, so that the
        client's next round can start from it here (:mod:`raysfl.runtime.resident`).
        """
        require_run(self)
        self.role.finish_steps(self, grad_refs)
        updates, stats = [], []
        for c, a in sorted(self.active.items()):
            if not a.failed:
                updates.append(self.role.update(a))
                if self.kept is not None:
                    self._keep(a, updates[-1])
            elif self.kept is not None:
                self.kept.drop(c)
            stats.append(a.stats)
        if self.kept is not None:
            self.kept.end_round(self._round)
        if sum_by:
            updates = sum_updates(updates, sum_by, self.update_weight)
        # the parts serve the next round's clients (Ray has serialised the updates, views of them,
        # once this call returns); begin_round sets their mode
        for a in self.active.values():
            self._spare.setdefault(len(a.part.blocks), []).append(a.part)
        self.active, self.bank_of = {}, {}
        return hand_off([updates], self.direct)[0], stats

    def _keep(self, a: ClientRound, u) -> None:
        """Keep client ``a``'s update ``u`` (views of its part's tensors) under a new name. The part
        serves later rounds: a banked part's tensors are views of its group's rows, which no later
        round writes, so it gets new storage and the views are kept; another's are copied."""
        if a.client in self.bank_of:
            for t in [*a.part.parameters(), *a.part.buffers()]:
                t.data = torch.empty_like(t.data)
            state = u.state
        else:
            state = {k: np.array(v) for k, v in u.state.items()}
        u.token = a.stats.kept = new_token()
        self.kept.keep(self._round, a.client, u.token, state)
