"""Client churn (ours): ``unavailable:client:...`` faults mark clients that cannot join a round;
selection picks among the others and the round's rows say how many were unavailable."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

import raysfl
from raysfl.errors import ConfigError
from raysfl.faults import parse_fault, parse_faults, unavailable_clients

# ------------------------------------------------------------------ parsing and planning


def test_churn_items_parse_and_round_trip():
    fs = parse_faults("unavailable:client:p=0.5,unavailable:client:index=2:rounds=2-3,"
                      "unavailable:client:p=0.2:rounds=4-9,unavailable:client:round=5")
    assert [(f.p, f.index, f.rounds) for f in fs] == [(0.5, None, None), (None, 2, (2, 3)), (0.2, None, (4, 9)),
                                                      (None, None, (5, 5))]
    assert parse_faults(",".join(f.text() for f in fs)) == fs
    assert parse_faults([{"action": "unavailable", "role": "client", "p": 0.3, "rounds": "2-4"}])[0].text() == \
        "unavailable:client:rounds=2-4:p=0.3"


@pytest.mark.parametrize("text,match", [
    ("unavailable:client:p=1.5", "p must be in (0, 1], got 1.5"),
    ("unavailable:client:p=-0.1", "p must be in (0, 1], got -0.1"),
    ("unavailable:client:p=0", "p must be in (0, 1], got 0.0"),
    ("unavailable:client:p=nan", "p must be in (0, 1], got nan"),
    ("unavailable:client:p=half", "p='half' is not a number"),
    ("unavailable:client", "unavailable:client needs p=P"),
    ("unavailable:client:index=-1", "index=I (>= 0)"),
    ("unavailable:client:p=0.5:seconds=2", "key 'seconds' does not apply to unavailable"),
    ("unavailable:fed:round=1", "only clients, a server or an edge server can be unavailable"),
])
def test_bad_churn_items_are_one_line(text, match):
    with pytest.raises(ConfigError) as e:
        parse_fault(text)
    assert match in str(e.value) and "\n" not in str(e.value)


def test_churn_index_out_of_range_is_one_line(capsys):
    from raysfl import config_from_kwargs
    from raysfl.cli import main
    from raysfl.resolve import validate

    with pytest.raises(ConfigError, match=r"index 6 out of range; this run has 6 clients \(index=0..5\)"):
        validate(config_from_kwargs(algo="splitfed_v2", clients=6, faults="unavailable:client:index=6"))
    assert validate(config_from_kwargs(algo="splitfed_v2", clients=6, faults="unavailable:client:index=5")).faults
    assert main(["run", "--clients", "4", "--faults", "unavailable:client:index=4:rounds=1-2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "index 4 out of range; this run has 4 clients" in err


def test_same_seed_same_churn_each_client_independently():
    fs = parse_faults("unavailable:client:p=0.5")
    plan = [unavailable_clients(fs, r, 7, 100) for r in range(1, 41)]
    assert plan == [unavailable_clients(fs, r, 7, 100) for r in range(1, 41)]  # a pure function of the seed
    assert plan != [unavailable_clients(fs, r, 8, 100) for r in range(1, 41)]
    share = sum(len(u) for u in plan) / (100 * 40)
    assert 0.45 < share < 0.55  # each client with p per round
    assert len({frozenset(u) for u in plan}) == 40  # redrawn every round
    per_client = [sum(c in u for u in plan) / 40 for c in range(100)]
    assert min(per_client) > 0.1 and max(per_client) < 0.9  # nobody is always in or always out
    window = parse_faults("unavailable:client:p=0.5:rounds=3-4,unavailable:client:index=2:rounds=2-3")
    got = [unavailable_clients(window, r, 0, 6) for r in range(1, 6)]
    assert got[0] == set() and got[4] == set() and got[1] == {2}  # only in the windows
    assert 2 in got[2] and got[2] | got[3]
    assert unavailable_clients(parse_faults("unavailable:client:p=1:index=3"), 1, 0, 6) == {3}
    assert unavailable_clients(parse_faults("unavailable:client:round=1"), 1, 0, 6) == set(range(6))
    # the server faults and the churn are drawn apart: neither takes the other's role
    from raysfl.faults import plan_faults

    assert plan_faults(parse_faults("unavailable:client:index=0"), 1, 0, [0, 1], 2, 1).down_servers == set()
    assert unavailable_clients(parse_faults("unavailable:server:round=1"), 1, 0, 6) == set()


def _ctx(n: int):
    from raysfl.algorithms.roles import FederationContext

    return FederationContext(n, 4, [1, 2, 3], np.full(n, 100), np.ones((n, 10)), [], [1] * 4)


def test_default_selection_picks_among_the_available():
    """K per round among the available clients (fewer when fewer are available); without churn
    the same draw as before churn existed."""
    from raysfl.algorithms.baselines.spec import SplitFedV2
    from raysfl.resolve import validate
    from raysfl.runtime.planning import plan_round

    cfg = validate(raysfl.config_from_kwargs(algo="splitfed_v2", clients=6, clients_per_round=3, rounds=30,
                                             faults="unavailable:client:p=0.5"))
    planner, ctx, fs = SplitFedV2.make_planner(cfg), _ctx(6), parse_faults(cfg.faults)
    sizes = set()
    for rnd in range(1, 31):
        gone = unavailable_clients(fs, rnd, cfg.seed, 6)
        plans, _ = plan_round(cfg, planner, rnd, ctx, {}, gone)
        assert not set(plans) & gone and len(plans) == min(3, 6 - len(gone)), rnd
        sizes.add(len(plans))
        clean, _ = plan_round(cfg, planner, rnd, ctx, {})
        old = sorted(int(c) for c in np.random.default_rng([cfg.seed, rnd, 0x5E1EC7]).choice(6, size=3, replace=False))
        assert sorted(clean) == old
    assert len(sizes) > 1  # some rounds had fewer than K available


def test_progress_line_names_the_unavailable():
    from raysfl.metrics import progress_line

    row = {"round": 2, "test_accuracy": 0.5, "test_loss": 1.0, "train_loss": 1.0, "bytes_up": 0, "bytes_down": 0,
           "sim_time_s": 0.0, "wall_time_s": 0.0, "unavailable_clients": 3}
    assert progress_line(row, 4).endswith("| 3 unavailable")


# ------------------------------------------------------------------ on Ray


def _selected(run_dir, rnd: int) -> set[int]:
    return {r["client"] for r in pq.read_table(run_dir / "clients.parquet").to_pylist() if r["round"] == rnd}


def test_selection_skips_unavailable_clients_and_a_resume_replans_them(quick):
    """splitfed_v2 (the default planner's selection): 4 of 6 clients per round, each client
    unavailable with p = 0.5. Every round's clients avoid that round's planned churn, there are
    min(4, available) of them, and ``unavailable_clients`` counts the churn; rounds 3-4 come from
    a resume and follow the same plan."""
    faults = "unavailable:client:p=0.5"
    cfg = quick(algo="splitfed_v2", clients=6, clients_per_round=4, rounds=2, faults=faults, name="churn")
    first = raysfl.run(cfg)
    res = raysfl.run(raysfl.resume_config(first.run_dir, {"rounds": 4}))
    plan = [unavailable_clients(parse_faults(faults), r, cfg.seed, 6) for r in range(1, 5)]
    assert [len(u) for u in plan] == [r["unavailable_clients"] for r in res.metrics]
    assert [6 - len(u) for u in plan] == [3, 4, 4, 4]  # this seed's draw: round 1 has fewer than 4 left
    for r, gone in zip(res.metrics, plan):
        sel = _selected(res.run_dir, r["round"])
        assert not sel & gone and len(sel) == r["participants"] == min(4, 6 - len(gone)), r["round"]


def test_one_client_absent_exactly_in_its_window_flex_sfl(quick):
    """FLEX-SFL selects its own way (EDCS per edge cluster): with rho = 1 every client takes part,
    except client 1 in rounds 2-3."""
    res = raysfl.run(quick(algo="flex_sfl", rounds=4, local_steps=1, partition="iid", quantity_skew=0.0,
                           faults="unavailable:client:index=1:rounds=2-3",
                           flex_sfl={"edge_servers": 2, "rho": 1.0, "tau_c": 1, "tau_e": 1, "tau_r": 1}))
    assert [sorted(_selected(res.run_dir, r)) for r in range(1, 5)] == [[0, 1, 2, 3], [0, 2, 3], [0, 2, 3],
                                                                       [0, 1, 2, 3]]
    assert [r["unavailable_clients"] for r in res.metrics] == [0, 1, 1, 0]


def test_a_round_nobody_can_join_is_skipped_and_said(quick, capsys):
    """Every client unavailable in round 2 (PSL: every client keeps its own model): the run goes
    on; round 2 trains nobody, leaves the model as it was (the same test accuracy as round 1),
    says so on the console and in its row."""
    res = raysfl.run(quick(algo="psl", rounds=3, faults="unavailable:client:round=2"))
    rows = res.metrics
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [(r["participants"], r["unavailable_clients"]) for r in rows] == [(4, 0), (0, 4), (4, 0)]
    assert rows[1]["test_accuracy"] == rows[0]["test_accuracy"] and math.isnan(rows[1]["train_loss"])
    assert not _selected(res.run_dir, 2)
    err = [line for line in capsys.readouterr().err.splitlines() if "no client can join" in line]
    assert err == ["raysfl: warning: round 2: no client can join (4 of 4 unavailable: unavailable:client faults); "
                   "the round trains nobody and leaves the model as it was"]
