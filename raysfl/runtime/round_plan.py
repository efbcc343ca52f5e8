"""A round planned on the federation (:func:`plan_for`): the actors Ray restarted found first,
then the planner's selection, cuts and pairing for the clients that can join, then the faults
the round injects and the servers it loses -- what :func:`raysfl.runtime.rounds.run_round`
runs, in its own turn or submitted behind the round before's aggregation
(:mod:`raysfl.runtime.run_ahead`). ``exp`` is the run being driven
(:class:`raysfl.runtime.rounds.Experiment`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass

from raysfl.faults import plan_faults, unavailable_clients
from raysfl.runtime.federation import Federation
from raysfl.runtime.planning import plan_round
from raysfl.runtime.rows import EVENT_COLUMNS


@dataclass
class RoundPlan:
    """Round ``rnd`` planned (:func:`plan_for`): its clients' plans and servers, the faults it
    injects, and what planning it counted (``events``: EVENT_COLUMNS)."""

    rnd: int
    events: dict
    plans: dict
    server_of: dict
    selected: int        # clients the algorithm selected
    sim_delay: dict      # client -> injected delay on the simulated clock
    real_delay: dict     # client -> ... on the real clock
    evaluate: bool
    kills: list


def say_away(rnd: int, fed: Federation, was: set[int], num_clients: int) -> None:
    """One line when client actors go away (Ray cannot place them again: a node lost, no room
    left) and one when they are back, not one per round in between."""
    def clients_of(actors):
        return ", ".join(str(c) for c in range(num_clients) if fed.actor_of(c) in actors)

    gone, back = fed.away - was, was - fed.away
    if gone:
        print(f"raysfl: warning: round {rnd}: client actor(s) {', '.join(map(str, sorted(gone)))} not placed again "
              f"(no node with room for them); their clients {clients_of(gone)} sit rounds out until Ray places them",
              file=sys.stderr, flush=True)
    if back:
        print(f"raysfl: note: round {rnd}: client actor(s) {', '.join(map(str, sorted(back)))} placed again; their "
              f"clients {clients_of(back)} train again", file=sys.stderr, flush=True)


def plan_for(exp: "Experiment", fed: Federation, rnd: int, stream_pos: Mapping[int, int]) -> RoundPlan:
    """Plan round ``rnd`` from each client's position in its sample stream: first find actors
    Ray restarted (:meth:`Federation.recover`), then select, cut and pair (the planner), then
    the faults it injects and the servers it loses."""
    cfg, planner, ctx = exp.cfg, exp.planner, exp.ctx
    events = {k: 0 for k in EVENT_COLUMNS}
    was_away = set(fed.away)
    events["restarts"] += fed.recover()["restarts"]
    say_away(rnd, fed, was_away, ctx.num_clients)
    churn = unavailable_clients(exp.faults, rnd, cfg.seed, ctx.num_clients)  # churn: selection skips them
    # client actors Ray has not placed again (a node lost, no room left): their clients sit out
    unavailable = churn | {c for c in range(ctx.num_clients) if fed.actor_of(c) in fed.away}
    events["unavailable_clients"] = len(unavailable)
    plans, server_of = plan_round(cfg, planner, rnd, ctx, stream_pos, unavailable)
    selected = len(plans)
    if not selected and unavailable:
        why = " and ".join(w for w, n in (("unavailable:client faults", churn), ("client actors not placed",
                                                                               fed.away)) if n)
        print(f"raysfl: warning: round {rnd}: no client can join ({len(unavailable)} of {ctx.num_clients} "
              f"unavailable: {why}); the round trains nobody and leaves the model as it was",
              file=sys.stderr, flush=True)
    rf = plan_faults(exp.faults, rnd, cfg.seed, sorted(plans), fed.num_actors, len(fed.servers))
    down_servers = set(rf.down_servers) | set(planner.servers_down(rnd))
    down = [c for c in plans if server_of.get(c) in down_servers]
    if down:  # their server is unavailable this round: the algorithm decides (default: sit out)
        keep = set(planner.on_server_down(rnd, down))
        events["skipped"] += len(down) - len(keep)
        plans = {c: p for c, p in plans.items() if c not in down or c in keep}
        for c in keep:
            plans[c].local = True  # trains without its server (the client role's fallback)
    real_delay = {c: secs for c, (secs, clock) in rf.delays.items() if clock == "real" and c in plans}
    for c, secs in real_delay.items():
        plans[c].delay_s = secs
    sim_delay = {c: secs for c, (secs, clock) in rf.delays.items() if clock == "sim"}
    return RoundPlan(rnd, events, plans, server_of, selected, sim_delay, real_delay, exp.evaluates(rnd), rf.kills)


def deadlines(cfg) -> bool:
    """Whether any deadline is set (then the round's start state is kept: a round that includes
    nobody goes back to it, and a simulated-clock replay starts from it)."""
    return bool(cfg.round_deadline_s or cfg.step_deadline_s or cfg.sim_deadline_s is not None)
