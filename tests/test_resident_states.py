"""Resident states (runtime/resident.py): a client actor keeps the updates it sends where the fed
server keeps them as they came (PSL's own models), and the fed server sends a name instead of
the state only where the driver's claim, its own tag and the client actor's copy agree."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raysfl.own_states import OwnStates
from raysfl.runtime.resident import KeptMirror, KeptStates


def _stats(client: int, kept: str = ""):
    return SimpleNamespace(client=client, kept=kept)


def test_the_driver_claims_only_what_a_client_actor_still_keeps():
    """Two client actors (clients 0, 2 on actor 0; 1, 3 on actor 1). A claim is a state kept in
    the round before or this one, reported by a client actor heard from since."""
    mirror = KeptMirror(lambda c: c % 2)
    mirror.observe(1, [_stats(0, "a"), _stats(1, "b"), _stats(2, "c")], set())
    assert mirror.claims(2, range(4)) == {0: "a", 1: "b", 2: "c"}
    assert mirror.claims(3, range(4)) == {}  # kept before round 2: the client actor drops it at round 3's end
    # round 2: client 0 trained again, client 2 failed (no update: nothing kept), actor 1 was late
    mirror.observe(2, [_stats(0, "a2"), _stats(2)], {1})
    assert mirror.claims(3, range(4)) == {0: "a2"}
    mirror.observe(3, [_stats(3, "d")], set())
    assert mirror.claims(3, range(4)) == {0: "a2", 3: "d"}  # a retry of round 3
    assert mirror.claims(4, range(4)) == {3: "d"}
    mirror.forget([1])  # actor 1 restarted: it keeps nothing
    assert mirror.claims(4, range(4)) == {}


def test_a_client_actor_keeps_two_rounds_and_refuses_a_name_it_lacks():
    kept = KeptStates()
    kept.keep(1, 0, "a", {"w": np.ones(2)})
    kept.keep(2, 1, "b", {"w": np.zeros(2)})
    kept.end_round(2)
    assert len(kept) == 2 and kept.take(0, "a", "client actor 0")["w"][0] == 1.0
    kept.end_round(3)  # round 1's state is older than round 2
    assert len(kept) == 1
    with pytest.raises(RuntimeError, match=r"client actor 0 was told to start client 0 from its kept state"):
        kept.take(0, "a", "client actor 0")
    with pytest.raises(RuntimeError, match="--client-bank off"):
        kept.take(1, "other", "client actor 0")


def test_the_fed_servers_tag_goes_with_the_state_it_names():
    own = OwnStates()
    state = {"w": np.ones(3)}
    own[0] = state
    own.tag(0, {"w": np.ones(3)}, "not it")  # an equal state, not the one stored: no tag
    assert own.token(0, state) is None
    own.tag(0, state, "t0")
    assert own.token(0, state) == "t0" and own.token(0, dict(state)) is None  # a state built from it: no
    manifest = own.manifest()
    own.load(manifest)  # a rollback: what the client actor keeps may be newer
    assert own.token(0, own[0]) is None
    own.tag(0, own[0], "t1")
    own[0] = {"w": np.zeros(3)}  # replaced
    assert own.token(0, own[0]) is None
    own.tag(0, own[0], "t2")
    del own[0]
    own[0] = state
    assert own.token(0, state) is None


def test_psl_clients_start_from_what_their_client_actor_kept(ray_session):
    """One client actor and the fed server, in this process: round 1 from the global model, the
    updates aggregated, round 2 dispatched with the driver's claims: the clients start from the
    states their client actor kept, equal to the ones the fed server would have sent. A part the
    bank used and a later round reuses does not change what was kept. After a rollback the fed
    server sends whole states."""
    import ray

    import raysfl
    from raysfl.resolve import validate_run
    from raysfl.data import load_dataset
    from raysfl.runtime.client_actor import ClientActor
    from raysfl.runtime.experiment import prepare
    from raysfl.runtime.fed_actor import ClientViews, FedActor
    from raysfl.runtime.planning import ClientPlan
    from raysfl.transport import GradReply, pack, unpack

    cfg, algo = validate_run(raysfl.config_from_kwargs(algo="psl", clients=3, model="cnn", batch_size=8))
    ds = load_dataset("digits")
    p = prepare(cfg, algo, ds)
    fed = FedActor()
    fed.setup("test", cfg, p.spec, p.ctx, p.planner.shared(), ds, ClientViews([], np.ones((3, 10))))
    actor = ClientActor(0)
    actor.setup("test", cfg, p.spec, p.ctx, None, ds, {c: np.arange(40 * c, 40 * (c + 1)) for c in range(3)})

    def train(rnd: int, clients: list[int], models: dict):
        plans = {c: ClientPlan(cut=2, steps=2, batch=8, stream_pos=0, lr=0.05, blocks=2, round=rnd) for c in clients}
        actor.begin_round(plans, models)
        groups.append(len({id(g) for g in actor.bank_of.values()}))
        start = {c: {k: v.detach().clone() for k, v in actor.active[c].part.state_dict().items()} for c in clients}
        grads = []
        for s in range(2):
            payload = actor.step(s, [0], {c: 0 for c in clients}, grads)
            grads = [ray.put({c: GradReply(pack(torch.full_like(unpack(m.activations), 0.01 * (c + 1))))
                              for c, m in payload.items()})]
        updates, stats = actor.end_round(grads)
        return start, updates, stats

    plan, groups = {c: 2 for c in range(3)}, []
    _, updates, stats = train(1, [0, 1, 2], fed.dispatch([plan]))
    assert all(u.token and u.token == st.kept for u, st in zip(updates, stats))
    fed.aggregate(1, None, [], [ray.put(updates)])
    # the driver's claim for client 1 is not what the fed server stores: its whole state goes
    sent = fed.dispatch([plan], {0: updates[0].token, 1: "stale", 2: updates[2].token})
    assert sorted(sent["resident"]) == [0, 2] and sorted(sent["own"]) == [1]
    whole = fed.dispatch([plan])
    assert whole["resident"] == {} and sorted(whole["own"]) == [0, 1, 2]
    start, updates, stats = train(2, [0, 1, 2], sent)
    assert groups == [1, 1]  # the three clients stepped in one bank group, rounds 1 and 2
    for c in range(3):  # the states kept here are the ones the fed server would have sent
        for k, v in whole["own"][c].items():
            assert torch.equal(start[c][k], torch.from_numpy(np.array(v))), (c, k)
    fed.aggregate(2, None, [], [ray.put(updates)])
    claims = {st.client: st.kept for st in stats}
    kept = {c: {k: np.array(v) for k, v in actor.kept.take(c, claims[c], "test").items()} for c in (1, 2)}
    # round 3: client 0 alone (a group of one), in a part the bank's rows were views in
    alone = fed.dispatch([{0: 2}], claims)
    assert alone["resident"] == {0: claims[0]} and alone["own"] == {}
    start, _, _ = train(3, [0], alone)
    assert groups[-1] == 0  # a group of one: its own module
    assert all(torch.equal(start[0][k], torch.from_numpy(np.array(v))) for k, v in updates[0].state.items())
    for c in (1, 2):  # what was kept of the others is as it was
        for k, v in actor.kept.take(c, claims[c], "test").items():
            assert np.array_equal(v, kept[c][k]), (c, k)
    fed.load_state(fed.get_state())  # a rollback: the fed server forgets what the client actors keep
    assert fed.dispatch([plan], claims)["resident"] == {}
