"""Chaos from outside: kill named actors of a running raysfl job, as an operator would.

    python cluster/chaos.py --list                                   # the raysfl actors on the cluster
    python cluster/chaos.py --role client --every 20 --count 3       # kill a random client actor every 20 s
    python cluster/chaos.py --run <run-dir-name> --role server --count 1
    python cluster/chaos.py --role fed --no-restart                  # a permanent death (the run fails cleanly)
    python cluster/chaos.py --role host                              # servers + fed server of a --co-host run

It connects to the cluster in ``--address`` (default: $RAY_ADDRESS, else ``auto``; on a
token-auth cluster set RAY_AUTH_MODE=token), finds the actors named ``raysfl:<run>.<tag>:client-<i>``
/ ``server-<j>`` / ``fed`` / ``host`` in any namespace (``host``: the servers and the fed server
in one process, as ``--co-host`` has them on a one-node cluster), asks each which run it serves now (a
process that runs several experiments reuses its actors, which keep the name of the run
that started them), and ``ray.kill``s them. By default Ray restarts them and the run carries
on (see docs/reliability.md); ``--no-restart`` kills for good.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

ROLES = ("client", "server", "fed", "host", "any")


def serving(name: str, namespace: str | None, timeout: float = 5.0) -> str | None:
    """The run a raysfl actor serves now (None: idle between runs, or it does not answer)."""
    import ray

    try:
        return ray.get(ray.get_actor(name, namespace=namespace).serving.remote(), timeout=timeout)
    except Exception:  # noqa: BLE001 - restarting, busy past the timeout, or gone: not a target now
        return None


def raysfl_actors(run: str | None = None, role: str = "any") -> list[dict]:
    """[{name, namespace, run, role}] of the raysfl actors alive on the connected cluster, with
    the run each serves now (``run`` given: only that run's)."""
    import ray

    out = []
    for a in ray.util.list_named_actors(all_namespaces=True):
        name = a["name"] if isinstance(a, dict) else a
        namespace = a.get("namespace") if isinstance(a, dict) else None
        parts = name.split(":")
        if len(parts) != 3 or parts[0] != "raysfl":
            continue
        kind = parts[2].split("-")[0]
        if role != "any" and kind != role:
            continue
        now = serving(name, namespace)
        if run is None or now == run:
            out.append({"name": name, "namespace": namespace, "run": now, "role": kind})
    return sorted(out, key=lambda a: a["name"])


def kill_one(actors: list[dict], rng: random.Random, restart: bool = True) -> dict | None:
    """Kill one of ``actors`` at random; returns it (None if there is none)."""
    import ray

    if not actors:
        return None
    victim = rng.choice(actors)
    ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=not restart)
    return victim


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=os.environ.get("RAY_ADDRESS", "auto"))
    ap.add_argument("--run", default=None, help="run directory name (default: any raysfl run)")
    ap.add_argument("--role", default="client", choices=ROLES)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between kills")
    ap.add_argument("--count", type=int, default=1, help="kills before stopping")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-restart", action="store_true", help="kill for good (no Ray restart)")
    ap.add_argument("--list", action="store_true", help="list the actors and exit")
    args = ap.parse_args(argv)
    if args.every < 0 or args.count < 1:
        print("chaos: error: --every must be >= 0 and --count >= 1", file=sys.stderr)
        return 2

    import ray

    try:
        ray.init(address=args.address, log_to_driver=False, configure_logging=False)
    except Exception as e:  # noqa: BLE001 - no cluster there
        print(f"chaos: error: cannot connect to Ray at '{args.address}': {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    if args.list:
        for a in raysfl_actors(args.run, "any"):
            print(f"{a['name']}  (namespace {a['namespace']})")
        return 0
    rng = random.Random(args.seed)
    for k in range(args.count):
        if k:
            time.sleep(args.every)
        victim = kill_one(raysfl_actors(args.run, args.role), rng, restart=not args.no_restart)
        if victim is None:
            shared = (" (its servers and fed server share one process: --role host, or run it with --co-host off)"
                      if args.role in ("server", "fed") and raysfl_actors(args.run, "host") else "")
            print(f"chaos: no raysfl {args.role} actor{' of run ' + args.run if args.run else ''} is alive{shared}",
                  file=sys.stderr)
            return 1
        print(f"chaos: killed {victim['name']}{' for good' if args.no_restart else ''}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
