"""`planner.refuse(..., guard=True)` and `planner.still_full`: a pod the guard kept off a node full with replacements
still landing is let back there once the guard no longer counts the node full, not `refusedTargetRetryS` after;
a pair kept off for the actuator's cause (which the guard does not count) is not, and the guard is not asked while
no pod is kept off as full."""

from __future__ import annotations

from balancer.model import Migrate
from balancer.plan.planner import PlannerState, refuse, still_full


def move(node: str, workload: str = "inference/web-0") -> Migrate:
    return Migrate(workload=workload, source_gpus=(0,), target_gpus=(4,), target_node=node, reason="hot")


def never() -> frozenset[str]:
    raise AssertionError("the guard is asked though no pod is kept off as full")


def test_a_full_node_is_let_back_once_the_guard_no_longer_counts_it_full() -> None:
    state = refuse(PlannerState(), (), 1000.0, targets=[move("n1"), move("n2")], guard=True)
    state = refuse(state, (), 1000.0, targets=[move("n3")])   # n3: the actuator's refusal, unmarked
    assert state.full_targets == {("inference/web-0", "n1"), ("inference/web-0", "n2")}
    assert still_full(state, lambda: {"n1", "n2"}) is state
    after = still_full(state, lambda: {"n2", "n9"})   # n1's replacement runs
    assert set(after.refused_targets) == {("inference/web-0", "n2"), ("inference/web-0", "n3")}
    assert after.full_targets == {("inference/web-0", "n2")}
    assert set(still_full(after, frozenset).refused_targets) == {("inference/web-0", "n3")}


def test_a_pair_the_actuator_refused_is_not_let_back_by_the_guards_count() -> None:
    state = refuse(PlannerState(), (), 1000.0, targets=[move("n1")])   # the actuator's refusal (topology spread)
    # the guard then refusing n2 as full and naming n1 full too
    state = refuse(state, (), 1030.0, targets=[move("n2"), move("n1")], guard=True)
    assert state.full_targets == {("inference/web-0", "n2")}   # n1 stays the actuator's
    assert set(still_full(state, frozenset).refused_targets) == {("inference/web-0", "n1")}
    # the actuator refusing a pair kept off as full: its cause holds, the guard's count no longer ends it
    state = refuse(PlannerState(), (), 1000.0, targets=[move("n1")], guard=True)
    state = refuse(state, (), 1030.0, targets=[move("n1")])
    assert state.full_targets == frozenset()
    assert set(still_full(state, frozenset).refused_targets) == {("inference/web-0", "n1")}


def test_the_guard_is_not_asked_while_no_pod_is_kept_off_as_full() -> None:
    state = refuse(PlannerState(), (), 1000.0, targets=[move("n1")])
    assert still_full(state, never) is state
    empty = PlannerState()
    assert still_full(empty, never) is empty
    assert still_full(None, never) is None   # a wrapping planner's own state: as it is
