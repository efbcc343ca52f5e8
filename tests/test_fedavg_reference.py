"""raysfl's FedAvg is McMahan et al.'s (2017, Algorithm 1) as a plain PyTorch loop writes it:
every client starts from the global model, makes one pass over its own data in shuffled batches
(the last one short), and the server averages the clients' models weighted by their data sizes
n_k / n. The loop below shares nothing with raysfl's runtime but the partition, the initial
weights and the shuffle order (the same seeds), and must give the same model round for round
on a size-skewed Dirichlet partition, where weighting by processed samples would not."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import raysfl
from raysfl.evaluation import evaluate
from raysfl.resolve import validate, validate_run
from raysfl.runtime.experiment import prepare

SETTINGS = dict(algo="fedavg", dataset="digits", clients=5, rounds=3, partition="dirichlet", alpha=0.3, seed=3,
                lr=0.05, momentum=0.9, batch_size=32, progress=False, checkpoint_every=1, keep_checkpoints=0)


def reference_fedavg(cfg, rounds: int) -> tuple[list[dict], list[float]]:
    """The plain loop: each round's global state and test accuracy."""
    prep = prepare(*validate_run(cfg))
    ds, parts, model = prep.ds, prep.parts, copy.deepcopy(prep.model)
    sizes = np.array([len(p) for p in parts], dtype=np.float64)
    states, accs = [], []
    for rnd in range(1, rounds + 1):
        locals_ = []
        for k, idx in enumerate(parts):
            local = copy.deepcopy(model)
            local.train()
            opt = torch.optim.SGD(local.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
            # one pass in the order raysfl's stream shuffles client k's data in epoch rnd - 1
            order = idx[np.random.default_rng([cfg.seed, k, rnd - 1, 0x57EA]).permutation(len(idx))]
            for i in range(0, len(order), cfg.batch_size):
                b = order[i:i + cfg.batch_size]
                x = ds.to_tensor(ds.x_train[b])
                y = torch.from_numpy(ds.y_train[b])
                loss = F.cross_entropy(local(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            locals_.append(local.state_dict())
        w = sizes / sizes.sum()
        avg = {key: sum(float(w[k]) * locals_[k][key].double() for k in range(len(parts))).to(v.dtype)
               for key, v in locals_[0].items()}
        model.load_state_dict(avg)
        states.append({k: v.clone() for k, v in avg.items()})
        accs.append(evaluate(model, ds.x_test, ds.y_test, ds.to_tensor)[0])
    return states, accs


@pytest.mark.usefixtures("ray_session")
def test_fedavg_equals_a_plain_reference_loop_round_for_round(tmp_path):
    cfg = validate(raysfl.config_from_kwargs(**SETTINGS, out=str(tmp_path)))
    sizes = [len(p) for p in prepare(*validate_run(cfg)).parts]
    assert max(sizes) > 2 * min(sizes) and any(s % 32 for s in sizes)  # size-skewed, short last batches
    states, accs = reference_fedavg(cfg, cfg.rounds)
    result = raysfl.run(raysfl.config_from_kwargs(**SETTINGS, out=str(tmp_path)))
    got = [r["test_accuracy"] for r in result.metrics]
    n_test = len(prepare(*validate_run(cfg)).ds.y_test)
    for rnd, (a, b) in enumerate(zip(got, accs), start=1):
        assert abs(a - b) <= 1.0 / n_test + 1e-9, (rnd, a, b)  # within one test sample (float reorderings)
    for rnd in range(1, cfg.rounds + 1):
        mine = result.model(round=rnd).state_dict()
        for key, ref in states[rnd - 1].items():
            torch.testing.assert_close(mine[_split_key(mine, key)].double(), ref.double(), atol=1e-4, rtol=1e-4,
                                       msg=lambda m, r=rnd, k=key: f"round {r}, {k}: {m}")


def _split_key(state: dict, key: str) -> str:
    assert key in state, f"{key} not in raysfl's model ({sorted(state)[:4]}...)"
    return key


@pytest.mark.usefixtures("ray_session")
def test_processed_samples_weighting_is_kept_as_an_option_and_differs(tmp_path):
    """The earlier rule (weights = samples trained this round, full batches of a wrapping
    stream) stays available by name and is not what FedAvg's reference does."""
    cfg = validate(raysfl.config_from_kwargs(**SETTINGS, out=str(tmp_path)))
    states, _ = reference_fedavg(cfg, 1)
    old = raysfl.run(raysfl.config_from_kwargs(**{**SETTINGS, "rounds": 1}, out=str(tmp_path),
                                               epoch="stream", aggregation_weights="processed"))
    mine = old.model(round=1).state_dict()
    diff = max(float((mine[k].double() - v.double()).abs().max()) for k, v in states[0].items())
    assert diff > 1e-3
