"""FedPairing on Ray: clients split the model with a partner client instead of a server.

    python examples/fed_pairing.py                                  # embedded digits, ResNet-18, 2 CPU cores
    python examples/fed_pairing.py --model cnn                      # the 4-block CNN instead (faster)
    python examples/fed_pairing.py --pairing location               # Table I baselines: random, location, computation
    python examples/fed_pairing.py --no-double-overlap              # without eq. 7's doubled step
    python examples/fed_pairing.py --pair-weights paper             # the literal a_i weights (step / N)
    python examples/fed_pairing.py --dataset cifar10 --data-root data --download   # paper: CIFAR-10 + ResNet-18
    ray job submit --working-dir . -- python examples/fed_pairing.py

What runs (Sec. IV-A unless you override it): ResNet-18, 20 clients in a 50 m disk around the server,
CPU frequencies U[0.1, 2] GHz, 64 MHz links, SGD with lr 0.1 and no momentum, 2 local
epochs; the server pairs them greedily (fast with slow, over fast links, eq. 5 and Alg. 1);
in each pair the slower client runs the first floor(W f / (f_i + f_j)) blocks and its
partner the rest (L_i + L_j = W), on the partner's own copy of the model, both directions
at once; the partner returns the logits and the owner, who keeps its labels, returns
d(loss)/d(logits); losses are weighted K a_i so that a round is FedAvg's (``--pair-weights``);
layers both flows reached take a doubled step (eq. 7); the server averages the models every
round. Every `raysfl run` flag works too (`--pair-alpha`,
`--pair-beta`, `--radius-m`, `--bandwidth-mhz`, ...). The summary prints the pairs, each
client's share of the model, accuracy and the simulated round time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # example_cli, also when imported by path
from example_cli import exit_with, preset_argv, run_example  # noqa: E402

# Sec. IV-A: ResNet-18 on CIFAR-10, 20 clients, 2 local epochs, SGD lr 0.1, 100 rounds; the model,
# clients and optimiser are FedPairing's defaults. digits: 20 rounds (a few minutes on 2 cores).
PRESETS = {"digits": {"rounds": 20}, "cifar10": {"rounds": 100}}


def build_argv(argv: list[str]) -> list[str]:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--dataset", default="digits")
    known, _ = pre.parse_known_args(argv)
    return preset_argv("fed_pairing", argv, {"dataset": known.dataset, **PRESETS.get(known.dataset, {})})


def summary(rows: list[dict], run_dir: Path) -> str:
    import pyarrow.parquet as pq

    clients = {c["client"]: c for c in json.loads((run_dir / "clients.json").read_text())}
    first = [r for r in pq.read_table(run_dir / "clients.parquet").to_pylist() if r["round"] == rows[0]["round"]]
    lines = ["FedPairing summary", "client  CPU (GHz)  blocks run  simulated time in round 1"]
    for r in sorted(first, key=lambda r: r["client"]):
        lines.append(f"{r['client']:>6} {clients[r['client']]['cpu_ghz']:>10.2f} {r['cut']:>11} {r['sim_time_s']:>14.3f} s")
    step = max(1, len(rows) // 10)
    lines.append(f"{'round':>6} {'accuracy':>9} {'round time':>11}")
    for r in rows:
        if r["round"] % step == 0 or r is rows[-1]:
            lines.append(f"{r['round']:>6} {r['test_accuracy']:>9.4f} {r['sim_time_s']:>10.3f}s")
    lines.append(f"mean simulated round time {sum(r['sim_time_s'] for r in rows) / len(rows):.3f} s; "
                 f"wall time {rows[-1]['wall_time_total_s']:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_example("fed_pairing", build_argv(sys.argv[1:] if argv is None else argv),
                       lambda cfg, result: summary(result.metrics, result.run_dir))


if __name__ == "__main__":
    exit_with(main())
