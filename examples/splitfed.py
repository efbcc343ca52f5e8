"""SplitFed V1 on the embedded digits data set, through the Python API.

    python examples/splitfed.py                 # local Ray, 10 clients, 20 rounds
    RAY_ADDRESS=auto python examples/splitfed.py  # on a running Ray cluster

Ten clients each hold an IID share of scikit-learn's handwritten digits. Every client runs
the first two blocks of a small CNN and sends the activations (smashed data) to the
server actor, which runs the rest and sends the gradients back; both halves are averaged
every round. Metrics land in runs/<run>/ (metrics.parquet, clients.parquet, tb/).
"""

import raysfl

cfg = raysfl.Config(
    algo="splitfed_v1",   # see `raysfl list` for the others
    dataset="digits",     # embedded: no download
    model="cnn",          # 2 conv + 2 fc blocks
    cut=2,                # blocks [0, 2) on the clients
    clients=10,
    partition="iid",
    rounds=20,
    local_epochs=1,
    batch_size=32,
    lr=0.05,
    seed=0,
)
result = raysfl.run(cfg)

print(f"final test accuracy {result.final['test_accuracy']:.3f} after {result.final['round']} rounds")
print(f"TensorBoard:  tensorboard --logdir {result.run_dir / 'tb'}")
print(f"metrics:      {result.run_dir / 'metrics.parquet'}")
