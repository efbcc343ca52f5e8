"""Centralised upper bound: the same model, samples and batch size in one process, no Ray.

Each round trains on as many samples as a federated round would (the selected clients'
local steps), drawn from one seeded stream over the pooled training set.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from raysfl import checkpoint
from raysfl.evaluation import evaluate_predictions
from raysfl.objective import objective_of
from raysfl.optim import build_optimizer
from raysfl.runtime.client_actor import sample_stream
from raysfl.runtime.placement import configure_torch
from raysfl.runtime.planning import plan_round
from raysfl.runtime import interrupts
from raysfl.runtime.rounds import prune_checkpoints
from raysfl.runtime.rows import round_row
from raysfl.transport import state_to_wire, wire_to_state


# Stream id of the pooled data set (clients use their own ids 0..K-1).
POOLED_STREAM = 2**31 - 1


def centralized_device(cfg) -> torch.device:
    """Where the centralised bound trains: on the GPU when this process has one and the run asks
    for GPUs for any role (``--server-gpus``, ``--client-gpus``, ``--fed-gpus``), so that it bounds
    the distributed runs of the same settings on the same hardware; else on the CPU."""
    r = cfg.resources
    wants_gpu = max(r.client_gpus or 0.0, r.server_gpus or 0.0, r.fed_gpus or 0.0) > 0
    return torch.device("cuda") if wants_gpu and torch.cuda.is_available() else torch.device("cpu")


def test_pass(model, ds, device, ctx) -> tuple[float, float, dict[str, float]]:
    """(test accuracy, test loss, the metrics of your own: ``test_<name>``) of ``model``."""
    mine = getattr(ctx, "metrics", None)
    outputs = [] if mine is not None else None
    acc, loss, _ = evaluate_predictions(model, ds.x_test, ds.y_test, ds.to_tensor, device=device,
                                        loss=objective_of(ctx), outputs=outputs)
    if not outputs:
        return acc, loss, {}
    values = mine.compute(torch.cat(outputs), torch.from_numpy(np.array(ds.y_test)))
    return acc, loss, mine.combine([(len(ds.y_test), values)])


def run_centralized(exp, state: dict | None) -> None:
    """Train ``exp``'s model on the pooled data round by round (resuming from ``state``)."""
    cfg, planner, ds, ctx, logger = exp.cfg, exp.planner, exp.ds, exp.ctx, exp.logger
    loss_fn = exp.spec.client(cfg, ctx).loss  # the client role's loss (the run's: raysfl.objective)
    configure_torch(cfg, cfg.resources.num_cpus or torch.get_num_threads())
    device = centralized_device(cfg)
    model = copy.deepcopy(exp.model).to(device)  # the run's initial model (a zoo model from the seed, or yours)
    model.train()
    opt = build_optimizer(model.parameters(), cfg, cfg.lr)
    pooled = np.sort(np.concatenate(exp.parts))
    flops_per_sample = 3.0 * float(sum(ctx.block_flops))
    counters = exp.counters
    counters.setdefault("pos", 0)  # position in the pooled stream
    start = 0
    if state:
        model.load_state_dict(wire_to_state(state["model"], device))
        opt.load_state_dict(state["opt"])  # its tensors follow the parameters' device
        start = state["round"]
    for rnd in range(start + 1, cfg.rounds + 1):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(rnd)
        plans, _ = plan_round(cfg, planner, rnd, ctx, {})
        samples = sum(p.samples for p in plans.values())
        # the round's loss summed where it is computed, in float64 (as Python floats would be):
        # one host sync a round, not one a step
        loss_sum, seen = torch.zeros((), dtype=torch.float64, device=device), 0
        while seen < samples:
            b = min(cfg.batch_size, samples - seen)
            idx = sample_stream(pooled, POOLED_STREAM, cfg.seed, counters["pos"], b)
            counters["pos"] += b
            x = ds.to_tensor(ds.x_train[idx]).to(device)
            y = torch.from_numpy(ds.y_train[idx]).to(device)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach().double() * b
            seen += b
        loss_sum = float(loss_sum)
        evaluate_now = exp.evaluates(rnd)
        acc, test_loss, mine = test_pass(model, ds, device, ctx) if evaluate_now else (float("nan"), float("nan"), {})
        wall = time.perf_counter() - t0
        sim = samples * flops_per_sample / (cfg.devices.server_tflops * 1e12)
        counters["sim_total"] += sim
        counters["wall_total"] += wall
        row = round_row(rnd, cfg.algo, evaluation=(acc, test_loss, {}), train_loss=loss_sum / max(1, seen), participants=0,
                        traffic={}, client_flops=0.0, server_flops=samples * flops_per_sample, sim=sim,
                        sim_total=counters["sim_total"], wall=wall, wall_total=counters["wall_total"], completed=0,
                        fallback_steps=0, events={}, below_min_included=False, sim_compute=sim,
                        sim_compute_total=counters["sim_total"])
        if getattr(ctx, "metrics", None) is not None:  # metrics of your own: in every row, NaN when not evaluated
            row.update({k: mine.get(k, float("nan")) for k in ctx.metrics.columns()})
        with interrupts.held():  # a signal now waits until the round is logged and checkpointed
            logger.log_round(row, [])
            stop = exp.callbacks is not None and exp.callbacks.round(row)  # a callback may end the run here
            if exp.due(rnd, cfg.checkpoint_every) or (stop and cfg.checkpoint_every):
                logger.flush()
                checkpoint.save(exp.run_dir, rnd, cfg_dict=cfg.to_dict(), state={"round": rnd, "counters": counters,
                                               "model": state_to_wire(model.state_dict()), "opt": opt.state_dict()})
                prune_checkpoints(exp, logger.rows)
        if stop:
            exp.stopped = True
            break
