"""GAPSL (Lin et al.) on Ray: parallel split learning whose server learns only from the
clients' gradients that agree (LGI picks a leader from the most consistent ones, GDA keeps
those within an adaptive angle of it).

    python examples/gapsl.py                                        # embedded digits, 2 CPU cores, a few minutes
    python examples/gapsl.py --dataset mnist5k                      # 5,000 real MNIST images, offline
    python examples/gapsl.py --lgi none                             # ablation: Non-LGI (also random; --gda none|random)
    python examples/gapsl.py --dataset cifar10 --data-root data --download              # paper: VGG-16
    python examples/gapsl.py --dataset cifar10 --data-root data --model vit             # paper: ViT (AdamW)
    ray job submit --working-dir . -- python examples/gapsl.py      # the same on a Ray cluster

What runs (Sec. IV-4 unless you override it): 10 clients with Dirichlet(0.1) label mixes,
each keeping its own client-side model (no client aggregation, as in PSL); one server-side
model on the main server actor. Every server step holds one batch of every client (Sec.
III-A). The server computes each client's gradient of the server-side model in one batched
call, scores how consistently each points with the others (eq. 1), averages the most
consistent K^t % into a leader gradient (eqs. 2-4), keeps the clients within an adaptive
angle of the leader (eqs. 5-6) and steps on the sum of their gradients (eq. 8, with eq. 7's
term detached as footnote 6 says). Only those clients get a gradient back at the cut.

Splits: the paper keeps VGG-16's first four conv layers (1.8 % of its parameters) and
ViT-Base's first three transformer blocks on the clients. The presets do the same for VGG-16
and the ViT (cut 4), and cut the CNN after its first conv layer (cut 1, ~1 % of its
parameters), GAPSL's default.

Every `raysfl run` flag works too (`--k-min`, `--k-max`, `--gda-eta`, `--gda-lambda`,
`--gda-regularizer`, `--gda-reduction`, `--cut-gradients`, `--round-steps`,
`--no-time-scaling`, `--rounds`, ...). The summary prints accuracy and the mean pairwise
angle between the clients' server-side gradients (the paper's Fig. 3b).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # example_cli, also when imported by path
from example_cli import exit_with, model_preset_argv, run_example, traffic_line  # noqa: E402

# Sec. IV-4: VGG-16 with its first four conv layers on the clients, batch 128, SGD momentum 0.9,
# lr 0.005 / 0.01, lambda 5e-4; ViT-Base with its first three blocks on the clients, batch 64,
# AdamW lr 1e-4 / 3e-4, lambda 3e-5 (no weight decay: the paper gives none). digits and
# mnist5k: the CNN cut after its first conv layer (GAPSL's default cut).
PRESETS = {
    ("digits", "cnn"): {"cut": 1, "rounds": 40, "batch_size": 32},
    ("mnist5k", "cnn"): {"cut": 1, "rounds": 20, "batch_size": 32},
    ("cifar10", "vgg16"): {"cut": 4, "rounds": 200, "batch_size": 128},
    ("cifar100", "vgg16"): {"cut": 4, "rounds": 300, "batch_size": 128},
    ("cifar10", "vit"): {"cut": 4, "rounds": 200, "batch_size": 64, "optimizer": "adamw", "lr": 1e-4,
                         "server_lr": 3e-4, "gda_lambda": 3e-5},
    ("cifar100", "vit"): {"cut": 4, "rounds": 300, "batch_size": 64, "optimizer": "adamw", "lr": 1e-4,
                          "server_lr": 3e-4, "gda_lambda": 3e-5},
}
DEFAULT_MODEL = {"digits": "cnn", "cifar10": "vgg16", "cifar100": "vgg16"}


def build_argv(argv: list[str]) -> list[str]:
    """raysfl run flags for GAPSL with the data set's and model's presets where the user set nothing."""
    return model_preset_argv("gapsl", argv, PRESETS, DEFAULT_MODEL)


def summary(rows: list[dict]) -> str:
    lines = ["GAPSL summary", f"{'round':>6} {'accuracy':>9} {'avg. client':>12} {'own classes':>12} "
                              f"{'grad angle':>11} {'K^t':>6} {'kept by GDA':>12}"]
    step = max(1, len(rows) // 10)
    for r in rows:
        if r["round"] % step == 0 or r is rows[-1]:
            lines.append(f"{r['round']:>6} {r['test_accuracy']:>9.4f} {r['test_accuracy_avg_client']:>12.4f} "
                         f"{r['own_class_share']:>11.0%} {r['grad_angle_deg']:>10.1f}° {r['lgi_k']:>6.2f} "
                         f"{r['gda_kept']:>11.0%}")
    lines.append(traffic_line(rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return run_example("gapsl", build_argv(sys.argv[1:] if argv is None else argv),
                       lambda cfg, result: summary(result.metrics))


if __name__ == "__main__":
    exit_with(main())
