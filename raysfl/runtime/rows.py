"""The rows every run writes: one schema for ``metrics.parquet`` (a row per round) and
``clients.parquet`` (a row per client per round), used by the federated rounds and the
centralised run alike, so the two cannot drift apart.

An algorithm adds columns after the base ones: its roles' ``columns`` (planner, server,
client, aggregator: ``Algorithm.columns``), filled with what they ``record``; the planner's
per-client records are columns of ``clients.parquet`` (FedPairing's ``partner``);
``test_accuracy_local`` with ``--local-test-fraction``.
"""

from __future__ import annotations

# fault and fallback counts of a round (rounds.run_round), as the console names them too (metrics.py)
# failures: actors (and servers) that died in the round; failed_clients: the selected clients it
# lost to a failure (a client actor's death takes every client it hosts); unavailable_clients: the
# clients that could not join the round (churn, ``unavailable:client`` faults; selection skipped them)
EVENT_COLUMNS = ("failures", "failed_clients", "restarts", "retries", "dropped", "late_applied", "skipped",
                 "fallbacks", "unavailable_clients")
TRAFFIC_COLUMNS = ("bytes_up", "bytes_down", "bytes_smashed_up", "bytes_grad_down", "bytes_params_up",
                   "bytes_params_down")


def round_row(rnd: int, algo: str, *, evaluation, train_loss: float, participants: int, traffic: dict[str, int],
              client_flops: float, server_flops: float, sim: float, sim_total: float, wall: float,
              wall_total: float, completed: int, fallback_steps: int, events: dict[str, int],
              below_min_included: bool, sim_compute: float, sim_compute_total: float) -> dict:
    """The base columns of a round's row, in order. ``evaluation``: (accuracy, loss, extras) or
    None in a round without evaluation (NaN then)."""
    nan = float("nan")
    acc, test_loss, _ = evaluation if evaluation is not None else (nan, nan, {})
    return {
        "round": rnd, "algo": algo, "test_accuracy": float(acc), "test_loss": float(test_loss),
        "train_loss": train_loss, "participants": participants,
        **{k: traffic.get(k, 0) for k in TRAFFIC_COLUMNS},
        "client_flops": client_flops, "server_flops": server_flops,
        "sim_time_s": sim, "sim_time_total_s": sim_total, "sim_compute_s": sim_compute,
        "sim_compute_total_s": sim_compute_total, "wall_time_s": wall, "wall_time_total_s": wall_total,
        "completed": completed, "fallback_steps": fallback_steps,
        **{k: int(events.get(k, 0)) for k in EVENT_COLUMNS},
        "below_min_included": int(bool(below_min_included)),
    }


def client_row(rnd: int, st, sim_time: float, delay_s: float, included: bool) -> dict:
    """One client's row of a round (``st``: its :class:`raysfl.transport.ClientRoundStats`)."""
    tr = st.traffic
    return {
        "round": rnd, "client": st.client, "cut": st.cut, "servers": list(st.servers), "samples": st.samples,
        "steps": st.steps,
        "bytes_up": tr.up, "bytes_down": tr.down, "bytes_smashed_up": tr.smashed_up,
        "bytes_grad_down": tr.grad_down, "bytes_params_up": tr.params_up, "bytes_params_down": tr.params_down,
        "client_flops": st.client_flops, "server_flops": st.server_flops, "sim_time_s": sim_time,
        "train_loss": st.loss_sum / st.loss_count if st.loss_count else float("nan"),
        "delay_s": delay_s, "failed": bool(st.failed), "included": included,
        "fallback_steps": st.fallback_steps,
        "agg_weight": float(st.agg_weight) if st.agg_weight == st.agg_weight else None,  # null: none set
    }
