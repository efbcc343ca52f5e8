"""Ray Compiled Graphs against plain actor calls for a split step's hops (issue 44, item 2:
"try Ray Compiled Graphs for the step loop; keep them only where they pay").

One split step is three dependent hops: a client actor forwards (its smashed batch out), the
server steps (gradients out), the client applies them. raysfl submits them as actor calls whose
ObjectRefs feed the next call (``roles/exchange.py``). A compiled graph (``ray.dag``,
``experimental_compile``) wires the same three methods once and then moves each step's data
over pre-allocated shared-memory channels. Here both run the same three methods with no
compute (the hop cost alone) and with payloads the size of a 10-client digits step's smashed
data, on two actors of this machine, and report the median milliseconds of a step.

    .venv/bin/python benchmarks/compiled_graph.py [--steps 300]

Writes docs/results/compiled_graph.md (+ .csv, .parquet).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import ROOT, write_tables  # noqa: E402


def timed(payload: str, way: str, fn, steps: int) -> dict:
    for _ in range(20):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    row = {"payload": payload, "way": way, "ms_per_step": round(1e3 * statistics.median(times), 3), "steps": steps}
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--steps", type=int, default=300)
    ns = ap.parse_args()

    import os

    import ray

    from raysfl.runtime.placement import INLINE_ENV

    os.environ[INLINE_ENV] = str(1 << 20)  # as raysfl's local Ray: results up to 1 MiB inline
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)

    @ray.remote(num_cpus=0)
    class Client:
        def forward(self, x):
            return x  # the smashed batch leaves

        def apply(self, g):
            return 0

    @ray.remote(num_cpus=0)
    class Server:
        def step(self, acts):
            return acts  # the gradients go back, as large as the activations

    rows = []
    for label, nbytes in (("8 bytes", 8), ("80 KB (10 clients x 14 samples, cut 2)", 80 * 1024),
                          ("1 MB", 1 << 20)):
        x = np.ones(nbytes // 4, dtype=np.float32)
        client, server = Client.remote(), Server.remote()  # fresh actors: a compiled graph keeps its own
        ray.get([client.apply.remote(x), server.step.remote(x)])

        def calls():
            return ray.get(client.apply.remote(server.step.remote(client.forward.remote(x))))

        rows.append(timed(label, "actor calls (raysfl)", calls, ns.steps))
        from ray.dag import InputNode

        with InputNode() as inp:
            dag = client.apply.bind(server.step.bind(client.forward.bind(inp)))
        compiled = dag.experimental_compile()
        rows.append(timed(label, "compiled graph", lambda: ray.get(compiled.execute(x)), ns.steps))
        compiled.teardown(kill_actors=True)
    ray.shutdown()
    base = {r["payload"]: r["ms_per_step"] for r in rows if r["way"].startswith("actor")}
    lines = ["| payload | way | ms per step (3 hops, median) | vs actor calls |", "|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['payload']} | {r['way']} | {r['ms_per_step']:.2f} | {r['ms_per_step'] / base[r['payload']]:.2f} |")
    write_tables(rows, ROOT / "docs" / "results" / "compiled_graph.md", "Compiled graph against actor calls",
                 " ".join(__doc__.split("\n\n")[0].split()), "\n".join(lines))


if __name__ == "__main__":
    main()
