"""The loop's last check before acting keeps a group's moves all or none, as the guard's review does.

The guard accepts the moves that empty one GPU (`Migrate.group`) together or not at all (`balancer.safety_groups`),
but the loop checks the accepted actions once more on the fresh snapshot it acts on (a target GPU taken since the plan,
an emergency stop since): a member refused there left the others to be carried out, pods evicted for a GPU left half
emptied, freeing nothing: the failure the guard's rule is there to prevent.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import SafetyPolicy
from balancer.loop import Reconciler, SafetyGuard
from balancer.model import Migrate, Plan

FL = make_fleet(3, 4)
PODS = [(workload("a-0", owner="a", milli=300), (0,)), (workload("b-0", owner="b", milli=300), (0,))]
PLANNED = snapshot(FL, workloads=PODS, age=0.0)
# by the fresh read a new pod took GPU 9 whole: b's move there no longer fits
FRESH = snapshot(FL, workloads=[*PODS, (workload("new-0", owner="new"), (9,))], age=0.0)


def mig(name: str, target: int, group: str = "consolidate n0/0") -> Migrate:
    return Migrate(workload=f"inference/{name}", source_gpus=(0,), target_gpus=(target,),
                   target_node=FL.gpus[target].node, reason="consolidate", expected_gain=0.5, group=group)


class Source:
    def __init__(self) -> None:
        self.reads = [PLANNED, FRESH]

    def snapshot(self):
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]


class Actuator:
    name = "test"

    def __init__(self) -> None:
        self.applied: list = []

    def apply(self, action, snap):
        self.applied.append(action.workload)
        return ActionResult(action, Outcome.APPLIED)


def cycle(actions):
    actuator = Actuator()
    guard = SafetyGuard(SafetyPolicy(max_concurrent_migrations_per_node=10, max_unavailable_per_workload=10))
    rec = Reconciler(source=Source(), actuator=actuator, guard=guard, clock=lambda: PLANNED.time,
                     planner=lambda snap, forecasts, policy, state: (Plan(actions=tuple(actions)), state))
    report = rec.run_once()
    return actuator.applied, {a.workload: why for a, why in report.rejected}


def test_a_group_member_stale_on_the_fresh_snapshot_takes_the_whole_group_with_it():
    applied, rejected = cycle([mig("a-0", 8), mig("b-0", 9)])
    assert applied == []
    assert rejected == {"inference/a-0": "group_incomplete", "inference/b-0": "stale_plan"}


def test_moves_outside_the_refused_group_still_go():
    applied, rejected = cycle([mig("a-0", 8), mig("b-0", 9, group="")])
    assert applied == ["inference/a-0"]
    assert rejected == {"inference/b-0": "stale_plan"}
