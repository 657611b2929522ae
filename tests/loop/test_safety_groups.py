"""Moves that pay only together (`Migrate.group`: those emptying one GPU) are accepted all or none. The guard
reviewed each on its own, so a per-cycle limit or the eviction budget could take the first of a GPU's moves and
refuse the rest: pods evicted and budget spent for a GPU left half emptied, freeing nothing."""

from __future__ import annotations

from dataclasses import replace

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import SafetyPolicy
from balancer.model import Migrate, SetPowerLimit
from balancer.safety import MaxActionsPerCycle, SafetyGuard, SafetyLedger
from balancer.safety_groups import GroupIncomplete

FL = make_fleet(3, 4)
W = [(workload(f"a-{i}", owner=f"a{i}"), (i,)) for i in range(3)] + [(workload("b-0", owner="b0"), (4,))]
SNAP = snapshot(FL, workloads=W)
NOW = 10_000.0


def mig(i, target, group=""):
    name, src = W[i][0].name, W[i][1]
    return Migrate(workload=name, source_gpus=src, target_gpus=(target,), target_node=FL.gpus[target].node,
                   reason="consolidate", expected_gain=1.0, group=group)


def cap(gpu):
    return SetPowerLimit(gpu=gpu, uuid=FL.gpus[gpu].uuid, node=FL.gpus[gpu].node, watts=250, previous_watts=400,
                         reason="hot", expected_gain=1.0)


def short(a) -> str:
    return a.workload.split("/")[-1]


def review(policy, actions):
    return SafetyGuard(policy).review(actions, SNAP, SafetyLedger(), NOW)


def test_a_group_cut_by_the_per_cycle_limit_is_refused_whole_and_its_slots_go_to_the_next_actions():
    group = [mig(0, 8, "g"), mig(1, 9, "g")]
    r = review(SafetyPolicy(max_actions_per_cycle=2, max_concurrent_migrations_per_node=10,
                            max_unavailable_per_workload=10), [cap(10), *group, cap(11)])
    assert [a.kind for a in r.accepted] == ["power_limit", "power_limit"]   # the cap after the group got its slot
    refused = {short(a): type(exc) for a, exc in r.rejected if isinstance(a, Migrate)}
    assert refused == {"a-0": GroupIncomplete, "a-1": MaxActionsPerCycle}   # what cut it keeps its own reason


def test_a_group_cut_by_the_eviction_budget_spends_none_of_it():
    group = [mig(0, 8, "g"), mig(1, 9, "g")]
    r = review(SafetyPolicy(eviction_budget=1, max_concurrent_migrations_per_node=10,
                            max_unavailable_per_workload=10), [*group, mig(3, 10)])
    assert [short(a) for a in r.accepted] == ["b-0"]   # the one eviction left went to a move that pays alone
    assert {short(a) for a, _ in r.rejected} == {"a-0", "a-1"}
    assert "eviction_budget" in str(next(exc for a, exc in r.rejected if isinstance(exc, GroupIncomplete)))


def test_whole_groups_and_ungrouped_moves_are_reviewed_as_before():
    policy = SafetyPolicy(max_concurrent_migrations_per_node=10, max_unavailable_per_workload=10)
    grouped = review(policy, [mig(0, 8, "g"), mig(1, 9, "g"), mig(3, 10)])
    assert len(grouped.accepted) == 3 and not grouped.rejected
    plain = review(replace(policy, max_actions_per_cycle=1), [mig(0, 8), mig(1, 9)])
    assert [short(a) for a in plain.accepted] == ["a-0"] and len(plain.rejected) == 1   # no group: as before


def test_consolidation_groups_the_moves_by_the_gpu_they_empty():
    from test_loop_consolidation_dropped import SLOWDOWN, moves

    _, kept = moves({4: 50.0, 5: SLOWDOWN - 10})   # a-0 empties GPU 0, d-0 empties GPU 5
    assert {m.workload: m.group for m in kept} == {"inference/a-0": "consolidate n0/0",
                                                   "inference/d-0": "consolidate n1/1"}
    assert not any(m.taint_source for m in kept)   # a cool node's freed GPU is not kept from new pods


def test_a_group_moving_onto_a_node_a_refused_group_was_to_leave_is_refused_too():
    """The consolidation planner plans each GPU's moves on the state the earlier ones left: b-0 may fit on n0 only in
    the CPU a-0's move frees there. With a-0's move refused (its cooldown), b-0's replacement would wait Pending."""
    policy = SafetyPolicy(max_concurrent_migrations_per_node=10, max_unavailable_per_workload=10)
    ledger = SafetyLedger(last_action={W[0][0].name: NOW - 60})   # a-0 moved a minute ago
    actions = [mig(0, 8, "empty n0/0"), mig(3, 3, "empty n1/0"), mig(1, 9, "empty n0/1")]
    r = SafetyGuard(policy).review(actions, SNAP, ledger, NOW)
    assert [short(a) for a in r.accepted] == ["a-1"]   # moves onto n2 only: nothing it needs is refused
    why = {short(a): exc for a, exc in r.rejected}
    assert type(why["a-0"]).__name__ == "CooldownActive"
    assert isinstance(why["b-0"], GroupIncomplete) and "moves onto n0" in str(why["b-0"])
