"""One round of a federated run, as the driver runs it: plan, inject faults, run it on the
federation (retrying it after a lost server), decide who is included, log its metrics row,
keep the state to roll back to, checkpoint.

With ``--eval-overlap on`` (the default, ours) a round's evaluation runs on the fed server while
the next round trains: its rows wait (:class:`PendingRow`) and are logged, checkpointed and
shown to the callbacks once that training is in, before its aggregation (:func:`settle_pending`).
With ``--run-ahead on`` (the default, ours) the next round is planned and submitted behind this
round's aggregation (:mod:`raysfl.runtime.run_ahead`); a round is planned by
:func:`raysfl.runtime.round_plan.plan_for` either way.

:class:`Experiment` holds what every round of a run needs; :func:`run_round` runs one;
:func:`round_metrics` turns a round's per-client statistics into the rows of
``metrics.parquet`` and ``clients.parquet``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from raysfl import checkpoint, own_state_files
from raysfl.algorithms.roles import FederationContext, Planner
from raysfl.errors import Diverged, RunFailed
from raysfl.runtime import interrupts, run_ahead
from raysfl.runtime.checkpoint_writer import CheckpointWriter
from raysfl.runtime.federation import Federation, FedServerLost, RoundInFlight, RoundResult
from raysfl.runtime.round_plan import deadlines, plan_for, say_away
from raysfl.runtime.run_ahead import Ahead, put_back, undo_ahead
from raysfl.runtime.rows import TRAFFIC_COLUMNS, client_row, round_row
from raysfl.simclock import compute_time
from raysfl.transport import ClientRoundStats

def new_counters() -> dict:
    """The driver's running totals, checkpointed with the federation: each client's position
    in its sample stream, simulated and wall-clock seconds so far."""
    return {"stream_pos": {}, "sim_total": 0.0, "wall_total": 0.0}


@dataclass
class Experiment:
    """One run being driven: its settings, algorithm, data, where it writes, and its counters."""

    cfg: "object"                 # the validated raysfl.config.Config
    spec: type                    # the algorithm (raysfl.algorithms.Algorithm): its roles
    planner: Planner              # its planner, set up
    ds: "object"                  # raysfl.data.DatasetArrays
    parts: list                   # each client's training sample indices
    ctx: FederationContext
    run_dir: Path
    logger: "object"              # raysfl.metrics.RunLogger
    local_tests: list = field(default_factory=list)  # each client's local test indices (--local-test-fraction)
    faults: list = field(default_factory=list)   # parsed --faults
    counters: dict = field(default_factory=new_counters)
    model: "object" = None        # the initial SplitModel: every actor starts from a copy of it
    callbacks: "object" = None    # raysfl.callbacks.Callbacks, called after every round
    stopped: bool = False         # a callback ended the run early
    pending: "PendingRow | None" = None  # a round whose row waits for its evaluation (--eval-overlap)
    ahead: "Ahead | None" = None  # the next round, submitted behind this one's aggregation (--run-ahead)
    writer: CheckpointWriter = field(default_factory=CheckpointWriter)  # checkpoints, written beside the next round
    digest: checkpoint.RowsDigest = field(default_factory=checkpoint.RowsDigest)  # the rows' hash, row by row

    def due(self, rnd: int, every: int) -> bool:
        """Whether something done every ``every`` rounds (and at the last) happens in ``rnd``."""
        return bool(every) and (rnd % every == 0 or rnd == self.cfg.rounds)

    def evaluates(self, rnd: int) -> bool:
        """Whether round ``rnd`` is evaluated: every ``--eval-every`` rounds, or the rounds
        ``--eval-rounds`` names; the last round always."""
        if self.cfg.eval_rounds:
            from raysfl.config import round_set

            return rnd in round_set(self.cfg.eval_rounds) or rnd == self.cfg.rounds
        return self.due(rnd, self.cfg.eval_every)


@dataclass
class PendingRow:
    """A round trained, aggregated and snapshotted whose evaluation runs on the fed server while
    the next round trains (``--eval-overlap``): its rows, made without the evaluation's columns,
    wait for it (:func:`settle_pending`)."""

    rnd: int
    row: dict
    client_rows: list
    thin: tuple | None  # (res, included, selected, events) for the warning of a thin round, or None


def run_round(exp: Experiment, fed: Federation, rnd: int) -> None:
    """Plan, run (surviving faults), log and checkpoint round ``rnd``.

    A dead client actor or edge server costs only its clients; a dead main server or fed
    server rolls the round back to the last snapshot and retries it (``--max-round-retries``),
    unless the algorithm's clients survive their server (the client role's
    ``survives_server_loss``: SuperSFL's fallback), in which case the round goes on and the
    restarted server is restored.

    Stragglers cost only themselves (docs/reliability.md): on the real clock a server step
    goes on without smashed data that missed the step's deadline (``step_window``); on the
    simulated clock (``--sim-deadline-s``) the round is replayed from its start with only the
    clients it includes (:func:`without_sim_stragglers`), so that a dropped client contributes
    nothing, on the client side or the server side. A round that includes nobody changes
    nothing (:func:`aggregate_round`).
    """
    cfg, planner, ctx, logger = exp.cfg, exp.planner, exp.ctx, exp.logger
    ahead, exp.ahead = exp.ahead, None
    t0 = time.perf_counter()  # submitted ahead: the submission counted in the round before's wall time
    planner.take_records(), planner.take_client_records()  # what it recorded before this round is not this round's
    if ahead is not None:  # what it recorded planning this round, in the round before
        put_back(planner, ahead.records)
    plan = ahead.plan if ahead is not None else plan_for(exp, fed, rnd, exp.counters["stream_pos"])
    events, plans, server_of, selected = plan.events, plan.plans, plan.server_of, plan.selected
    sim_delay, real_delay, evaluate, kills = plan.sim_delay, plan.real_delay, plan.evaluate, plan.kills
    for attempt in range(cfg.max_round_retries + 1):
        deadline = time.time() + cfg.round_deadline_s if cfg.round_deadline_s else None
        progress = lambda done, total: logger.step_progress(rnd, done, total)  # noqa: E731
        if ahead is not None and attempt == 0:  # submitted behind the round before's aggregation
            flight = fed.collect_round(ahead.submitted, on_step=progress)
        else:
            flight = fed.run_round(rnd, plans, server_of, kills=kills, deadline=deadline, on_step=progress)
        kills = []  # injected faults fire once, not on the retry
        try:
            _count_losses(exp, fed, flight.result, events)
            settle_pending(exp, fed)  # the round before's row: evaluated while this one trained
            if exp.stopped:  # a callback stopped the run at the round before: this one never happened
                fed.restore()  # the servers back to that round's end (they trained in this one)
                return
            classify(exp, fed, plans, server_of, flight.result)
            aggregated = included(exp, flight.result, sim_delay)
            flight, aggregated = without_sim_stragglers(exp, fed, rnd, plans, server_of, flight, aggregated,
                                                        sim_delay, events)
            bad = diverged_clients(flight.result)
            snapshot = not bad and (cfg.max_round_retries or exp.due(rnd, cfg.checkpoint_every) or deadlines(cfg))
            # the evaluation overlaps the next round's training where the round's state is kept to go back to
            # (a callback that stops the run here undoes that training) and the run goes on after it
            defer = bool(evaluate and snapshot and rnd < cfg.rounds and cfg.resources.eval_overlap == "on")
            then = None
            if run_ahead.runs_ahead(exp, fed, rnd, snapshot, aggregated):  # the next round goes behind the aggregation
                def then(aggregation):
                    run_ahead.submit_ahead(exp, fed, rnd, flight, plans, defer, aggregation)
            result = aggregate_round(exp, fed, flight, aggregated, evaluate, defer, then=then)
            defer = defer and result is None  # a round that included nobody was evaluated at once
            events["late_applied"] = fed.late_applied
            if snapshot:
                if exp.ahead is None:  # (asked for already behind the aggregation where the next round went too)
                    fed.snapshot_at(rnd)  # the state to go back to if a later round fails (not a diverged one)
                fed.confirm_snapshot()  # an actor lost since the aggregation: the round is redone
            if defer and exp.ahead is None:  # only once the round counts: a retried round asks for no evaluation
                fed.defer_evaluation(rnd)      # of the state before it (submitted ahead: asked behind its dispatch)
            break
        except FedServerLost as e:
            undo_ahead(exp, fed)
            if attempt == cfg.max_round_retries:
                settle_on_the_way_out(exp, fed)
                done = exp.logger.rows[-1]["round"] if exp.logger.rows else 0
                raise RunFailed(f"round {rnd}: the fed server or a server was lost {attempt + 1} time(s) (last: {e}) "
                                f"and --max-round-retries is "
                                f"{cfg.max_round_retries}; giving up. Metrics of rounds 1..{done} are in "
                                f"{exp.run_dir}; {resume_hint(exp, f'--max-round-retries {cfg.max_round_retries + 2}')}"
                                ) from None
            events["retries"] += 1
            if not e.counted:
                events["failures"] += 1  # the fed server died while aggregating (not counted above)
            was_away = set(fed.away)
            events["restarts"] += fed.rollback()
            say_away(rnd, fed, was_away, ctx.num_clients)
            if fed.away:  # client actors lost with the server and not placed again: the retry goes without them
                gone = [c for c in plans if fed.actor_of(c) in fed.away]
                events["unavailable_clients"] += len(gone)
                plans = {c: p for c, p in plans.items() if c not in gone}
    res = flight.result
    events["failed_clients"] = len(res.failed)
    events["dropped"] = len(res.late | {c for c in res.stats if c not in aggregated and c not in res.failed})
    events["fallbacks"] = sum(1 for st in res.stats.values() if st.fallback_steps)
    with interrupts.held():  # a signal now waits until the round is logged and checkpointed
        wall = time.perf_counter() - t0  # the whole round, snapshot included (logging runs on its own thread)
        for c, p in plans.items():
            exp.counters["stream_pos"][c] = p.stream_pos + p.samples
        delays = {**sim_delay, **real_delay}
        row, client_rows = round_metrics(exp, rnd, res, result, wall, sim_delay=sim_delay, included=set(aggregated),
                                         cuts={c: p.cut for c, p in plans.items()},
                                         events=events, delays=delays, selected=selected)
        thin = (res, set(aggregated), selected, events) if row["below_min_included"] else None
        if defer:  # logged, called back and checkpointed once the next round has trained
            exp.pending = PendingRow(rnd, row, client_rows, thin)
            return
        finish_row(exp, rnd, row, client_rows, thin)
        if bad:  # stop before this round's state reaches a checkpoint; the previous one resumes
            raise Diverged(f"training diverged: the loss of client(s) {bad[:5]} became NaN/inf in round {rnd} "
                           f"(lr {cfg.lr_at(rnd):g}); start a new run with a lower --lr (or --lr-schedule); metrics of "
                           f"rounds 1..{rnd - 1} are in {exp.run_dir}", rnd)
        checkpoint_and_call_back(exp, fed, rnd, row)


def finish_row(exp: Experiment, rnd: int, row: dict, client_rows: list, thin) -> None:
    """Log round ``rnd``'s rows (and warn of a thin round)."""
    exp.logger.log_round(row, client_rows)
    if thin is not None:
        _warn_thin(exp, rnd, *thin)


def checkpoint_and_call_back(exp: Experiment, fed: Federation, rnd: int, row: dict) -> None:
    """Round ``rnd``'s checkpoint when it is due; then the callbacks see its row, and one may
    stop the run (:attr:`Experiment.stopped`): its state is checkpointed then, due or not."""
    cfg = exp.cfg
    if exp.due(rnd, cfg.checkpoint_every):
        save_checkpoint(exp, fed, rnd)
    if exp.callbacks is not None and exp.callbacks.round(row):  # a callback asked to stop here
        exp.stopped = True
        if cfg.checkpoint_every and not exp.due(rnd, cfg.checkpoint_every):
            if fed.snapshot_round != rnd:  # no snapshot of it (--max-round-retries 0)
                fed.snapshot_at(rnd)
                fed.confirm_snapshot()  # FedServerLost: the run fails (experiment.py), never a wrong state
            save_checkpoint(exp, fed, rnd)


def settle_pending(exp: Experiment, fed: Federation, timeout: float | None = None) -> None:
    """The row of the round whose evaluation overlapped this one's training (``--eval-overlap``):
    its evaluation collected (:meth:`Federation.deferred_result`), its columns filled, the row
    logged, checkpointed and shown to the callbacks, as :func:`run_round` does for a round not
    deferred. Raises :class:`FedServerLost` if the fed server died meanwhile; the row stays
    pending, and after the rollback the evaluation is asked again, of that round's snapshot."""
    p = exp.pending
    if p is None:
        return
    result = fed.deferred_result(timeout)
    with interrupts.held():  # a signal now waits until the round is logged and checkpointed
        exp.pending = None
        with_evaluation(exp, p.row, result)
        finish_row(exp, p.rnd, p.row, p.client_rows, p.thin)
        checkpoint_and_call_back(exp, fed, p.rnd, p.row)


def settle_on_the_way_out(exp: Experiment, fed: Federation, timeout: float = 60.0) -> None:
    """A run that fails or is interrupted while a round's row waits for its evaluation: that
    row is written if its evaluation can still be had (the rounds done are never lost to the
    overlap); a warning says so where it cannot."""
    if exp.pending is None:
        return
    rnd = exp.pending.rnd
    try:
        settle_pending(exp, fed, timeout)
    except Exception as e:  # noqa: BLE001 - the run is failing already: say what is lost, keep its error
        exp.pending = None
        print(f"raysfl: warning: round {rnd}'s evaluation could not be collected on the way out "
              f"({type(e).__name__}); its row is not written", file=sys.stderr, flush=True)


def diverged_clients(res: RoundResult) -> list[int]:
    """Clients whose training loss became NaN/inf this round."""
    return sorted(c for c, st in res.stats.items() if st.loss_count and not math.isfinite(st.loss_sum))


def classify(exp: Experiment, fed: Federation, plans: dict, server_of: dict[int, int], res: RoundResult) -> None:
    """Decide, from what the actors reported, which of the round's clients failed and which were
    late (``res.failed``, ``res.late``) -- the one place that does. Late (a straggler on the real
    clock): its client actor's results missed the round deadline, or it stopped at the deadline,
    or its smashed data missed a server step's window and it could not go on without the answer.
    Failed: its client actor died, or its server did and it cannot go on without it, or it lost
    its server's answer otherwise, or it never reported."""
    survives = exp.spec.client.survives_server_loss
    res.failed, res.late = set(), set()
    for c in plans:
        actor = fed.actor_of(c)
        st = res.stats.get(c)
        if actor in res.late_actors:
            res.late.add(c)
        elif actor in res.dead_clients or (server_of.get(c) in res.dead_servers and not survives
                                           and not plans[c].local):
            res.failed.add(c)
        elif st is not None and (st.past_deadline or (st.missed_step and st.failed)):
            res.late.add(c)
        elif st is None or st.failed:
            res.failed.add(c)


def save_checkpoint(exp: Experiment, fed: Federation, rnd: int) -> None:
    """Round ``rnd``'s checkpoint (the federation's snapshot, the driver's counters), then
    keep only the newest ``--keep-checkpoints`` (and the best with ``--keep-best``). What it
    holds is fixed here; it is written on the checkpoint writer's thread while the next round
    trains (:mod:`raysfl.runtime.checkpoint_writer`)."""
    state = fed.snapshot
    if fed.snapshot_round != rnd or state is None or state.get("round", rnd) != rnd:
        raise RunFailed(f"round {rnd}'s checkpoint: the state at hand is round {fed.snapshot_round}'s, not round "
                        f"{rnd}'s; nothing written. Metrics of rounds 1..{rnd} are in {exp.run_dir}; "
                        f"{resume_hint(exp)}")
    counters, rows, cfg_dict, fed_actor = copy.deepcopy(exp.counters), list(exp.logger.rows), exp.cfg.to_dict(), fed.fed

    def write() -> None:
        exp.logger.flush()  # the rounds this checkpoint covers are on disk before it is
        federation = own_state_files.for_checkpoint(exp.run_dir, rnd, state, fed_actor)  # kept states: files, once each
        checkpoint.save(exp.run_dir, rnd, {"round": rnd, "counters": counters, "federation": federation},
                        cfg_dict, metrics_rows=rows, digest=exp.digest)
        prune_checkpoints(exp, rows)

    exp.writer.submit(write, f"round {rnd}'s checkpoint")


def prune_checkpoints(exp: Experiment, rows: list[dict]) -> None:
    """Keep the newest ``--keep-checkpoints`` checkpoints and, with ``--keep-best``, the one of
    the highest test accuracy among those saved (``rows``: the run's metrics rows so far)."""
    best = (checkpoint.best_round(rows, checkpoint.rounds_saved(exp.run_dir))
            if exp.cfg.keep_best else None)
    checkpoint.prune(exp.run_dir, exp.cfg.keep_checkpoints, best)


def resume_hint(exp: Experiment, flags: str = "") -> str:
    """The command that continues a stopped run, or what to do when nothing can be resumed
    (once the checkpoint being written is on disk)."""
    exp.writer.wait(quiet=True)
    return checkpoint.resume_hint(exp.run_dir, exp.cfg.checkpoint_every, flags)


def _count_losses(exp: Experiment, fed: Federation, res: RoundResult, events: dict) -> None:
    """Count a pass's dead actors and restarts; raise FedServerLost when the round lost its only
    server (and its clients cannot go on without it) or the fed server."""
    events["failures"] += len(res.dead_clients) + len(res.dead_servers) + int(res.fed_restarted)
    events["restarts"] += res.restarted
    single_server_lost = (bool(res.dead_servers) and len(fed.servers) == 1
                          and not exp.spec.client.survives_server_loss)
    if single_server_lost or res.fed_restarted:
        raise FedServerLost("server" if single_server_lost else "fed server", counted=True)


def without_sim_stragglers(exp: Experiment, fed: Federation, rnd: int, plans: dict, server_of: dict,
                           flight: RoundInFlight, aggregated: list[int], sim_delay: dict[int, float],
                           events: dict) -> tuple[RoundInFlight, list[int]]:
    """Make clients the simulated deadline drops contribute nothing.

    Whether a client is in time on the simulated clock is known only from what it did (its
    FLOPs, bytes and messages, through the planner's ``client_sim_time``), and by then the
    servers have trained on its smashed data. So when the deadline drops a client that ran, the
    round is replayed from its start state with exactly the clients it includes -- the same
    plans, stream positions and cuts, untimed, without delays or kills -- and the replay is
    what gets aggregated. A client in time alone may take longer in the replay (a FedPairing
    client whose partner was dropped trains alone); the replay is repeated until everyone in it
    is in time. Rows of the dropped clients keep what they did in the pass they ran in.

    Deterministic for a fixed seed: the replay depends only on the plans and the start state.
    Costs a second pass of the round when the deadline drops someone.
    """
    cfg = exp.cfg
    if cfg.sim_deadline_s is None:
        return flight, aggregated
    res = flight.result
    stats = dict(res.stats)
    failed, late = set(res.failed), set(res.late)
    carried = flight.late_updates()  # real-time stragglers' updates of the first pass (aggregator's late_updates)
    while aggregated and _sim_dropped(res, aggregated):
        assert fed.snapshot_round == rnd - 1, "a simulated-clock replay needs the round's start state"
        events["restarts"] += fed.restore()
        kept = exp.planner.restrict(rnd, _without_delays(plans, aggregated), aggregated)
        flight = fed.run_round(rnd, kept, server_of, timed=False)
        res = flight.result
        classify(exp, fed, kept, server_of, res)
        _count_losses(exp, fed, res, events)
        stats.update(res.stats)
        failed |= res.failed
        late |= res.late
        aggregated = included(exp, res, sim_delay)
    res.stats, res.failed, res.late = dict(sorted(stats.items())), failed, late
    flight.carried = carried
    return flight, aggregated


def _sim_dropped(res: RoundResult, aggregated: list[int]) -> bool:
    """Whether a client that ran (and did not fail or miss the real deadline) was dropped."""
    keep = set(aggregated)
    return any(c not in keep and c not in res.failed and c not in res.late for c in res.stats)


def _without_delays(plans: dict, clients: list[int]) -> dict:
    """The round's plans for ``clients``, for a replay: no real delay, no deadline."""
    return {c: dataclasses.replace(plans[c], delay_s=0.0, deadline=None) for c in clients}


def aggregate_round(exp: Experiment, fed: Federation, flight: RoundInFlight, aggregated: list[int], evaluate: bool,
                    defer: bool = False, then=None):
    """Aggregate and evaluate the round (``defer``: the evaluation waits for the next round;
    ``then``: what is submitted behind the aggregation, :meth:`Federation.aggregate`). A round that includes nobody (everyone dropped, failed
    or sat out) leaves the model as it was: the servers and the fed server go back to the
    round's start state (when it is kept: with retries or deadlines; the default) and nothing
    is aggregated; it is still evaluated, at once."""
    void = not aggregated and not fed.carrying and fed.snapshot_round == flight.rnd - 1
    return fed.aggregate(flight, aggregated, evaluate, void=void, defer=defer and not void, then=then)


def _warn_thin(exp: Experiment, rnd: int, res: RoundResult, include: set[int], selected: int, events: dict) -> None:
    """One line for a round that included fewer than --min-included of its selected clients."""
    died = events["failures"]
    why = [f"{n} {what}" for n, what in (
        (events["dropped"], "dropped as stragglers"),
        (len({c for c in res.failed if c not in include}),
         f"failed ({died} actor{'s' * (died != 1)} died)" if died else "failed"),
        (events["skipped"], "sat out (server unavailable)")) if n]
    print(f"raysfl: warning: round {rnd}: {len(include)} of {selected} selected clients included"
          f"{' (' + ', '.join(why) + ')' if why else ''}; below --min-included {exp.cfg.min_included:g}",
          file=sys.stderr, flush=True)


def included(exp: Experiment, res: RoundResult, sim_delay: dict[int, float]) -> list[int]:
    """Clients whose update is aggregated: completed, in time on the real and simulated clocks."""
    cfg = exp.cfg
    server_speed = cfg.devices.server_tflops * 1e12
    out = []
    for c, st in sorted(res.stats.items()):
        if c in res.failed or c in res.late:
            continue
        if cfg.sim_deadline_s is not None:
            t = exp.planner.client_sim_time(c, st, exp.ctx.profiles[c], server_speed) + sim_delay.get(c, 0.0)
            if t > cfg.sim_deadline_s:
                continue
        out.append(c)
    return out


def round_metrics(exp: Experiment, rnd: int, res: RoundResult, result, wall: float, sim_delay=None,
                  included=None, events=None, delays=None, selected=None, cuts=None) -> tuple[dict, list[dict]]:
    """The metrics.parquet row and clients.parquet rows of one round (:mod:`raysfl.runtime.rows`).

    ``result``: the evaluation (accuracy, loss, extras) or None; ``sim_delay``: simulated
    straggler delay per client (added to its simulated time); ``delays``: the injected delay
    per client on either clock (the ``delay_s`` column; default: ``sim_delay``); ``included``:
    clients whose update was aggregated (default: all); ``events``: fault counts
    (EVENT_COLUMNS); ``selected``: clients the algorithm selected (``below_min_included``:
    fewer than ``--min-included`` of them included); ``cuts``: the round's planned cut per client.
    A failed client that reported nothing (its actor died) still gets its row: ``failed``, not
    included, nothing done. The server roles' recorded figures come from ``res.server_metrics``.
    """
    cfg, planner, spec, ctx, counters, stats = exp.cfg, exp.planner, exp.spec, exp.ctx, exp.counters, res.stats
    server_speed = cfg.devices.server_tflops * 1e12
    sim_delay = sim_delay or {}
    delays = sim_delay if delays is None else delays
    included = set(stats) if included is None else included
    client_rows, times, compute = [], [], []
    planned, planned_clients = planner.take_records(), planner.take_client_records()  # what it recorded planning
    for c in sorted(stats):
        t = planner.client_sim_time(c, stats[c], ctx.profiles[c], server_speed) + sim_delay.get(c, 0.0)
        times.append(t)
        compute.append(compute_time(stats[c], ctx.profiles[c], server_speed))
        client_rows.append({**client_row(rnd, stats[c], t, delays.get(c, 0.0), c in included),
                            **planned_clients.get(c, {})})
        if c in res.failed:  # its actor died; what the server reported for it does not make it done
            client_rows[-1]["failed"] = True
    for c in sorted(res.failed - set(stats)):  # lost with its actor: a row that says so
        lost = ClientRoundStats(client=c, cut=(cuts or {}).get(c, -1), failed=True)
        client_rows.append({**client_row(rnd, lost, float("nan"), delays.get(c, 0.0), False),
                            **planned_clients.get(c, {})})
    client_rows.sort(key=lambda r: r["client"])
    sim = planner.round_sim_time(times)
    if cfg.sim_deadline_s is not None:  # the round ends at the deadline at the latest
        sim = min(sim, cfg.sim_deadline_s)
    counters["sim_total"] += sim
    sim_compute = planner.round_sim_time(compute)  # the compute-only clock every algorithm shares
    counters["sim_compute_total"] = counters.get("sim_compute_total", 0.0) + sim_compute
    counters["wall_total"] += wall
    loss_n = sum(s.loss_count for s in stats.values())
    nan = float("nan")
    completed = len(included & set(stats))
    row = round_row(
        rnd, cfg.algo, evaluation=result,
        train_loss=sum(s.loss_sum for s in stats.values()) / loss_n if loss_n else nan, participants=len(stats),
        traffic={k: sum(r[k] for r in client_rows) for k in TRAFFIC_COLUMNS},
        client_flops=sum(r["client_flops"] for r in client_rows), server_flops=sum(r["server_flops"] for r in client_rows),
        sim=sim, sim_total=counters["sim_total"], sim_compute=sim_compute,
        sim_compute_total=counters["sim_compute_total"], wall=wall, wall_total=counters["wall_total"], completed=completed,
        fallback_steps=sum(s.fallback_steps for s in stats.values()), events=events or {},
        below_min_included=bool(selected) and completed < cfg.min_included * selected)
    extras = result[2] if result is not None else {}
    # what every role recorded this round: round means (the clients' over all their values)
    by_client: dict[str, list[float]] = {}
    for st in stats.values():
        for k, values in st.metrics.items():
            by_client.setdefault(k, []).extend(values)
    recorded = {**planned, **{k: sum(v) / len(v) for k, v in by_client.items() if v}, **res.server_metrics,
                **res.aggregator_metrics, **extras}
    row.update({k: float(recorded.get(k, nan)) for k in spec.columns(cfg)})
    row.update(evaluation_columns(cfg, ctx, extras))
    return row, client_rows


def with_evaluation(exp: Experiment, row: dict, result) -> None:
    """Fill a row :func:`round_metrics` made without its evaluation (``result`` None then) with
    it, as :func:`round_metrics` would have: test accuracy and loss, the algorithm's columns its
    evaluation records (over what the round recorded otherwise), the evaluation's own columns."""
    acc, loss, extras = result
    row["test_accuracy"], row["test_loss"] = float(acc), float(loss)
    row.update({k: float(extras[k]) for k in exp.spec.columns(exp.cfg) if k in extras})
    row.update(evaluation_columns(exp.cfg, exp.ctx, extras))


def evaluation_columns(cfg, ctx, extras: dict) -> dict[str, float]:
    """The evaluation's columns every algorithm has where the run asks for them, in every row
    (NaN where the round was not evaluated): on the clients' local test splits
    (``--local-test-fraction``) ``test_loss_local`` and, where the task has an accuracy,
    ``test_accuracy_local``, and where it has class labels ``chance_local`` (what a constant
    prediction per client scores there: the floor the verdicts' guards read it against); the metrics of your own (:mod:`raysfl.user_metrics`). A metric of
    yours that failed on the fed server is raised here, in its one line."""
    from raysfl.errors import ConfigError
    from raysfl.objective import objective_of
    from raysfl.user_metrics import METRIC_ERROR

    if METRIC_ERROR in extras:
        raise ConfigError(extras[METRIC_ERROR])
    nan = float("nan")
    names = []
    if cfg.local_test_fraction:  # every algorithm, on the clients' local test splits
        objective = objective_of(ctx)
        names += (["test_accuracy_local"] if objective.has_accuracy else []) + ["test_loss_local"]
        names += ["chance_local"] if objective.targets == "classes" else []
    mine = getattr(ctx, "metrics", None)
    if mine is not None:
        names += mine.columns() + (mine.columns("_local") if cfg.local_test_fraction else [])
    return {k: float(extras.get(k, nan)) for k in names}
