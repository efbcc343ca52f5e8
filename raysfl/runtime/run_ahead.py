"""The next round submitted behind this round's aggregation (``--run-ahead``, ours, on by
default): where nothing can go wrong between two rounds that would change the next one
(:func:`runs_ahead`), round r+1 is planned and submitted once round r's aggregation is asked for
and before its answer is waited for (:func:`submit_ahead`), so that its first calls wait on no
answer of the driver's; a round that fails after all abandons it (:func:`undo_ahead`), a
callback that stops the run undoes it (:func:`drop_ahead`). docs/architecture.md, step 7.
``exp`` is the run being driven (:class:`raysfl.runtime.rounds.Experiment`).
"""

from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass

from raysfl.algorithms.roles import Planner
from raysfl.runtime.federation import Federation, RoundInFlight, Submitted
from raysfl.runtime.round_plan import RoundPlan, deadlines, plan_for


@dataclass
class Ahead:
    """Round ``plan.rnd``, submitted behind the round before's aggregation (``--run-ahead``)."""

    plan: RoundPlan
    submitted: Submitted
    records: tuple       # what the planner recorded planning it: (round means, per-client figures)


def runs_ahead(exp: "Experiment", fed: Federation, rnd: int, snapshot: bool, aggregated: list[int]) -> bool:
    """Whether round ``rnd + 1`` is submitted behind round ``rnd``'s aggregation (``--run-ahead``,
    ours): where nothing can go wrong between the two rounds that would change round ``rnd + 1``
    -- no faults injected, no deadlines (no straggler, no replay, no late update carried), the
    round ended clean (no actor died or restarted), it included someone and its state is kept
    to go back to (a snapshot: with retries, the default), a callback has not stopped the run,
    and the planner's figures of round ``rnd`` do not read what planning ``rnd + 1`` changes
    (``Planner.plans_ahead``; FedPairing's pairs do). Anything that fails after all (the fed
    server lost in the aggregation, the snapshot not confirmed) abandons the next round's calls
    (:meth:`Federation.abandon`) and retries the round as before."""
    cfg = exp.cfg
    return (cfg.resources.run_ahead == "on" and exp.planner.plans_ahead and snapshot and rnd < cfg.rounds
            and not exp.stopped and not exp.faults and not deadlines(cfg) and fed.ended_clean and bool(aggregated)
            and not fed.carrying)


def submit_ahead(exp: "Experiment", fed: Federation, rnd: int, flight: RoundInFlight, plans: dict, defer: bool,
                 aggregation) -> None:
    """Round ``rnd + 1``'s calls, submitted right behind round ``rnd``'s aggregation
    (``aggregation``: its ref, not yet answered) and the snapshot of its end, so that the
    next round's first calls wait on no answer of the driver's (``--run-ahead``). The fed
    server runs its calls in order, so round ``rnd + 1``'s dispatch sees the aggregated model;
    a server's calls wait for the aggregation where it may hand the servers their merged state
    (``Aggregator.hands_servers_state``; :meth:`Federation.submit_round`'s ``after``). With ``defer`` the round's evaluation goes
    behind the next round's dispatch, as :meth:`Federation.defer_evaluation` would have it. The
    planner's records of round ``rnd`` stay for its row; those of planning ``rnd + 1`` wait
    in the :class:`Ahead` for that round's."""
    planner = exp.planner
    after = aggregation if flight.sync and fed.servers and exp.spec.aggregator.hands_servers_state() else None
    fed.snapshot_at(rnd, after=after)
    if defer:
        fed.defer_evaluation(rnd)
    # this round's clients' positions over the run's (a view: no copy of a population's dict a round)
    stream_pos = ChainMap({c: p.stream_pos + p.samples for c, p in plans.items()}, exp.counters["stream_pos"])
    this_round = planner.take_records(), planner.take_client_records()
    plan = plan_for(exp, fed, rnd + 1, stream_pos)
    submitted = fed.submit_round(rnd + 1, plan.plans, plan.server_of, plan.kills, after=after)
    records = planner.take_records(), planner.take_client_records()  # planning and submitting (sync_servers)
    put_back(planner, this_round)
    exp.ahead = Ahead(plan, submitted, records)


def put_back(planner: Planner, records: tuple) -> None:
    """Round means and per-client figures taken from the planner (``take_records``,
    ``take_client_records``), recorded again: the round means come out the same."""
    means, per_client = records
    for name, value in means.items():
        planner.record(name, value)
    for client, figures in per_client.items():
        for name, value in figures.items():
            planner.record(name, value, client=client)


def undo_ahead(exp: "Experiment", fed: Federation) -> None:
    """The round failed after the next one was submitted behind its aggregation: the next round
    never happened (its calls are waited for, unread: :meth:`Federation.abandon`), and the
    round's snapshot, asked for with it and not confirmed, is dropped for the one before
    (:meth:`Federation.drop_unconfirmed`), which the rollback then loads."""
    if exp.ahead is not None:
        ahead, exp.ahead = exp.ahead, None
        fed.abandon(ahead.submitted)
        fed.drop_unconfirmed()


def drop_ahead(exp: "Experiment", fed: Federation) -> None:
    """A callback stopped the run at the round before the one submitted ahead: that round never
    happened. Its calls are waited for and the servers and the fed server go back to the
    snapshot of the round the run stopped at, as :func:`run_round` does for a stop it sees a
    round late (``--eval-overlap``)."""
    if exp.ahead is not None:
        ahead, exp.ahead = exp.ahead, None
        fed.collect_round(ahead.submitted)
        fed.restore()
