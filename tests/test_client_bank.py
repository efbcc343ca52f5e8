"""The client bank (runtime/client_bank.py): a client actor's clients stepped as one stacked,
vmap-ped program give what stepping them one by one gives, within float rounding; clients the
bank cannot serve step one by one."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysfl.runtime.client_bank import BankGroup, part_is_stackable, role_is_plain, vmap_runs

# float rounding: a vmap-ped convolution sums in another order, and a max-pool may then pick the
# other of two near-equal values
TOL = dict(rtol=1e-4, atol=1e-5)


def _cfg(**kw):
    return SimpleNamespace(**{"optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-3, **kw})


def _own_optimizer(optimizer: str, params, lr: float):
    """What a client stepped alone builds (raysfl.optim.build_optimizer with _cfg's settings)."""
    if optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=1e-3)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-3)


def _prefix():
    from raysfl.data import load_dataset
    from raysfl.models import build_model

    ds = load_dataset("digits")
    return build_model("cnn", ds.input_shape, ds.num_classes, seed=0).part(0, 2), ds.input_shape


def _spread_states(prefix, clients: int) -> list[dict]:
    """``clients`` start states of ``prefix``, client k's parameters moved by 0.05 * k of a
    normal draw (torch's global generator, seeded by the caller)."""
    states = []
    for k in range(clients):
        m = copy.deepcopy(prefix)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.05 * k * torch.randn_like(p))
        states.append({n: p.detach().numpy().copy() for n, p in m.named_parameters()})
    return states


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_bank_steps_each_row_as_its_own_optimiser_would(optimizer):
    """Three clients with different start states, three steps with SGD (momentum, weight decay)
    or AdamW (GAPSL's ViT setting): the bank's rows equal each client's own module and
    optimiser. In step 2 client 1's gradient never comes: its row is left as it was, optimiser
    state included, and in step 3 it takes its second step while the others take their third
    (AdamW's bias correction counts each row's own steps)."""
    prefix, shape = _prefix()
    torch.manual_seed(0)
    states = _spread_states(prefix, 3)
    cfg, lr = _cfg(optimizer=optimizer), 0.05 if optimizer == "sgd" else 0.01
    members = [SimpleNamespace(client=10 + k, part=copy.deepcopy(prefix)) for k in range(3)]
    bank = BankGroup(members, states, cfg, lr, "cpu")
    own = []
    for s in states:
        m = copy.deepcopy(prefix)
        m.load_state_dict({n: torch.from_numpy(v) for n, v in s.items()})
        own.append((m, _own_optimizer(optimizer, m.parameters(), lr)))
    for step, answered in enumerate([[0, 1, 2], [0, 2], [0, 1, 2]]):
        xs = [torch.randn(7, *shape) for _ in range(3)]
        acts = bank.forward([0, 1, 2], xs)
        grads = [torch.randn_like(a) for a in acts]
        before_1 = [p.detach().clone() for p in members[1].part.parameters()]
        for k in answered:
            bank.receive(10 + k, grads[k])
            m, opt = own[k]
            torch.testing.assert_close(acts[k], m(xs[k]), **TOL)
            m(xs[k]).backward(grads[k])
            opt.step()
            opt.zero_grad(set_to_none=True)
        bank.step()
        if 1 not in answered:
            for p, b in zip(members[1].part.parameters(), before_1):
                assert torch.equal(p, b)
        for k in range(3):  # each client's part reads its row of the bank
            for p, q in zip(members[k].part.parameters(), own[k][0].parameters()):
                torch.testing.assert_close(p.detach(), q.detach(), **TOL)
    moved = [(p.detach() - torch.from_numpy(states[0][n])).abs().max().item()
             for n, p in members[0].part.named_parameters()]
    assert max(moved) > 1e-3  # it did step


def test_rows_with_batches_of_two_sizes():
    """Clients whose batches differ in size (the end of an epoch) step in one group."""
    prefix, shape = _prefix()
    states = [{n: p.detach().numpy().copy() for n, p in prefix.named_parameters()} for _ in range(2)]
    members = [SimpleNamespace(client=k, part=copy.deepcopy(prefix)) for k in range(2)]
    bank = BankGroup(members, states, _cfg(), 0.1, "cpu")
    xs = [torch.randn(5, *shape), torch.randn(3, *shape)]
    acts = bank.forward([0, 1], xs)
    ref = copy.deepcopy(prefix)
    for x, a in zip(xs, acts):
        torch.testing.assert_close(a, ref(x), **TOL)
    for k, a in enumerate(acts):
        bank.receive(k, torch.ones_like(a))
    bank.step()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    ref(xs[1]).backward(torch.ones_like(acts[1]))
    opt.step()
    for p, q in zip(members[1].part.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), **TOL)


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize("order", [[0, 1, 2, 3], [0, 2, 1, 3]], ids=["runs", "scattered"])
def test_batch_sizes_stepped_apart_write_their_rows_gradients_and_no_other(optimizer, order):
    """Four clients, two batch sizes a step (each size's rows stepped through parameters of
    their own, whose gradients go into the stacked ones' rows: ``BankGroup.step``): a run of
    rows or scattered rows, and in step 1 client 1's gradient never comes and client 3 takes
    no step (its row covered by no forward). Each row equals its client's own module and
    optimiser after three steps; a row that did not step is left exactly as it was."""
    prefix, shape = _prefix()
    torch.manual_seed(3)
    states = _spread_states(prefix, 4)
    lr = 0.05 if optimizer == "sgd" else 0.01
    members = [SimpleNamespace(client=k, part=copy.deepcopy(prefix)) for k in range(4)]
    bank = BankGroup([members[k] for k in order], [states[k] for k in order], _cfg(optimizer=optimizer), lr, "cpu")
    own = []
    for st in states:
        m = copy.deepcopy(prefix)
        m.load_state_dict({n: torch.from_numpy(v) for n, v in st.items()})
        own.append((m, _own_optimizer(optimizer, m.parameters(), lr)))
    row = {c: r for r, c in enumerate(order)}
    for stepping, answered in (([0, 1, 2], [0, 2]), ([0, 1, 2, 3], [0, 1, 2, 3]), ([0, 1, 2, 3], [0, 1, 2, 3])):
        sizes = {0: 6, 1: 6, 2: 4, 3: 4}
        xs = {c: torch.randn(sizes[c], *shape) for c in stepping}
        rows = sorted(row[c] for c in stepping)
        by_row = {row[c]: c for c in stepping}
        acts = dict(zip(rows, bank.forward(rows, [xs[by_row[r]] for r in rows])))
        before = {c: [p.detach().clone() for p in members[c].part.parameters()] for c in range(4) if c not in answered}
        for c in answered:
            g = torch.randn_like(acts[row[c]])
            bank.receive(c, g)
            m, opt = own[c]
            m(xs[c]).backward(g)
            opt.step()
            opt.zero_grad(set_to_none=True)
        bank.step()
        for c, was in before.items():
            assert all(torch.equal(p, b) for p, b in zip(members[c].part.parameters(), was)), c
        for c in range(4):
            for p, q in zip(members[c].part.parameters(), own[c][0].parameters()):
                torch.testing.assert_close(p.detach(), q.detach(), **TOL)


def _batch_norm_bank(clients: int, seed: int):
    """ResNet-18's client side (BatchNorm) in a bank of ``clients`` rows, each client's running
    statistics shifted apart, and each client's own module and optimiser to compare with:
    (input shape, its prefix, the bank's members, the bank, [(module, optimiser)])."""
    from raysfl.data import load_dataset
    from raysfl.models import build_model

    ds = load_dataset("digits")
    prefix = build_model("resnet18", ds.input_shape, ds.num_classes, seed=0).part(0, 2)
    torch.manual_seed(seed)
    states = []
    for k in range(clients):
        m = copy.deepcopy(prefix)
        with torch.no_grad():
            for b in m.buffers():
                if b.is_floating_point():
                    b.add_(0.1 * (k + 1))
        states.append({n: v.detach().numpy().copy() for n, v in m.state_dict().items()})
    members = [SimpleNamespace(client=k, part=copy.deepcopy(prefix).train()) for k in range(clients)]
    bank = BankGroup(members, states, _cfg(), 0.05, "cpu")
    own = []
    for st in states:
        m = copy.deepcopy(prefix).train()
        m.load_state_dict({n: torch.from_numpy(v) for n, v in st.items()})
        own.append((m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)))
    return ds.input_shape, prefix, members, bank, own


def _rows_match_own(members: list, own: list) -> None:
    """Each member's parameters and buffers (its views of the bank's rows) equal its own module's."""
    for k, (m, _) in enumerate(own):
        mine = dict(members[k].part.state_dict())
        for n, v in m.state_dict().items():
            torch.testing.assert_close(mine[n], v, **TOL)


def _step_against_own(bank: BankGroup, own: list, rows: list[int], xs: list[torch.Tensor]) -> None:
    """One bank step of ``rows`` on ``xs``, and the same step of each row's own module: the
    activations compared, the same random gradient back."""
    acts = bank.forward(rows, xs)
    for r, x, a in zip(rows, xs, acts):
        m, opt = own[r]
        ref = m(x)
        torch.testing.assert_close(a, ref, **TOL)
        g = torch.randn_like(a)
        bank.receive(r, g)
        ref.backward(g)
        opt.step()
        opt.zero_grad(set_to_none=True)
    bank.step()


def test_batch_norm_statistics_have_a_row_per_client():
    """ResNet-18's client side (BatchNorm): each client's running statistics and parameters in
    the bank equal its own module's after two steps, one of them without client 0."""
    shape, prefix, members, bank, own = _batch_norm_bank(2, seed=1)
    assert any(True for _ in prefix.buffers())
    before = [b.clone() for b in prefix.buffers()]
    assert part_is_stackable(prefix) and vmap_runs(prefix, shape, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(prefix.buffers(), before))  # the trial left the part alone
    for rows in ([0, 1], [1]):
        _step_against_own(bank, own, rows, [torch.randn(6, *shape) for _ in rows])
    _rows_match_own(members, own)
    assert int(members[0].part.state_dict()["blocks.0.1.num_batches_tracked"]) == 1
    assert int(members[1].part.state_dict()["blocks.0.1.num_batches_tracked"]) == 2


def test_batch_order_makes_each_steps_batch_sizes_runs_of_rows():
    """A client actor orders a group's members so that at every step the clients of one batch
    size are a run of rows (stepped through views, not copies): whole epochs of 32 with last
    batches of 15 and 16, clients with two and three steps."""
    from raysfl.runtime.client_bank import batch_order

    sizes = {5: [32, 15], 3: [32, 32, 16], 7: [32, 16], 1: [32, 15], 2: [32, 32], 9: [32, 32, 15], 4: [16]}
    order = batch_order(sizes)
    assert sorted(order) == sorted(sizes)
    for step in range(3):
        for size in {s[step] for s in sizes.values() if len(s) > step}:
            rows = [k for k, c in enumerate(order) if len(sizes[c]) > step and sizes[c][step] == size]
            assert rows == list(range(rows[0], rows[0] + len(rows))), (step, size, order)


def test_a_run_of_rows_and_scattered_rows_step_as_their_own_modules():
    """ResNet-18's client side (BatchNorm) in a bank of three: a step of rows 1 and 2 (a run:
    views of the stacked tensors, statistics updated in place) and one of rows 0 and 2 with two
    batch sizes (scattered: copies, statistics written back) leave each client's parameters and
    running statistics as its own module's, and row 0's untouched by the first."""
    shape, _, members, bank, own = _batch_norm_bank(3, seed=2)
    row0 = {n: v.clone() for n, v in members[0].part.state_dict().items()}
    for rows, sizes in (([1, 2], [6, 6]), ([0, 2], [6, 4])):
        _step_against_own(bank, own, rows, [torch.randn(n, *shape) for n in sizes])
        if rows == [1, 2]:
            assert all(torch.equal(v, row0[n]) for n, v in members[0].part.state_dict().items())
    _rows_match_own(members, own)
    assert [int(members[k].part.state_dict()["blocks.0.1.num_batches_tracked"]) for k in range(3)] == [1, 1, 2]


def test_which_clients_a_bank_serves():
    """SplitFed's plain client (and PSL's, which only keeps its model) steps in a bank, BatchNorm
    included; a role with a hook of its own, a part with dropout, and a model vmap cannot run
    do not."""
    from raysfl.algorithms.baselines.fedavg import ProximalClient
    from raysfl.algorithms.baselines.splitfed import KeepsOwnModel
    from raysfl.algorithms.roles import ClientSide

    plain = SimpleNamespace(algo_params=None)
    ctx = SimpleNamespace(num_classes=10, loss="cross_entropy")
    for cls, expected in ((ClientSide, True), (KeepsOwnModel, True), (ProximalClient, False)):
        role = cls.__new__(cls)
        role.cfg, role.ctx, role.params = plain, ctx, None
        assert role_is_plain(role) is expected, cls
    prefix, shape = _prefix()
    assert part_is_stackable(prefix) and vmap_runs(prefix, shape, "cpu")
    assert part_is_stackable(torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4)))
    assert not part_is_stackable(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.1)))

    class Branchy(torch.nn.Module):  # data-dependent control flow: vmap cannot run it
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) if x.sum() > 0 else -self.lin(x)

    assert not vmap_runs(Branchy(), (4,), "cpu")


@pytest.mark.parametrize("algo", ["psl", "splitfed_v2"])
def test_a_run_with_the_bank_matches_one_without(quick, algo):
    """The same run with the bank on and off: every metric equal within float rounding
    (that the bank serves such a run: test_client_actor_banks_its_plain_clients)."""
    import raysfl
    from raysfl.metrics import TIMING_COLUMNS

    rows = {}
    for bank in ("on", "off"):
        res = raysfl.run(quick(algo=algo, clients=6, rounds=2, local_steps=3, model="cnn",
                               resources={"client_actors": 2, "client_bank": bank}))
        rows[bank] = res.metrics
    for a, b in zip(rows["on"], rows["off"]):
        assert set(a) == set(b)
        for k in sorted(set(a) - set(TIMING_COLUMNS)):
            if isinstance(a[k], float) and a[k] == a[k]:
                assert a[k] == pytest.approx(b[k], rel=1e-5, abs=1e-7), (k, a[k], b[k])
            else:
                assert a[k] == b[k] or a[k] != a[k] and b[k] != b[k], (k, a[k], b[k])
        assert a["test_accuracy"] > 0 and a["train_loss"] == a["train_loss"]


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_client_actor_banks_its_plain_clients(ray_session, optimizer):
    """A client actor with --client-bank on puts its psl clients in one group and sends the
    smashed data and updates the actor with it off sends, within float rounding (SGD, and
    AdamW: GAPSL's ViT setting)."""
    import ray

    import raysfl
    from raysfl.algorithms import get_algorithm
    from raysfl.algorithms.roles import FederationContext
    from raysfl.data import load_dataset
    from raysfl.models import build_model
    from raysfl.resolve import validate
    from raysfl.runtime.client_actor import ClientActor
    from raysfl.runtime.planning import ClientPlan
    from raysfl.transport import GradReply, pack, state_to_wire, unpack

    ds = load_dataset("digits")
    model = build_model("cnn", ds.input_shape, ds.num_classes, seed=0)
    ctx = FederationContext(3, model.num_blocks, model.valid_cuts(), np.array([40, 40, 40]), np.zeros((3, 10)), [],
                            model.block_flops(), num_classes=ds.num_classes)
    parts = {c: np.arange(40 * c, 40 * (c + 1)) for c in range(3)}

    def started(**settings):
        cfg = validate(raysfl.config_from_kwargs(algo="psl", clients=3, model="cnn", batch_size=8, **settings))
        actor = ClientActor(0)
        actor.setup("test", cfg, get_algorithm("psl"), ctx, None, ds, parts)
        plans = {c: ClientPlan(cut=2, steps=2, batch=8, stream_pos=0, lr=0.05, blocks=2, round=1) for c in range(3)}
        actor.begin_round(plans, {"global": state_to_wire(model.state_dict()), "own": {}, "charged": []})
        return actor

    out = {}
    for bank in ("on", "off"):
        actor = started(optimizer=optimizer, resources={"client_bank": bank})
        assert (len({id(g) for g in actor.bank_of.values()}) == 1) is (bank == "on")
        sent, grads = [], []
        for s in range(2):
            payload = actor.step(s, [0], {c: 0 for c in range(3)}, grads)
            sent.append({c: unpack(m.activations) for c, m in payload.items()})
            grads = [ray.put({c: GradReply(pack(torch.full_like(unpack(m.activations), 0.01 * (c + 1))))
                              for c, m in payload.items()})]
        updates, stats = actor.end_round(grads)
        out[bank] = (sent, {u.client: u.state for u in updates}, [st.samples for st in stats])
    (sent_on, up_on, n_on), (sent_off, up_off, n_off) = out["on"], out["off"]
    assert n_on == n_off == [16, 16, 16]
    for a, b in zip(sent_on, sent_off):
        for c in range(3):
            torch.testing.assert_close(a[c], b[c], **TOL)
    for c in range(3):
        for k in up_off[c]:
            torch.testing.assert_close(torch.from_numpy(up_on[c][k]), torch.from_numpy(up_off[c][k]), **TOL)
