"""How smashed data and gradients should travel between actors: time and bytes per step.

    .venv/bin/python benchmarks/transport.py [--sizes-kb 160 1024 4096 16384] [--steps 60]

One step is what raysfl's round does per local step: a client actor sends a smashed
batch to a server actor, which answers with a gradient of the same shape, and the client
uses it before sending the next one. The driver submits every step ahead and only hands
ObjectRefs around (as raysfl's driver does), so the time per step is the latency of the
client -> server -> client chain. Each variant runs in its own fresh Ray (some need
environment variables set before ``import ray``), two CPUs, one thread per actor:

- ``numpy, refs in a list`` — contiguous NumPy buffers (:func:`raysfl.transport.pack`),
  refs passed inside a list and fetched by the actor (so a dead sender costs only its own
  clients), with Ray's default of inlining results up to 100 KB;
- ``... inlined up to 1 MiB (raysfl)`` — the same with ``RAY_max_direct_call_object_size``
  at 1 MiB, raysfl's default (``--inline-object-kb``): results that small are held by
  their owner instead of the shared-memory object store;
- ``numpy, read-only on arrival`` — the same without the copy ``unpack`` makes of the
  read-only buffer it receives;
- ``numpy, top-level refs`` — the same buffers, refs passed as arguments (Ray resolves
  them before the call; a dead sender fails the call);
- ``torch tensor`` — torch CPU tensors through the object store (Ray copies them);
- ``torch, zero-copy`` — ``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1`` in the driver and actors;
- ``float16`` / ``bfloat16 on the wire`` — ``--transfer-dtype``: half the bytes, rounded;
- ``RDT gloo`` — Ray Direct Transport (``tensor_transport="gloo"`` over a collective group).

``max error`` is the largest absolute difference between what was sent and what arrived
(0 for exact transports).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import sweep  # noqa: F401  (puts the checkout on sys.path)
from sweep import ROOT, write_tables

VARIANTS = {
    "numpy-list": "numpy, refs in a list",
    "numpy-inline": "numpy, refs in a list, inlined up to 1 MiB (raysfl)",
    "numpy-nocopy": "numpy, read-only on arrival (no copy)",
    "numpy-args": "numpy, top-level refs",
    "torch": "torch tensor",
    "torch-zerocopy": "torch, zero-copy",
    "float16": "float16 on the wire",
    "bfloat16": "bfloat16 on the wire",
    "rdt-gloo": "RDT gloo",
}


def _actors(variant: str):
    import ray
    import torch

    from raysfl.transport import pack, unpack

    wire = {"float16": "float16", "bfloat16": "bfloat16"}.get(variant, "float32")
    as_numpy = variant.startswith("numpy") or variant in ("float16", "bfloat16")

    def encode(t):
        return pack(t, wire) if as_numpy else t.contiguous()

    def decode(p):
        if variant == "numpy-nocopy":
            return torch.from_numpy(p.data)
        return unpack(p) if as_numpy else p

    method = ray.method(tensor_transport="gloo") if variant == "rdt-gloo" else (lambda f: f)

    @ray.remote(num_cpus=1)
    class Client:
        def __init__(self, numel: int):
            torch.set_num_threads(1)
            self.x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
            self.err = 0.0

        def _use(self, g):
            g = decode(g)
            self.err = max(self.err, float((g - self.x * 2).abs().max()))

        @method
        def send(self, prev=None):
            if prev is not None:
                self._use(prev[0] if isinstance(prev, list) else prev)
            return encode(self.x)

        def send_list(self, prev: list):
            if prev:
                self._use(ray.get(prev[0]))
            return encode(self.x)

        def error(self, last=None):
            if last is not None:
                self._use(last)
            return self.err

    @ray.remote(num_cpus=1)
    class Server:
        def __init__(self):
            torch.set_num_threads(1)

        @method
        def step(self, payload):
            return encode(decode(payload) * 2)

        def step_list(self, refs: list):
            return encode(decode(ray.get(refs[0])) * 2)

    return Client, Server


def measure_variant(variant: str, sizes_kb: list[int], steps: int) -> list[dict]:
    """Run in a fresh process: one Ray, one client and one server actor per size."""
    import ray

    env = {"PYTHONPATH": str(ROOT)}
    if variant == "torch-zerocopy":
        env["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] = "1"
    if variant == "numpy-inline":
        env["RAY_max_direct_call_object_size"] = str(2**20)
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             runtime_env={"env_vars": env})
    rows = []
    for kb in sizes_kb:
        numel = kb * 1024 // 4
        Client, Server = _actors(variant)
        client, server = Client.remote(numel), Server.remote()
        if variant == "rdt-gloo":
            from ray.experimental.collective import create_collective_group

            create_collective_group([client, server], backend="torch_gloo")
        ray.get(client.error.remote())

        def chain(n: int, client=client, server=server) -> float:
            t0 = time.perf_counter()
            grad = None
            for _ in range(n):
                if variant == "numpy-list":
                    smashed = client.send_list.remote([grad] if grad is not None else [])
                    grad = server.step_list.remote([smashed])
                else:
                    smashed = client.send.remote(grad)
                    grad = server.step.remote(smashed)
            ray.get(client.error.remote(grad))
            return (time.perf_counter() - t0) / n

        chain(5)  # warm-up
        per_step = statistics.median(chain(steps) for _ in range(3))
        wire_bytes = numel * (2 if variant in ("float16", "bfloat16") else 4)
        rows.append({"variant": VARIANTS[variant], "payload_kb": kb, "ms_per_step": 1000 * per_step,
                     "wire_bytes_per_step": 2 * wire_bytes, "max_error": ray.get(client.error.remote())})
        for a in (client, server):
            ray.kill(a)
    ray.shutdown()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-kb", type=int, nargs="+", default=[160, 1024, 4096, 16384])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--out", default=str(ROOT / "docs/results/transport.md"))
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one variant, print JSON rows
    args = ap.parse_args()
    if args.one:
        print("ROWS " + json.dumps(measure_variant(args.one, args.sizes_kb, args.steps)))
        return
    rows = []
    for v in args.variants:
        env = dict(os.environ)
        if v == "torch-zerocopy":
            env["RAY_ENABLE_ZERO_COPY_TORCH_TENSORS"] = "1"
        if v == "numpy-inline":
            env["RAY_max_direct_call_object_size"] = str(2**20)
        cmd = [sys.executable, __file__, "--one", v, "--steps", str(args.steps), "--sizes-kb",
               *map(str, args.sizes_kb)]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("ROWS ")), None)
        if line is None:
            err = (p.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{VARIANTS[v]}: failed ({err})", flush=True)
            rows += [{"variant": VARIANTS[v], "payload_kb": kb, "ms_per_step": float("nan"),
                      "wire_bytes_per_step": 0, "max_error": float("nan"), "error": err} for kb in args.sizes_kb]
            continue
        got = json.loads(line[5:])
        for r in got:
            print(f"{r['variant']:<32} {r['payload_kb']:>6} KB: {r['ms_per_step']:7.2f} ms/step", flush=True)
        rows += got
    base = {r["payload_kb"]: r["ms_per_step"] for r in rows if r["variant"] == VARIANTS["numpy-list"]}
    lines = ["| transport | payload (KB) | ms per step (median) | vs numpy, refs in a list | bytes on the wire per step "
             "| max error |", "|---|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: (r["payload_kb"], list(VARIANTS.values()).index(r["variant"]))):
        ratio = r["ms_per_step"] / base[r["payload_kb"]] if base.get(r["payload_kb"]) else float("nan")
        ms = "failed: " + r["error"][:60] if r.get("error") else f"{r['ms_per_step']:.2f}"
        lines.append(f"| {r['variant']} | {r['payload_kb']} | {ms} | {ratio:.2f} | {r['wire_bytes_per_step']:,} | "
                     f"{r['max_error']:.2g} |")
    for r in rows:
        r.setdefault("error", "")
    intro = f"{args.steps} steps per measurement, median of 3. {__doc__.split(chr(10) + chr(10), 2)[2].strip()}"
    write_tables(rows, args.out, "Transport: time and bytes per client-server step", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


if __name__ == "__main__":
    main()
