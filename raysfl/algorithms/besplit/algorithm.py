"""BESplit (besplit.txt): split federated learning with Evidential Aggregation, Bias-Compensated
Collaboration and Dual-Teacher Distillation, against non-IID data.

SplitFed V1's shape -- one server-side model W_S_k per client on the main server, client-side
models aggregated by the fed server -- with three roles of its own (the planner is SplitFed's):
:class:`EvidentialServer` (1-4 below), :class:`DTDClient` (5) and :class:`EvidentialAggregator`.

1. **Evidential learning** (Sec. 3.2, App. B; :mod:`~raysfl.algorithms.besplit.evidential`): the
   server-side model's outputs are Dirichlet evidence (alpha = e + 1, e = exp(logits) by
   default), trained with eq. (5) and its KL term annealed by lambda_t = min(1, t/T), T the
   run's number of rounds (the paper's T in App. D; ``anneal_rounds`` sets another). Each
   evidential step's gradient (server-side and auxiliary models) is clipped at L2 norm
   ``evidential_clip`` (5; not in the paper, whose lr is 500x raysfl's: at raysfl's step, exp
   evidence can silence a class for good -- docs/besplit.md, "dead classes").
2. **Client State Records** (Sec. 4.1, App. C): per client, on the server, the summed
   evidence (N x N), counts and both uncertainties per true class of its smashed data (by
   default as the round's starting server-side model sees them, ``csr_model``), collected in
   every server step (:mod:`~raysfl.algorithms.besplit.bcc_step`), folded into the stored
   record at the end of the round by the staleness-aware EMA (eq. 6), and dropped after
   ``csr_ttl`` rounds without the client. Kept in the server role's :class:`CSRState` (checkpointed).
3. **Evidential Aggregation** (eqs. 7-10; :mod:`~raysfl.algorithms.besplit.evidential_aggregation`):
   w = s / sum s from the records of the round's clients -- by default each class compared
   among the clients that hold it, a non-negative epistemic term (mutual information) and
   n_k in s; ``ea_*`` select the other readings, the printed one included -- used for the
   server-side models (main server, ``EvidentialServer.weights``), whose records the main server
   keeps (App. D.3's theorem is about them); the fed server averages the client-side models by
   sample counts, as SplitFed's does (``ea_sides="both"``: by EA's weights too, through the
   aggregator's ``round_weights``). Reported per client as ``agg_weight`` (the server side's weight).
4. **BCC** (Sec. 4.2, App. D.2; :mod:`~raysfl.algorithms.besplit.bcc`): at a round's first step the
   server estimates P_k and P_g from the records' class counts, finds the biased clients
   (eq. 11) among the round's clients, matches them greedily on eq. (33), and sets each
   pair's mixing ratios from eqs. (31)-(32) with last round's EA weights. The step itself
   (:func:`~raysfl.algorithms.besplit.bcc_step.evidential_server_step`) moves the partner's lent
   smashed samples into the borrower's step (eq. 30: out of the lender's own loss) and routes
   their gradients back to the partner only; a missing partner never holds a step up.
5. **DTD** (Sec. 4.3, eqs. 15-18; :mod:`~raysfl.algorithms.besplit.dtd`): every client trains an
   auxiliary model next to the split step, distilled from its client-side model (KD-C) and
   from the server's predictions (KD-G); the model and its optimiser state stay with the
   client across rounds (``keep_aux_optimizer``). The paper measures both on each client's own test
   split (Sec. 3.1; ``local_test_fraction`` 0.2 by default): BESplit-G is ``acc_g_local``
   (the global model), BESplit-A ``acc_aux_local`` (each client's auxiliary model); on the
   global test set they are ``test_accuracy`` and ``acc_aux``.

The spec (knobs, their choices, paper setting, checks) is in :mod:`raysfl.algorithms.besplit.spec`;
this module holds the roles.

Ablations (Table 4): ``--no-ea`` (sample-weighted averaging; ``--plain-weights uniform``: the
paper's "simple average"), ``--no-ea-evidence`` (w/o E: no Q factor), ``--no-ea-ale``,
``--no-ea-epi``, ``--no-bcc``; ``--no-dtd`` skips the auxiliary models (BESplit-G alone).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from raysfl.aggregation import weighted_average
from raysfl.algorithms.besplit.bcc import bcc_pairs, biased_clients, mix_ratio, overrepresented
from raysfl.algorithms.besplit.bcc_step import evidential_server_step
from raysfl.algorithms.besplit.dtd import auxiliary_model, dtd_loss
from raysfl.algorithms.besplit.evidential_aggregation import ClientStateRecord, ema_update, evidential_weights
from raysfl.algorithms.roles import (HEAD, HEAD_OPTIMIZER, Aggregator, ClientRound, ClientUpdate, OwnModuleClient,
                                     PerClientServer, StepResult, record_gradient_angle)
from raysfl.transport import wire_to_state


def anneal_total(cfg) -> int:
    """T of eq. (5)'s lambda_t = min(1, t/T): ``anneal_rounds``, or the run's rounds."""
    return cfg.algo_params.anneal_rounds or cfg.rounds


@dataclass
class CSRState:
    """The main server's Client State Records and what BCC and EA keep across steps and rounds
    (checkpointed)."""

    csr: dict = field(default_factory=dict)         # client -> its record (ClientStateRecord as a dict)
    pending: dict = field(default_factory=dict)     # client -> this round's summed batch statistics
    bcc_round: int | None = None                    # the round bcc_plan was made for
    bcc_plan: dict = field(default_factory=dict)    # client i -> (partner j, {class n: rho})
    ea_weights: dict = field(default_factory=dict)  # client -> its last EA weight (w_{t-1}, App. D.2)
    bcc_lent: int = 0                               # rows lent this round, and own rows, for bcc_lent_frac
    bcc_own: int = 0


class EvidentialServer(PerClientServer):
    """W_S_k per client (SplitFed V1's shape) trained with the evidential loss, BCC's mixing,
    the Client State Records, and EA's weights at the end of each round."""

    state_cls = CSRState
    stacked_copies = False  # its step works on each client's module (evidential loss, lent rows, records)

    @classmethod
    def columns(cls, cfg) -> list[str]:
        return super().columns(cfg) + ["ea_weight_min", "ea_weight_max", "bcc_biased", "bcc_pairs",
                                       "bcc_lent_frac", "bcc_skipped"]

    def bcc_plan(self) -> dict[int, tuple[int, dict[int, float]]]:
        """Eqs. (11), (33), (13), (31)-(32) over this round's clients that have a record: {client i:
        (partner j, {class n: share of j's class-n samples lent to i})}."""
        csr = self.state.csr
        clients = sorted(c for c in self.client_models if c in csr and np.sum(csr[c]["counts"]) > 0)
        if len(clients) < 2:
            self.record("bcc_biased", 0)
            self.record("bcc_pairs", 0)
            return {}
        total = np.sum([r["counts"] for r in csr.values()], axis=0)
        p_g = total / total.sum()  # the global view: every record the server keeps
        dists = np.stack([csr[c]["counts"] / np.sum(csr[c]["counts"]) for c in clients])
        biased = biased_clients(dists, p_g)
        pairs = bcc_pairs(dists, p_g, biased)
        w_prev = self.state.ea_weights  # w_{t-1} (App. D.2)
        cap = self.params.bcc_max_ratio
        plan = {}
        for a, b in pairs:
            i, j = clients[a], clients[b]
            w_i, w_j = w_prev.get(i, 0.0), w_prev.get(j, 0.0)
            to_j, to_i = overrepresented(dists[a], dists[b])  # classes i lends j, classes j lends i
            plan[i] = (j, {n: min(cap, mix_ratio(dists[b][n], dists[a][n], p_g[n], w_j, w_i)) for n in to_i})
            plan[j] = (i, {n: min(cap, mix_ratio(dists[a][n], dists[b][n], p_g[n], w_i, w_j)) for n in to_j})
        self.record("bcc_biased", len(biased))
        self.record("bcc_pairs", len(pairs))
        return plan

    def step(self, batches):
        x, p = self.state, self.params
        if not p.bcc:
            mixes = {}
        elif x.bcc_round != self.round:
            x.bcc_round, x.bcc_plan = self.round, self.bcc_plan()
            mixes = x.bcc_plan
        else:
            mixes = x.bcc_plan
        grads, losses, logits, stats, lent, skipped = evidential_server_step(
            self.client_models, self.client_opts, batches, mixes, self.round, anneal_total(self.cfg),
            p.evidence, p.ea_epistemic, p.bcc_move, self.model if p.csr_model == "round_start" else None,
            p.evidential_clip)
        for c, st in stats.items():
            if p.csr_rows == "first" and c in x.pending:  # the record takes the round's first batch only
                continue
            acc = x.pending.setdefault(c, {k: np.zeros_like(v) for k, v in st.items()})
            for k, v in st.items():
                acc[k] += v
        if p.bcc:  # lent rows per own row of the round (not a mean over steps)
            x.bcc_lent += sum(lent.values())
            x.bcc_own += sum(len(b[3]) for b in batches)
            self.record("bcc_skipped", len(skipped))
        if self.cfg.grad_angles:
            record_gradient_angle(self, torch.stack([self.client_gradient(c, cut) for c, cut, _, _ in batches]))
        # the server's outputs go back as DTD's global teacher (eq. 15); the borrower's model ran
        # the lent rows: its server FLOPs
        return StepResult(grads, losses, {c: {"logits": t} for c, t in logits.items()} if p.dtd else {}, lent)

    def weights(self, weights: dict[int, float]) -> dict[int, float]:
        """End of round: fold this round's statistics into the records (eq. 6), drop expired
        ones (TTL), and weigh the clients that trained this round by eqs. (7)-(10) (or by
        sample counts without EA). Clients without a step this round get weight 0."""
        x, p = self.state, self.params
        if p.bcc:
            self.record("bcc_lent_frac", x.bcc_lent / max(1, x.bcc_own))
            x.bcc_lent, x.bcc_own = 0, 0
        csr = x.csr
        pending, x.pending = x.pending, {}
        for c, st in pending.items():
            old = ClientStateRecord(**csr[c]) if c in csr else None
            csr[c] = dataclasses.asdict(ema_update(old, ClientStateRecord(**st, round=self.round), p.csr_beta))
        x.csr = {c: r for c, r in csr.items() if self.round - r["round"] <= p.csr_ttl}
        trained = sorted(c for c in weights if c in pending)
        if not trained:
            return {c: 0.0 for c in weights}
        n = np.array([weights[c] for c in trained], dtype=np.float64)  # samples trained on this round
        if p.ea:
            w = evidential_weights([ClientStateRecord(**x.csr[c]) for c in trained], p.ea_evidence, p.ea_ale,
                                   p.ea_epi, average=p.ea_average, samples=n if p.ea_samples else None,
                                   compare=p.ea_compare,
                                   q_average=None if p.ea_q_average == "same" else p.ea_q_average)
        elif p.plain_weights == "uniform":
            w = np.full(len(trained), 1.0 / len(trained))
        else:
            w = n / n.sum()
        chosen = {c: float(v) for c, v in zip(trained, w)}
        x.ea_weights = {c: v for c, v in {**x.ea_weights, **chosen}.items() if c in x.csr}
        self.record("ea_weight_min", min(chosen.values()))
        self.record("ea_weight_max", max(chosen.values()))
        return {c: chosen.get(c, 0.0) for c in weights}


class DTDClient(OwnModuleClient):
    """A client with an auxiliary model (DTD, eqs. 15-18), trained next to each split step and
    kept, with its optimiser state, across rounds; without DTD, SplitFed's client."""

    def has_own_module(self) -> bool:
        return self.params.dtd

    def parks_optimizer(self) -> bool:
        return self.params.keep_aux_optimizer

    def own_module(self, cut, model, num_classes):
        return auxiliary_model(model, cut, num_classes, self.params.aux_head)

    def backward(self, c: ClientRound, acts, reply) -> None:
        """The split step (back-propagate the server's gradient), then the auxiliary model's
        DTD step on the same batch (eq. 18)."""
        super().backward(c, acts, reply)
        if c.head is None:
            return
        p = self.params
        loss, _ = dtd_loss(c.head, c.x, c.y, acts.detach(), reply.extra.get("logits"), c.round, anneal_total(self.cfg), p.kd_tau,
                           p.kd_lambda_c, p.kd_lambda_g, p.evidence, p.kd_c_distance)
        c.head_opt.zero_grad(set_to_none=True)
        loss.backward()
        if p.evidential_clip > 0:
            torch.nn.utils.clip_grad_norm_(c.head.parameters(), p.evidential_clip)
        c.head_opt.step()
        c.stats.client_flops += 3.0 * len(c.y) * c.fwd_flops  # the auxiliary extractor's forward + backward


class EvidentialAggregator(Aggregator):
    """Client-side models weighted by sample counts (``ea_sides="server"``, the default), or by
    the weights the server chose (``ea_sides="both"``: EA's eq. 10 w for both sides); without
    EA by the server's plain weights. Auxiliary models stay with their clients."""

    @classmethod
    def columns(cls, cfg) -> list[str]:
        dtd = cfg.algo_params.dtd
        local = ["acc_g_local", "chance_g_local"] + (["acc_aux_local", "acc_aux_local_std", "chance_aux_local"]
                                                     if dtd else [])
        return local + (["acc_aux", "acc_aux_std", "eval_test_share"] if dtd else [])

    def client_start(self, client: int, cut: int):
        """The global client-side model (a download) plus the client's auxiliary model (kept
        on the device in a deployment; parked on the fed actor here, not counted)."""
        if not self.params.dtd:
            return None, True
        return self.prefix_with_own(client, cut), True

    def aggregate(self, rnd: int, server_states: list[dict], updates: list[ClientUpdate], failures: dict[int, str]):
        parts = []
        for u in updates:
            aux = {k: v for k, v in u.state.items() if k.startswith((HEAD, HEAD_OPTIMIZER))}
            if aux:
                self.own[u.client] = aux
            if self.round_weights and (self.params.ea_sides == "both" or not self.params.ea):
                w = self.round_weights.get(u.client, 0.0)
            else:  # ea_sides "server": the client-side models by their samples, as SplitFed's fed server
                w = u.weight
            parts.append(({k: v for k, v in u.state.items() if not k.startswith((HEAD, HEAD_OPTIMIZER))}, w))
        if parts:
            self.global_state = weighted_average(parts, base=self.global_state)
        for state in server_states:
            self.global_state.update(state)
        return None

    def evaluate(self, ev):
        """The paper's metrics are on the clients' own test splits (Sec. 3.1,
        ``--local-test-fraction``): ``acc_g_local`` (BESplit-G: the global model on each
        client's split, mean over clients) and ``acc_aux_local`` (BESplit-A: each client's
        auxiliary model on its own split, mean; ``acc_aux_local_std`` across clients). On the
        global, balanced test set: ``test_accuracy`` (the global model) and ``acc_aux`` /
        ``acc_aux_std`` (the auxiliary models) -- where a purely local auxiliary model is
        capped by the classes its client has seen. Ours: ``chance_g_local`` and
        ``chance_aux_local``, what a constant prediction scores on the same splits -- one class
        for the global model, each client's commonest for the auxiliary models -- the floors
        the verdicts' guards read those accuracies against."""
        acc, loss = ev(self.global_state)
        nan = float("nan")
        clients = range(self.cfg.clients) if ev.has_local_tests else []
        g_local = [a for a in (ev.local(ev.model, c) for c in clients) if a == a]  # ev.model: the global model
        extras = {"acc_g_local": float(np.mean(g_local)) if g_local else nan,
                  "chance_g_local": ev.chance() if ev.has_local_tests else nan}  # one model: one class (ours)
        extras["test_accuracy_local"] = extras["acc_g_local"]  # the generic column: the same model
        extras["chance_local"] = extras["chance_g_local"]
        if not self.params.dtd:
            return acc, loss, extras
        accs, local = [], []
        rows = ev.shares(self.own)  # with more clients than --eval-passes: a share of the test set each (ours)
        for c in sorted(self.own):
            aux = auxiliary_model(ev.model, self.cfg.cut, ev.num_classes, self.params.aux_head)
            aux.load_state_dict(wire_to_state({k[len(HEAD):]: v for k, v in self.own[c].items() if k.startswith(HEAD)}))
            with ev.aside():  # BESplit-A's auxiliary models: not the global model the generic columns report
                accs.append(ev.module(aux, rows[c])[0])
                a = ev.local(aux, c) if ev.has_local_tests else nan
            if a == a:
                local.append(a)
        extras.update({"acc_aux": float(np.mean(accs)) if accs else nan,
                       "acc_aux_std": float(np.std(accs)) if accs else nan,
                       "acc_aux_local": float(np.mean(local)) if local else nan,
                       "acc_aux_local_std": float(np.std(local)) if local else nan,
                       # its floor (ours): a model of each client's own, stuck on its commonest class
                       "chance_aux_local": ev.chance(sorted(self.own), own_models=True) if local else nan,
                       "eval_test_share": ev.test_share if self.own else nan})
        return acc, loss, extras
