"""Removing a whole node mid-run (``--faults kill:node:...``; ours, issue 47).

A node is lost the way a spot instance, an evicted pod or a rebooted machine loses it: its
raylet dies, and with it every process on the node -- the workers that hold raysfl's actors,
the node's object store and the agents. :func:`kill_node` does that on any cluster, a real
one or ``ray.cluster_utils.Cluster``'s nodes on one host: a zero-CPU task pinned to the node
(``NodeAffinitySchedulingStrategy``, hard) sends SIGKILL to its parent, the raylet that
started it, and the driver waits until the GCS reports the node dead. What happens next is
the runtime's ordinary failure path: Ray reschedules the node's placement-group bundles on the
nodes left and restarts the actors in them (``max_restarts``); the round in flight loses the
clients of a dead client actor (``clients.parquet``: ``failed``) or is redone from the
snapshot when a server or the fed server went with the node (docs/reliability.md).

Only worker nodes can be removed: the head holds the GCS, and the driver's node the run itself.
"""

from __future__ import annotations

import time

HEAD_RESOURCE = "node:__internal_head__"


def worker_nodes(placement: list[dict]) -> list[str]:
    """The nodes ``kill:node`` may remove, in the order the run's actors name them
    (``placement.json``: client actors first): those that hold an actor of the run and are
    neither the head nor the driver's node. ``index=I`` picks the I-th."""
    import ray

    spared = {n["NodeID"] for n in ray.nodes() if n.get("Alive") and HEAD_RESOURCE in n.get("Resources", {})}
    spared.add(ray.get_runtime_context().get_node_id())
    out: list[str] = []
    for p in placement:
        node = p.get("node_id")
        if node and node not in spared and node not in out:
            out.append(node)
    return out


def _raylet_killer():
    import ray

    @ray.remote(num_cpus=0, max_retries=0)
    def kill_parent_raylet(delay_s: float) -> int:
        import os
        import signal
        import threading

        parent = os.getppid()
        try:
            with open(f"/proc/{parent}/cmdline", "rb") as f:
                name = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            name = ""
        if not name.endswith("raylet"):
            raise RuntimeError(f"this worker's parent (pid {parent}, {name or 'unknown'}) is not a raylet")
        threading.Timer(delay_s, os.kill, (parent, signal.SIGKILL)).start()  # after this reply is sent
        return parent

    return kill_parent_raylet


def kill_node(node_id: str, timeout_s: float = 120.0) -> int:
    """SIGKILL the raylet of ``node_id`` (every process on the node goes with it) and wait until
    the cluster marks the node dead. Returns the raylet's pid on that node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from raysfl.errors import RunFailed

    task = _raylet_killer().options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    try:
        pid = ray.get(task.remote(0.5), timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - any failure to reach the node is one line
        from raysfl.errors import first_line

        raise RunFailed(f"kill:node could not reach node {node_id[:12]}: {first_line(e, 200)}") from None
    give_up = time.time() + timeout_s
    while time.time() < give_up:
        if not any(n["NodeID"] == node_id and n.get("Alive") for n in ray.nodes()):
            return pid
        time.sleep(0.5)
    raise RunFailed(f"kill:node: node {node_id[:12]} still alive {timeout_s:.0f} s after its raylet "
                    f"(pid {pid}) was killed")
