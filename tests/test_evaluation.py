"""Evaluation at a fixed cost: the test set dealt among per-client models (``--eval-passes``),
and the channels-last layout of CPU evaluation passes."""

import numpy as np
import pytest
import torch


def test_shares_deal_every_row_to_passes_models_in_equal_stratified_shares():
    from raysfl.evaluation import test_shares

    y = np.repeat(np.arange(10), [30, 40, 25, 36, 50, 31, 33, 44, 29, 42])
    shares = test_shares(y, clients=37, passes=5, seed=(0, 3))
    assert len(shares) == 37
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 5 * len(y)
    for s in shares:
        assert len(np.unique(s)) == len(s)  # a model sees a row at most once
    assert np.array_equal(np.bincount(np.concatenate(shares), minlength=len(y)), np.full(len(y), 5))
    # stratified: each share holds every class in proportion, to one row
    share_of = np.bincount(y) / len(y)
    for s in shares:
        assert np.all(np.abs(np.bincount(y[s], minlength=10) - share_of * len(s)) <= 1.0 + 1e-9)
    again = test_shares(y, clients=37, passes=5, seed=(0, 3))
    other = test_shares(y, clients=37, passes=5, seed=(0, 4))
    assert all(np.array_equal(a, b) for a, b in zip(shares, again))
    assert not all(np.array_equal(a, b) for a, b in zip(shares, other))
    assert test_shares(y, clients=5, passes=5, seed=0) is None  # enough passes: the whole set each
    assert test_shares(y, clients=50, passes=0, seed=0) is None  # 0: always the whole set


def test_means_over_shares_estimate_the_means_over_the_whole_set():
    """40 different linear models on digits: their mean accuracy, label-mix accuracy and own-class
    share over shares worth 5 passes are near the same means on the whole test set (which the
    same evaluator gives with --eval-passes 0) for every dealing, and without bias: averaged
    over 20 dealings (seeds), within a point."""
    from raysfl.data import load_dataset
    from raysfl.runtime.fed_actor import ClientViews, Evaluator

    ds = load_dataset("digits")
    rng = np.random.default_rng(0)
    n = 40
    hist = rng.integers(0, 30, size=(n, 10)) * (rng.random((n, 10)) < 0.4)
    x = ds.to_tensor(ds.x_train).reshape(len(ds.x_train), -1)  # what the models see
    models = []
    for c in range(n):  # least squares on a random eighth of the training set, so each differs
        idx = rng.choice(len(x), size=len(x) // 8, replace=False)
        w = torch.linalg.lstsq(x[idx], torch.nn.functional.one_hot(torch.from_numpy(ds.y_train[idx]), 10).float()).solution
        m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(x.shape[1], 10, bias=False))
        m[1].weight.data = w.T.contiguous()
        models.append(m)

    def means(passes, seed):
        ev = Evaluator(None, ds, "cpu", ClientViews([], hist), passes=passes, seed=(0, seed))
        rows = ev.shares(range(n))
        seen = [ev.for_client(models[c], c, rows[c]) for c in range(n)]
        return ev.test_share, {k: float(np.mean([s[k] for s in seen])) for k in seen[0]}

    whole_share, whole = means(0, 1)
    assert whole_share == 1.0 and 0.5 < whole["accuracy"] < 0.95  # models that differ, neither perfect nor chance
    dealt = [means(5, seed) for seed in range(20)]
    assert {share for share, _ in dealt} == {5 / n}
    for k in ("accuracy", "label_mix", "own_class_share", "loss"):
        estimates = [d[k] for _, d in dealt]
        assert np.mean(estimates) == pytest.approx(whole[k], abs=0.01), k
        assert max(abs(e - whole[k]) for e in estimates) < 0.06, k


def test_channels_last_evaluation_gives_the_same_answers_and_leaves_the_model_as_it_was():
    from raysfl.data import load_dataset
    from raysfl.evaluation import evaluate_predictions, fast_layout
    from raysfl.models import build_model

    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        plain = model.eval()(ds.to_tensor(ds.x_test))
    acc, loss, pred = evaluate_predictions(model, ds.x_test, ds.y_test, ds.to_tensor)
    assert np.array_equal(pred, plain.argmax(1).numpy())
    want = torch.nn.functional.cross_entropy(plain, torch.from_numpy(ds.y_test)).item()
    assert loss == pytest.approx(want, rel=1e-5)
    for k, v in model.state_dict().items():
        assert v.is_contiguous() and torch.equal(v, before[k]), k  # values and layout as they were
    with fast_layout(model, ds.x_test, "cpu") as laid_out:
        assert laid_out and model.blocks[0][0].weight.is_contiguous(memory_format=torch.channels_last)
    with fast_layout(model, ds.x_test.reshape(len(ds.x_test), -1), "cpu") as laid_out:
        assert not laid_out  # not images: nothing to lay out
    assert model.blocks[0][0].weight.is_contiguous()


def test_channels_last_evaluation_pools_channels_last_to_the_same_bits():
    """A convolution of one input channel (digits) gives its output in the default layout, so
    fast_layout lays each max-pool's input out channels-last (about ten times faster there):
    the logits are the same to the bit, and the hooks go with the context."""
    from raysfl.data import load_dataset
    from raysfl.evaluation import fast_layout
    from raysfl.models import build_model

    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0).eval()
    x = ds.to_tensor(ds.x_test[:50]).contiguous(memory_format=torch.channels_last)
    pools = [m for m in model.modules() if isinstance(m, torch.nn.MaxPool2d)]
    seen = []
    watch = [m.register_forward_hook(lambda m, a, out: seen.append(out.is_contiguous(memory_format=torch.channels_last)))
             for m in pools]
    with torch.no_grad():
        with fast_layout(model, ds.x_test, "cpu"):
            laid_out = model(x)
        assert seen == [True, True]  # both pools ran on channels-last inputs (the first's conv gave the default)
        seen.clear()
        for p in model.parameters():  # the weights laid out as fast_layout does, without its pools' hooks
            p.data = p.data.contiguous(memory_format=torch.channels_last) if p.dim() == 4 else p.data
        unhooked = model(x)
    assert seen == [False, True]  # the hooks are gone: the first pool's input came in the default layout
    for h in watch:
        h.remove()
    assert torch.equal(laid_out, unhooked)


def test_per_client_passes_held_give_what_passes_one_by_one_give_and_leave_the_model_as_it_was():
    """evaluate_own_models sets the evaluator's module's mode and layout once for all the
    clients' passes (issue 44): every client's scores equal those of a pass of its own composite
    model, and the module ends in the mode and layout it had."""
    from raysfl.algorithms.roles.aggregator import block_of, evaluate_own_models
    from raysfl.data import load_dataset
    from raysfl.evaluation import evaluate_predictions
    from raysfl.models import build_model
    from raysfl.runtime.fed_actor import ClientViews, Evaluator
    from raysfl.transport import state_to_wire

    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    state = {k: v.copy() for k, v in state_to_wire(model.state_dict()).items()}
    rng = np.random.default_rng(0)
    own = {c: {k: v + rng.normal(0, 0.05, v.shape).astype(v.dtype) for k, v in state.items() if block_of(k) < 2}
           for c in range(6)}

    class Agg:
        global_state, last_clients = state, list(own)

    Agg.own = own
    ev = Evaluator(model, ds, "cpu", ClientViews([], np.ones((6, 10))), passes=3, seed=(0, 1))
    model.train()
    acc, loss, _ = evaluate_own_models(Agg, ev)
    assert model.training and all(p.is_contiguous() for p in model.parameters())
    rows = ev.shares(list(own))
    alone = []
    for c in own:
        m = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
        m.load_state_dict({k: torch.from_numpy(np.array({**state, **own[c]}[k])) for k in state})
        alone.append(evaluate_predictions(m, ds.x_test[rows[c]], ds.y_test[rows[c]], ds.to_tensor)[:2])
    assert acc == float(np.mean([a for a, _ in alone])) and loss == float(np.mean([l for _, l in alone]))
    assert len({a for a, _ in alone}) > 1  # the clients' models differ

def test_eval_passes_changes_what_is_measured_not_what_is_trained(quick):
    """4 psl clients, scored on half the test set each (--eval-passes 2) or on all of it (0):
    the same training (losses equal), the share recorded, the accuracies near each other."""
    import raysfl

    whole = raysfl.run(quick(algo="psl", eval_passes=0, rounds=3))
    half = raysfl.run(quick(algo="psl", eval_passes=2, rounds=3))
    assert [r["train_loss"] for r in half.metrics] == [r["train_loss"] for r in whole.metrics]
    assert all(r["eval_test_share"] == 1.0 for r in whole.metrics)
    assert all(r["eval_test_share"] == 0.5 for r in half.metrics)
    assert half.final["test_accuracy"] == pytest.approx(whole.final["test_accuracy"], abs=0.1)


def test_bad_eval_passes_is_refused_in_one_line():
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"eval-passes must be >= 0 \(0 = every per-client model on the whole "
                                          r"test set\), got -1"):
        validate(raysfl.config_from_kwargs(algo="psl", eval_passes=-1))


def threads(outputs, targets):  # a metric of yours, module-level: it reaches the fed server by value
    return torch.get_num_threads()


def test_the_fed_server_evaluates_on_eval_cpus_threads_with_the_same_scores(quick):
    """``resources.eval_cpus``: the fed server's evaluation runs on that many torch threads (a
    metric of yours runs inside it and sees them); the scores do not change with them."""
    import raysfl

    runs = {n: raysfl.run(quick(algo="psl", rounds=2, resources={"client_actors": 2, "eval_cpus": n}),
                          metrics={"threads": threads}) for n in (1, 2)}
    for n, res in runs.items():
        assert [r["test_threads"] for r in res.metrics] == [n, n]
    one, two = runs[1].metrics, runs[2].metrics
    assert [r["train_loss"] for r in one] == [r["train_loss"] for r in two]
    assert [r["test_accuracy"] for r in one] == [r["test_accuracy"] for r in two]
    assert [r["test_loss"] for r in one] == pytest.approx([r["test_loss"] for r in two], rel=1e-6)


@pytest.mark.parametrize("nodes, counted, cores, want", [
    (1, 3.0, 2, 2.0),   # raysfl run on 2 cores: Ray counts 3 CPUs, the actors ask 2.5 -> 2.5 x 2/3, rounded
    (1, 5.0, 2, 1.0),   # reproduce --parallel 2 on 2 cores: two runs' worth of CPUs on 2 cores
    (1, 16.0, 16, 3.0),  # a big machine: the run's 2.5 CPUs, rounded (half up)
    (3, 48.0, 16, 2.0),  # a cluster: the server's 1 and the fed server's 0.5, rounded
])
def test_evaluation_takes_the_cpus_of_the_actors_that_wait(monkeypatch, nodes, counted, cores, want):
    """--eval-overlap off: the evaluation comes after the aggregation, while the others wait."""
    import os

    import ray

    import raysfl
    from raysfl.runtime import placement

    monkeypatch.setattr(placement, "alive_nodes", lambda: nodes)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": counted})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    cfg = raysfl.config_from_kwargs(algo="psl", resources={"eval_overlap": "off"})
    assert placement.resolve_eval_cpus(cfg, 2, 1).resources.eval_cpus == want
    mine = raysfl.config_from_kwargs(algo="psl", resources={"eval_cpus": 3})
    assert placement.resolve_eval_cpus(mine, 2, 1).resources.eval_cpus == 3


@pytest.mark.parametrize("nodes, counted, cores, fed_gpus, overlap, threads", [
    (1, 3.0, 2, 0.0, "on", 1.0),    # raysfl run on 2 cores: the training's 3 threads leave none idle: one thread
    (1, 5.0, 2, 0.0, "on", 1.0),    # reproduce --parallel 2 on 2 cores
    (1, 16.0, 16, 0.0, "on", 13.0),  # a big machine: 13 cores beyond the training's 3 threads
    (1, 16.0, 16, 0.5, "off", 3.0),  # the fed server on a GPU: not measured there; the CPUs that wait
    (3, 48.0, 16, 0.0, "off", 2.0),  # a cluster: not measured there; the CPUs that wait
])
def test_evaluation_overlaps_training_on_one_node_on_the_idle_cores(monkeypatch, nodes, counted, cores, fed_gpus,
                                                                    overlap, threads):
    """--eval-overlap auto: on on one node (no GPU for the fed server), the evaluation on the
    cores the training leaves idle (at least one thread); otherwise off, the evaluation at once
    on the CPUs of the actors that wait. A value given is kept."""
    import os

    import ray

    import raysfl
    from raysfl.runtime import placement

    monkeypatch.setattr(placement, "alive_nodes", lambda: nodes)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": counted})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    cfg = raysfl.config_from_kwargs(algo="psl", resources={"fed_gpus": fed_gpus})
    got = placement.resolve_eval_cpus(placement.resolve_eval_overlap(cfg, 2, 1), 2, 1).resources
    assert (got.eval_overlap, got.eval_cpus) == (overlap, threads)
    off = raysfl.config_from_kwargs(algo="psl", resources={"eval_overlap": "off"})  # as given
    assert placement.resolve_eval_overlap(off, 2, 1).resources.eval_overlap == "off"


def test_bad_eval_cpus_is_refused_in_one_line():
    import raysfl
    from raysfl.errors import ConfigError
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"resources.eval_cpus must be >= 1 \(or unset: the CPUs of the actors "
                                          r"that wait\), got 0.5"):
        validate(raysfl.config_from_kwargs(algo="psl", resources={"eval_cpus": 0.5}))
