"""raysfl's ``fedavg`` against Flower's Ray-based simulation: time per round, same work.

    make bench-flower-env                      # once: Flower in its own venv, .venv-flower
    .venv/bin/python benchmarks/flower_fedavg.py [--clients 10 100] [--rounds 8] [--num-cpus 2]

Both sides train the digits CNN with FedAvg: the same IID partition (seed 0), every client
every round, one local epoch of batch-32 SGD (lr 0.05, momentum 0.9) over the same
sample order (:func:`raysfl.runtime.client_actor.sample_stream`), weighted averaging, no
evaluation between rounds, one torch thread per client task on ``--num-cpus`` cores.

- raysfl: ``--algo fedavg`` (virtual clients on two client actors, as by default).
- Flower: ``flwr[simulation]`` (``flwr.simulation.run_simulation`` with a ``NumPyClient``
  and the ``FedAvg`` strategy), one CPU per client task so ``--num-cpus`` run at once. It
  needs Ray 2.55, so it runs in ``.venv-flower``, never as a project dependency.
  Its time per round is the time between two consecutive ``configure_fit`` calls of the
  strategy.

Time per round is the median of rounds 2..R-1 for both.
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

ROOT = Path(__file__).resolve().parents[1]
FLOWER_PY = ROOT / ".venv-flower" / "bin" / "python"


# ----------------------------------------------------------------- Flower side (.venv-flower)
def flower_round_times(clients: int, rounds: int, num_cpus: int) -> list[float]:
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import torch
    import torch.nn.functional as F
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.simulation import run_simulation

    from raysfl.data import load_dataset, partition
    from raysfl.models import build_model
    from raysfl.runtime.client_actor import sample_stream

    ds = load_dataset("digits")
    parts = partition(ds.y_train, clients, "iid", seed=0)
    init = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    keys = list(init.state_dict())
    stamps: list[float] = []

    class DigitsClient(NumPyClient):
        def __init__(self, cid: int):
            self.cid = cid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
            model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in zip(keys, parameters)})
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            part = parts[self.cid]
            batch = min(32, len(part))
            pos = int(config["round"] - 1) * batch * max(1, -(-len(part) // batch))
            for s in range(max(1, -(-len(part) // batch))):
                idx = sample_stream(part, self.cid, 0, pos + s * batch, batch)
                x, y = ds.to_tensor(ds.x_train[idx]), torch.from_numpy(ds.y_train[idx])
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()
            return [v.detach().numpy() for v in model.state_dict().values()], len(part), {}

    def client_fn(context):
        return DigitsClient(int(context.node_config["partition-id"])).to_client()

    class TimedFedAvg(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            stamps.append(time.perf_counter())
            return super().configure_fit(server_round, parameters, client_manager)

    def server_fn(context):
        strategy = TimedFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=clients,
                               min_available_clients=clients, on_fit_config_fn=lambda r: {"round": r},
                               initial_parameters=ndarrays_to_parameters(
                                   [v.detach().numpy() for v in init.state_dict().values()]))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=rounds))

    # one extra round so the last measured round ends with the next configure_fit
    run_simulation(server_app=ServerApp(server_fn=server_fn), client_app=ClientApp(client_fn=client_fn),
                   num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": num_cpus, "include_dashboard": False,
                                                 "log_to_driver": False}})
    return [b - a for a, b in zip(stamps, stamps[1:])]


# ----------------------------------------------------------------- raysfl side (.venv)
def raysfl_round_times(clients: int, rounds: int) -> list[float]:
    from sweep import run

    rows = run(algo="fedavg", dataset="digits", model="cnn", clients=clients, rounds=rounds, local_epochs=1.0,
               batch_size=32, lr=0.05, momentum=0.9, partition="iid", seed=0, eval_every=10**6)
    return [r["wall_time_s"] for r in rows[:-1]]  # the last round evaluates


def steady(times: list[float]) -> float:
    return statistics.median(times[1:] or times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--num-cpus", type=int, default=os.cpu_count(), help="CPUs of Flower's Ray")
    ap.add_argument("--flower-python", default=str(FLOWER_PY))
    ap.add_argument("--out", default=str(ROOT / "docs/results/flower.md"))
    ap.add_argument("--flower-only", type=int, help=argparse.SUPPRESS)  # internal: in .venv-flower
    args = ap.parse_args()
    if args.flower_only:
        print("TIMES " + json.dumps(flower_round_times(args.flower_only, args.rounds, args.num_cpus)), flush=True)
        return
    if not Path(args.flower_python).exists():
        sys.exit(f"flower_fedavg: no Flower environment at {args.flower_python}; run `make bench-flower-env` "
                 "first (or pass --flower-python)")

    from sweep import write_tables  # (importing sweep puts the checkout on sys.path)

    rows = []
    for n in args.clients:
        ours = steady(raysfl_round_times(n, args.rounds))
        p = subprocess.run([args.flower_python, __file__, "--flower-only", str(n), "--rounds", str(args.rounds),
                            "--num-cpus", str(args.num_cpus)], capture_output=True, text=True)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("TIMES ")), None)
        if line is None:
            sys.exit(f"flower_fedavg: the Flower run failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        flower = steady(json.loads(line[6:]))
        print(f"{n:>4} clients: raysfl fedavg {ours:.3f} s/round, Flower {flower:.3f} s/round "
              f"({flower / ours:.1f}x)", flush=True)
        rows.append({"clients": n, "raysfl_s": ours, "flower_s": flower, "flower_over_raysfl": flower / ours})
    version = subprocess.run([args.flower_python, "-c", "import flwr, ray; print(flwr.__version__, ray.__version__)"],
                             capture_output=True, text=True).stdout.split()
    lines = ["| clients | raysfl fedavg s / round | Flower simulation s / round | Flower / raysfl |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {r['clients']} | {r['raysfl_s']:.3f} | {r['flower_s']:.3f} | {r['flower_over_raysfl']:.1f} |"
              for r in rows]
    intro = (f"{args.rounds} rounds per run. Flower {version[0] if version else '?'} on Ray "
             f"{version[1] if len(version) > 1 else '?'} (its own venv); raysfl on Ray {_ray_version()}. "
             f"{__doc__.split(chr(10) + chr(10), 2)[2].strip()}")
    write_tables(rows, args.out, "raysfl fedavg against Flower's simulation", intro, "\n".join(lines),
                 doc=Path(args.out).resolve().parents[1] / "performance.md")


def _ray_version() -> str:
    import ray

    return ray.__version__


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
