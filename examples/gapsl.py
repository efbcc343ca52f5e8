"""GAPSL (Lin et al.) on Ray: parallel split learning whose server steps on the clients'
gradients that agree (LGI) and pulls them towards their leader (GDA).

    python examples/gapsl.py                                        # embedded digits, 2 CPU cores, ~1 minute
    python examples/gapsl.py --lgi none                             # ablation: Non-LGI (also random; --gda none|random)
    python examples/gapsl.py --dataset cifar10 --data-root data --download              # paper: VGG-16
    python examples/gapsl.py --dataset cifar10 --data-root data --model vit             # paper: ViT (AdamW)
    ray job submit --working-dir . -- python examples/gapsl.py      # the same on a Ray cluster

What runs (Sec. IV-4 unless you override it): 10 clients with Dirichlet(0.1) label mixes,
each keeping its own client-side model (no client aggregation, as in PSL); one server-side
model on the main server actor. Every step the server computes each client's gradient of
the server-side model in one batched call, scores how consistently each points with the
others (eq. 1), averages the most consistent K^t % into a leader gradient (eqs. 2-4), and
steps on the sum of the gradients within an adaptive angle of the leader, each nudged
towards it (eqs. 5-8). Every client gets the gradient of its own loss back.

Every `raysfl run` flag works too (`--k-min`, `--k-max`, `--gda-eta`, `--gda-lambda`,
`--gda-reduction`, `--no-time-scaling`, `--rounds`, ...). The summary prints accuracy and the
mean pairwise angle between the clients' server-side gradients (the paper's Fig. 3b).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # example_cli, also when imported by path
from example_cli import model_preset_argv, run_example, traffic_line  # noqa: E402

# Sec. IV-4: VGG-16 with its first four conv layers on the clients, batch 128, SGD momentum 0.9,
# lr 0.005 / 0.01, lambda 5e-4; ViT-Base with its first three blocks on the clients, batch 64,
# AdamW lr 1e-4 / 3e-4, lambda 3e-5. digits: the 4-block CNN cut after its two conv blocks.
PRESETS = {
    ("digits", "cnn"): {"cut": 2, "rounds": 40, "batch_size": 32},
    ("cifar10", "vgg16"): {"cut": 4, "rounds": 200, "batch_size": 128},
    ("cifar100", "vgg16"): {"cut": 4, "rounds": 300, "batch_size": 128},
    ("cifar10", "vit"): {"cut": 4, "rounds": 200, "batch_size": 64, "optimizer": "adamw", "lr": 1e-4,
                         "server_lr": 3e-4, "gda_lambda": 3e-5, "weight_decay": 0.05},
    ("cifar100", "vit"): {"cut": 4, "rounds": 300, "batch_size": 64, "optimizer": "adamw", "lr": 1e-4,
                          "server_lr": 3e-4, "gda_lambda": 3e-5, "weight_decay": 0.05},
}
DEFAULT_MODEL = {"digits": "cnn", "cifar10": "vgg16", "cifar100": "vgg16"}


def build_argv(argv: list[str]) -> list[str]:
    """raysfl run flags for GAPSL with the data set's and model's presets where the user set nothing."""
    return model_preset_argv("gapsl", argv, PRESETS, DEFAULT_MODEL)


def summary(rows: list[dict]) -> str:
    lines = ["GAPSL summary", f"{'round':>6} {'accuracy':>9} {'grad angle':>11} {'K^t':>6} {'kept by GDA':>12}"]
    step = max(1, len(rows) // 10)
    for r in rows:
        if r["round"] % step == 0 or r is rows[-1]:
            lines.append(f"{r['round']:>6} {r['test_accuracy']:>9.4f} {r['grad_angle_deg']:>10.1f}° "
                         f"{r['lgi_k']:>6.2f} {r['gda_kept']:>11.0%}")
    lines.append(traffic_line(rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_example("gapsl", build_argv(sys.argv[1:] if argv is None else argv),
                       lambda cfg, result: summary(result.metrics))


if __name__ == "__main__":
    sys.exit(main())
