"""Fed server actor: hosts the algorithm's aggregator, which holds the global model,
aggregates, evaluates and keeps per-client state (:mod:`raysfl.algorithms.roles.aggregator`).

The global model is one full state dict (every block). Per-client state (PSL's own
client-side models, FLEX-SFL's client submodels between intra-cluster aggregations, parked
modules of the clients' own) lives here between rounds, so client actors hold nothing across
rounds and a restarted actor loses nothing. This actor fetches the round's results (skipping
what a dead or late actor never produced), pushes a merged server state to the servers, and
evaluates (:class:`Evaluator`).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import torch

from raysfl.aggregation import UpdateSum
from raysfl.errors import ConfigError
from raysfl.evaluation import evaluate_by_class, evaluate_predictions, mix_weighted_accuracy, test_shares
from raysfl.evaluation import held as evaluation_held
from raysfl.algorithms.roles.aggregator import block_of
from raysfl.own_states import MIB, OwnStates
from raysfl.data.landing import on_this_node
from raysfl.objective import objective_of
from raysfl.runtime.actor_base import RunActor
from raysfl.runtime.placement import configure_torch, threads_for
from raysfl.runtime.refs import fetch, hand_off, require_run
from raysfl.user_metrics import METRIC_ERROR
from raysfl.transport import state_to_wire, wire_to_state, writable


def counted(s: UpdateSum, keep: set[int] | None) -> bool:
    """Whether a client actor's sum of updates is aggregated: all its clients are (``keep``: the
    aggregated clients, None: all) or none is. The driver sums together only clients it drops
    together (one server's), so a sum split by the driver's verdict is a bug, said as one."""
    if keep is None or keep.issuperset(s.clients):
        return True
    if keep.isdisjoint(s.clients):
        return False
    raise RuntimeError(f"the summed updates of clients {s.clients} are aggregated only in part "
                       f"({sorted(keep.intersection(s.clients))}): a sum cannot be split (raysfl's bug)")


class ClientViews:
    """What the fed server may evaluate a client's model on, besides the global test set: the
    client's local test split (``--local-test-fraction``; indices into the training arrays,
    never trained on) and its training label histogram (to weight per-class test accuracy by
    the client's own label mix)."""

    def __init__(self, local_tests: list[np.ndarray], histograms: np.ndarray | None):
        self.local_tests = [np.asarray(t, dtype=np.int64) for t in local_tests]
        self.histograms = None if histograms is None else np.asarray(histograms)
        self._chance: dict = {}

    def chance(self, labels, clients=None, own_models: bool = False) -> float:
        """What a model that learnt nothing but a constant scores on the local test splits of
        ``clients`` (None: every client with one), the mean over them: with ``own_models`` (a
        model of each client's own) its split's commonest class, else the one class best for
        them all (:func:`raysfl.data.constant_accuracy`). Under a strong label skew the first lies
        far above 1 / classes. The columns ``chance_local``, ``chance_<x>_local`` (ours): the
        floors the verdicts' guards read ``test_accuracy_local``, ``acc_<x>_local`` against
        (:func:`raysfl.reproduce.guards.chance`)."""
        key = (None if clients is None else tuple(clients), own_models)
        if key not in self._chance:
            from raysfl.data import constant_accuracy

            picked = self.local_tests if clients is None else [self.local_tests[c] for c in clients
                                                               if c < len(self.local_tests)]
            self._chance[key] = constant_accuracy(labels, picked, per_split=own_models)
        return self._chance[key]


class FedActor(RunActor):
    """Started once and set up for each run that uses it (:mod:`raysfl.runtime.pool`)."""

    run_fields = ("cfg", "ds", "views", "model", "role")

    def __init__(self, gpus: float = 0.0):
        super().__init__(gpus, "fed server")

    def setup(self, run_name: str, cfg, spec, ctx, shared, dataset, views: ClientViews | None = None,
              model=None) -> str:
        """Take on a run: its config, its algorithm's aggregator holding the run's initial model as
        the global model, the data and the clients' views. Returns the incarnation id."""
        from raysfl.models import initial_model

        configure_torch(cfg, cfg.resources.fed_cpus)
        dataset = on_this_node(dataset)  # a file-backed set on a cluster: read here (raysfl.data.landing)
        self.run_name, self.cfg, self.ds = run_name, cfg, dataset
        self.views = views or ClientViews([], None)
        self.model = initial_model(model, cfg, dataset.input_shape, dataset.num_classes).to(self.device)  # the run's model object
        # a copy: state_to_wire gives views of the model's tensors, and evaluation loads other
        # states into the model -- the initial global model must not change with them
        self.loss = objective_of(ctx)  # the run's loss (raysfl.objective): the test loss and accuracy
        self.metrics = getattr(ctx, "metrics", None)  # metrics of your own (raysfl.user_metrics), or None
        self.role = spec.aggregator(cfg, ctx, shared, {k: v.copy() for k, v in state_to_wire(self.model.state_dict()).items()})
        # the clients' kept states: in memory up to a budget, then in files of this node (ours)
        self.role.own = OwnStates(cfg.resources.own_state_memory_mb * MIB)
        return self.incarnation

    def teardown(self) -> None:
        """Drop the run, and the files of its clients' kept states."""
        role = self.__dict__.get("role")
        if role is not None and isinstance(role.own, OwnStates):
            role.own.close()
        super().teardown()

    def own_files(self, directory: str, names: list[str]) -> dict[str, bytes]:
        """The bytes of kept-state files of this node (a checkpoint written on another node)."""
        out = {}
        for name in names:
            with open(os.path.join(directory, os.path.basename(name)), "rb") as f:
                out[name] = f.read()
        return out

    def dispatch(self, actor_plans: list[dict[int, int]], held: dict[int, str] | None = None):
        """Models for each client actor (``actor_plans``: {client: blocks it holds}): {"global":
        the blocks its clients need, "own": {client: state} for clients that start from a state
        of their own, "resident": {client: name} for those whose client actor keeps that very
        state (``held``: what the driver knows it keeps, raysfl.runtime.resident), "charged":
        clients whose start state is a download}."""
        require_run(self)
        held = held or {}
        kept = self.role.own if isinstance(self.role.own, OwnStates) else None
        out = []
        for plan in actor_plans:
            own, resident, charged = {}, {}, []
            for c in sorted(plan):
                state, download = self.role.client_start(c, plan[c])
                if state is not None:
                    token = kept.token(c, state) if kept is not None and c in held else None
                    if token is not None and token == held[c]:
                        resident[c] = token
                    else:
                        own[c] = state
                if download:
                    charged.append(c)
            need = [plan[c] for c in plan if c not in own and c not in resident]
            top = max(need) if need else 0
            out.append({"global": {k: v for k, v in self.role.global_state.items() if block_of(k) < top},
                        "own": own, "resident": resident, "charged": charged})
        out = hand_off(out, self.cfg.resources.direct_payloads == "on")
        return out if len(out) != 1 else out[0]

    def aggregate(self, rnd: int, aggregated: list[int] | None, server_state_refs: list, update_refs: list,
                  late_refs: list = (), weights: dict[int, float] | None = None, servers: list = (),
                  failures: dict[int, str] | None = None):
        """Merge this round's server-side states and client updates (ObjectRefs: one per
        server, one list of updates per client actor) into the aggregator's state.

        Only updates that exist count: a dead client actor's or server's results are
        skipped, as are clients not in ``aggregated`` (stragglers past the deadline; None: all).
        ``late_refs``: earlier rounds' late update lists, for aggregators that take them.
        ``weights``: the aggregation weight the servers chose per client (``ServerSide.weights``;
        the role's ``round_weights``). ``failures``: the round's clients without an update, and
        why (the driver's verdict; the aggregator's ``failures`` argument). The state the aggregator wants every server to adopt
        goes to ``servers`` (actor handles) here, before this call returns. Returns (the number
        of late updates applied, this actor's incarnation: the driver sees at once whether Ray
        restarted it during the round, the round means of what the aggregator recorded).
        """
        require_run(self)
        role = self.role
        role.round_weights = dict(weights or {})
        server_states = [s if s else {} for s in fetch(server_state_refs)]
        keep = None if aggregated is None else set(aggregated)
        # --snapshot-refs: the snapshot names a kept update by the object it came in (raysfl.own_states)
        by_ref = (isinstance(role.own, OwnStates) and self.cfg.resources.snapshot_refs == "on"
                  and self.cfg.resources.direct_payloads != "on")
        came, where = [], {}  # where: id(update) -> (the ref of its client actor's list, its index)
        for ref, res in zip(update_refs, fetch(update_refs)):
            came.extend(res or ())
            if by_ref:
                where.update((id(u), (ref, j)) for j, u in enumerate(res or ()))
        sums = [s for s in came if isinstance(s, UpdateSum) and counted(s, keep)]
        updates = sorted((u for u in came if not isinstance(u, UpdateSum) and (keep is None or u.client in keep)),
                         key=lambda u: u.client)
        late = [u for res in fetch(list(late_refs)) if res for u in res]
        for u in late:
            u.late = True
        updates = sorted(updates + late, key=lambda u: (u.client, u.late))
        role.last_clients = sorted([u.client for u in updates] + [c for s in sums for c in s.clients])
        role.take_records()  # what a rolled-back attempt recorded is not this round's
        merged = role.aggregate(rnd, server_states, updates + sums, dict(failures or {}))
        if isinstance(role.own, OwnStates):  # updates kept as they came: their client actors keep them too
            for u in updates:
                if u.token is not None:
                    role.own.tag(u.client, u.state, u.token)
                if id(u) in where:
                    role.own.came_from(u.client, u.state, where[id(u)])
        if merged is not None and servers:  # e.g. FLEX-SFL's w_e to every edge server (eq. 26)
            fetch([srv.load_shared.remote(merged) for srv in servers])  # a dead one is restored next round
        return len(late), self.incarnation, role.take_records()

    def evaluate(self, rnd: int = 0) -> tuple[float, float, dict[str, float]]:
        """(test accuracy, test loss, extra metrics) of round ``rnd`` per the aggregator's
        ``evaluate``; with local test splits also ``test_accuracy_local`` and ``test_loss_local``:
        the mean over clients of the model each would run (``Aggregator.client_model``) on its own
        split; and the metrics of your own (``test_<name>``, ``test_<name>_local``). A metric of
        yours that fails gives its one-line message as ``extras[METRIC_ERROR]`` (the driver
        raises it), not an actor error a round would be retried for."""
        require_run(self)
        with threads_for(self.cfg.resources.eval_cpus):  # the CPUs of the actors that wait meanwhile
            return self._evaluate(rnd)

    def _evaluate(self, rnd: int) -> tuple[float, float, dict[str, float]]:
        ev = Evaluator(self.model, self.ds, self.device, self.views, self.loss,
                       passes=self.cfg.eval_passes, seed=(self.cfg.seed, rnd), metrics=self.metrics)
        try:
            acc, loss, extras = self.role.evaluate(ev)
            extras = {**self.role.take_records(), **extras}  # what it recorded while evaluating
            if ev.has_local_tests and "test_accuracy_local" not in extras:
                extras = {**extras, **self._local_accuracy(ev)}
            if ev.has_local_tests and "chance_local" not in extras:  # the role's own: one model (BESplit-G)
                extras = {**extras, "chance_local": ev.chance()}
            return acc, loss, {**extras, **ev.columns()}
        except ConfigError as e:  # a metric of yours (raysfl.user_metrics)
            return float("nan"), float("nan"), {METRIC_ERROR: str(e)}

    def _local_accuracy(self, ev) -> dict[str, float]:
        """``test_accuracy_local``: the mean over the clients of the model each would run on its
        split; and ``chance_local``, its floor over the same clients -- a class of each one's
        own where their models differ (psl's own models), else one class for all."""
        clients = self.role.local_test_clients([c for c, t in enumerate(self.views.local_tests) if len(t)])
        accs, loaded, models = [], None, 0
        for c in clients:
            state = self.role.client_model(c)
            if state is not loaded:  # clients sharing one state load it once
                ev.load(state)
                loaded, models = state, models + 1
            accs.append(ev.local(ev.model, c))
        return {"test_accuracy_local": float(np.mean(accs)) if accs else float("nan"),
                "chance_local": ev.chance(clients, own_models=models > 1)}

    def get_state(self) -> dict:
        require_run(self)
        return self.role.get_state()

    def load_state(self, state: dict) -> None:
        self.role.load_state(state)


class Evaluator:
    """Evaluation for the aggregator's ``evaluate``.

    * ``ev(state)``: a full-model state dict on the global test set -> (accuracy, loss);
    * ``ev.module(m)``: any module mapping inputs to logits (e.g. a client's encoder prefix plus
      its own classifier, built on ``ev.model``), on the global test set;
    * ``ev.chance(clients, own_models)``: what a constant prediction scores on those splits,
      the floor of such an accuracy (``chance_local``);
    * ``ev.local(m, client)``: accuracy of ``m`` on ``client``'s local test split
      (``ev.has_local_tests``: whether the run has them, ``--local-test-fraction``);
    * ``ev.on_label_mix(m, client)``: accuracy of ``m`` on the global test set weighted by
      ``client``'s training label mix (its test-set counterpart, class-weighted);
    * ``ev.own_class_share(m, client)``: the share of ``m``'s predictions on the global test set
      that fall in the classes ``client`` trains on (a model that only ever predicts its
      client's classes scores 1);
    * ``ev.for_client(m, client)``: all of the above on the global test set in one pass;
    * ``ev.shares(clients)``: {client: the test rows its own model is scored on, or None for
      all}, for the ``rows`` argument of ``module``, ``on_label_mix`` and ``for_client``: with
      more per-client models than ``--eval-passes``, the test set is dealt among them
      (:func:`raysfl.evaluation.test_shares`, seeded by the run's seed and the round) and
      ``ev.test_share`` says the share each got (1.0: the whole set).

    Every pass of ``ev(state)``, ``module``, ``for_client`` (the global test set) and ``local``
    is recorded, for ``test_loss_local`` and the metrics of your own (:meth:`columns`): the
    passes of the model(s) the aggregator reports. A pass of another model (an average shown for
    comparison, a client's own path) goes inside ``with ev.aside():``.
    """

    def __init__(self, model, ds, device, views: ClientViews | None = None, loss=None, passes: int = 0,
                 seed=0, metrics=None):
        from raysfl.objective import BUILT_IN

        self.model, self.ds, self.device = model, ds, device
        self.loss = loss if loss is not None else BUILT_IN["cross_entropy"]
        self.num_classes = ds.num_classes
        self.views = views or ClientViews([], None)
        self.passes, self.seed = int(passes or 0), seed
        self.test_share = float("nan")  # set by shares()
        self._base, self._over, self._tensors = None, set(), None  # what load() put in ev.model last
        self.metrics = metrics  # raysfl.user_metrics.UserMetrics, or None
        self.recorded: dict[str, list] = {"test": [], "local": []}  # (rows, accuracy, loss, your metrics) per pass
        self._aside = 0
        self._held = None  # inside held(): whether self.model's passes take channels-last inputs

    @contextlib.contextmanager
    def held(self):
        """Passes of ``self.model`` one after another, each client's part loaded in turn
        (:meth:`load`): its mode and layout set once for all of them
        (:func:`raysfl.evaluation.held`)."""
        with evaluation_held(self.model, self.ds.x_test[:1], self.device) as channels_last:
            self._held = channels_last
            try:
                yield self
            finally:
                self._held = None

    @contextlib.contextmanager
    def aside(self):
        """Passes in the block are not of the model(s) the aggregator reports: they count
        neither for ``test_loss_local`` nor for the metrics of your own."""
        self._aside += 1
        try:
            yield self
        finally:
            self._aside -= 1

    def _pass(self, m, x, y, kind: str):
        """One pass of ``m`` over (x, y): (accuracy, loss, predictions), recorded under ``kind``
        ("test" or "local") unless :meth:`aside`."""
        keep = [] if self.metrics is not None and not self._aside else None
        acc, loss, pred = evaluate_predictions(self._here(m), x, y, self.ds.to_tensor, device=self.device,
                                               loss=self.loss, outputs=keep, held=self._held if m is self.model else None)
        if not self._aside and len(y):
            values = self.metrics.compute(torch.cat(keep), torch.from_numpy(np.array(y))) if keep else {}
            self.recorded[kind].append((len(y), acc, loss, values))
        return acc, loss, pred

    def columns(self) -> dict[str, float]:
        """The round's columns of its recorded passes: ``test_loss_local`` (the mean over the
        clients' local splits, as ``test_accuracy_local``) and the metrics of your own,
        ``test_<name>`` over the test passes and ``test_<name>_local`` over the local ones (by
        sample count, or your ``metrics_aggregation``)."""
        local = self.recorded["local"]
        out = {"test_loss_local": float(np.mean([r[2] for r in local]))} if local else {}
        if self.metrics is not None:
            out.update(self.metrics.combine([(n, v) for n, _, _, v in self.recorded["test"]]))
            if self.has_local_tests:
                out.update(self.metrics.combine([(n, v) for n, _, _, v in local], "_local"))
        return out

    def shares(self, clients) -> dict[int, np.ndarray | None]:
        clients = sorted(clients)
        dealt = test_shares(self.ds.y_test, len(clients), self.passes, self.seed)
        if dealt is None:
            self.test_share = 1.0
            return dict.fromkeys(clients)
        self.test_share = min(1.0, self.passes / len(clients))
        return dict(zip(clients, dealt))

    def _test(self, rows) -> tuple[np.ndarray, np.ndarray]:
        """The global test set, or its ``rows``."""
        if rows is None:
            return self.ds.x_test, self.ds.y_test
        return self.ds.x_test[rows], np.asarray(self.ds.y_test)[rows]

    @property
    def has_local_tests(self) -> bool:
        return any(len(t) for t in self.views.local_tests)

    def chance(self, clients=None, own_models: bool = False) -> float:
        """The floor of an accuracy on the local test splits of ``clients`` (None: all), NaN
        without classes: :meth:`ClientViews.chance`."""
        if self.ds.targets != "classes":
            return float("nan")
        return self.views.chance(self.ds.y_train, clients, own_models)

    def __call__(self, state: dict[str, np.ndarray]) -> tuple[float, float]:
        self.load(state)
        return self.module(self.model)

    def load(self, state: dict[str, np.ndarray], over: dict[str, np.ndarray] | None = None):
        """Load a full-model state dict into ``ev.model`` and return it; with ``over``, its keys
        on top (a client's own client-side part over the global model). Consecutive calls with
        the same ``state`` object copy only the keys an ``over`` sets, now or in the call before:
        a round's per-client models share everything else."""
        if over is None or self._base is not state:
            self.model.load_state_dict(wire_to_state({**state, **over} if over else state, self.device))
            self._base, self._over = (state, set(over)) if over else (None, set())
            return self.model
        if self._tensors is None:
            self._tensors = {**dict(self.model.named_parameters()), **dict(self.model.named_buffers())}
        with torch.no_grad():
            for k in self._over | set(over):
                self._tensors[k].copy_(torch.from_numpy(writable(np.asarray(over[k] if k in over else state[k]))))
        self._over = set(over)
        return self.model

    def _here(self, m):
        """``m`` on this evaluator's device (moved only if it is not: moving walks every module)."""
        p = next(m.parameters(), None)
        return m if p is not None and p.device == torch.device(self.device) else m.to(self.device)

    def module(self, m, rows=None) -> tuple[float, float]:
        x, y = self._test(rows)
        return self._pass(m, x, y, "test")[:2]

    def local(self, m, client: int) -> float:
        """Accuracy of ``m`` on ``client``'s local test split (NaN if it has none, or no classes);
        its loss goes to ``test_loss_local``."""
        idx = self.views.local_tests[client] if client < len(self.views.local_tests) else np.zeros(0, np.int64)
        if not len(idx):
            return float("nan")
        return self._pass(m, self.ds.x_train[idx], np.asarray(self.ds.y_train)[idx], "local")[0]

    def on_label_mix(self, m, client: int, rows=None) -> float:
        """Accuracy of ``m`` on the global test set, each class weighted by ``client``'s share of it."""
        if self.views.histograms is None:
            raise ValueError("no label histograms were given to this evaluator")
        if self.ds.targets != "classes":  # real-valued targets: no classes to weigh
            return float("nan")
        x, y = self._test(rows)
        correct, _ = evaluate_by_class(self._here(m), x, y, self.ds.to_tensor, self.num_classes,
                                       device=self.device)
        return self._label_mix(correct, len(y), client)

    def _label_mix(self, correct: np.ndarray, n_rows: int, client: int) -> float:
        """The label-mix accuracy from the correct predictions per class on ``n_rows`` test rows.
        On a share, the hits are scaled by (test set size / share size), so that on average over
        the dealing they are the whole set's (also for a class a share happens to miss)."""
        y = np.asarray(self.ds.y_test, dtype=np.int64)
        total = np.bincount(y, minlength=self.num_classes)[:self.num_classes]
        scale = len(y) / max(1, n_rows)
        return mix_weighted_accuracy(correct * scale if scale != 1 else correct, total, self.views.histograms[client])

    def own_class_share(self, m, client: int) -> float:
        """Share of ``m``'s global-test predictions in classes ``client`` has training samples of."""
        return self.for_client(m, client)["own_class_share"]

    def for_client(self, m, client: int, rows=None) -> dict[str, float]:
        """One pass of ``m`` over the global test set (or its ``rows``), seen from ``client``:
        ``accuracy`` and ``loss`` (as :meth:`module`), ``label_mix`` (as :meth:`on_label_mix`)
        and ``own_class_share`` (as :meth:`own_class_share`)."""
        if self.views.histograms is None:
            raise ValueError("no label histograms were given to this evaluator")
        mix = np.asarray(self.views.histograms[client])
        x, y = self._test(rows)
        acc, loss, pred = self._pass(m, x, y, "test")
        if self.ds.targets != "classes":  # real-valued targets: no classes, no label mix
            return {"accuracy": acc, "loss": loss, "label_mix": float("nan"), "own_class_share": float("nan")}
        y = np.asarray(y, dtype=np.int64)
        correct = np.bincount(y[pred == y], minlength=self.num_classes)[:self.num_classes]
        return {"accuracy": acc, "loss": loss, "label_mix": self._label_mix(correct, len(y), client),
                "own_class_share": float((mix > 0)[pred].mean()) if len(pred) else float("nan")}

