"""What was carried out is in the safety ledger whatever stops the cycle after it; an emergency stop holds what has
not been carried out yet.

An audit write that fails (a full disk) or an actuator that raises something other than its own failure results
escaped the act phase before the ledger was updated: the applied action was never counted, so neither the eviction
budget nor the cooldown saw it, and the next cycle did it again (20 pods stopped in 150 s against a budget of 4 an
hour). And the emergency stop was read once, at review: one set while the cycle's actions ran (each may take
minutes), or a node labelled between the plan's snapshot and the one the loop acts on, did not hold them."""

from __future__ import annotations

import errno
from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import fleet as fleet_mod
from balancer.actions import Plan
from balancer.actuate.base import ActionResult, Outcome
from balancer.audit import JsonlAudit
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.model import Migrate, Node, ScaleTraining, TaintNode, WorkloadClass
from balancer.plan.simulate import Projection
from balancer.safety import EMERGENCY_LABEL, SafetyGuard

SNAP = snapshot(make_fleet(2, 4), workloads=[(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job"), (i,))
                                             for i in range(8)])
SHRINK = ScaleTraining(job="job", workers=4, previous_workers=8, reason="room", expected_gain=1.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=4, cooldown_s=600))


class Source:
    def snapshot(self):
        return SNAP


class Counting:
    """An actuator that stops the workers each shrink asks it to (and counts them), or raises `error`."""

    name = "counting"

    def __init__(self, error: Exception | None = None) -> None:
        self.stopped, self.error = 0, error

    def apply(self, action, snapshot):
        self.stopped += action.previous_workers - action.workers
        if self.error is not None:
            raise self.error
        return ActionResult(action, Outcome.APPLIED)


class FullDisk:
    """An audit file on a full disk: the record of an applied action cannot be written."""

    def write(self, text: str) -> int:
        if '"outcome": "applied"' in text:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(text)

    def flush(self) -> None:
        pass


def reconciler(actuator: Counting, t: list[float], audit: JsonlAudit | None = None) -> Reconciler:
    return Reconciler(source=Source(), actuator=actuator, clock=lambda: t[0], audit=audit, policy=POLICY,
                      planner=lambda s, f, p, st: (Plan(actions=(SHRINK,)), st))


def test_an_action_applied_before_the_audit_write_failed_is_counted_against_the_budgets():
    t, act = [1000.0], Counting()
    rec = reconciler(act, t, JsonlAudit(FullDisk()))
    with pytest.raises(OSError):
        rec.run_once()
    assert act.stopped == 4 and rec.ledger.evictions == (1000.0,) * 4 and rec.ledger.last_action
    t[0] += 30.0
    report = rec.run_once()   # the budget is spent and the job is in its cooldown: nothing more is stopped
    assert act.stopped == 4 and not report.results and report.rejected


def test_an_actuator_that_raises_ends_the_cycle_with_the_action_spent_as_unknown():
    t, act = [1000.0], Counting(RuntimeError("client bug"))
    rec = reconciler(act, t)
    with pytest.raises(RuntimeError):
        rec.run_once()
    t[0] += 30.0
    assert rec.ledger.evictions == (1000.0,) * 4, "outcome unknown: spent, as a write that got no answer"
    report = rec.run_once()
    assert act.stopped == 4 and not report.results and report.rejected


def test_an_emergency_stop_set_while_an_action_runs_holds_the_rest_of_the_cycle(tmp_path):
    """The stop file appears while the first of three taints is applied (each action may take minutes): the other
    two are rejected as `emergency_stop`, not applied."""
    stop = tmp_path / "STOP"
    applied = []

    class Stopping:
        name = "stopping"

        def apply(self, action, snapshot):
            applied.append(action.node)
            stop.touch()   # the operator hits the emergency stop meanwhile
            return ActionResult(action, Outcome.APPLIED)

    taints = tuple(TaintNode(node=f"n{i}", reason="hot", expected_gain=1.0) for i in range(3))
    rec = Reconciler(source=Source(), actuator=Stopping(), clock=lambda: 1000.0,
                     guard=SafetyGuard(POLICY.safety, emergency_stop_file=stop), policy=POLICY,
                     planner=lambda s, f, p, st: (Plan(actions=taints), st))
    report = rec.run_once()
    assert applied == ["n0"] and report.rejected == [(taints[1], "emergency_stop"), (taints[2], "emergency_stop")]


def test_an_emergency_stop_label_the_fresh_snapshot_shows_holds_the_action():
    """Between the plan's snapshot and the one taken just before acting, the node is labelled
    `gputide.io/emergency-stop=true`: the taint is rejected as `emergency_stop`, not applied."""
    fl = make_fleet(2, 4)
    labelled = tuple(replace(n, labels={**n.labels, EMERGENCY_LABEL: "true"}) if n.name == "n1" else n
                     for n in fl.nodes)
    reads = iter([snapshot(fl), snapshot(fl, nodes=labelled)])
    taint = TaintNode(node="n1", reason="hot", expected_gain=1.0)
    applied = []

    class Reads:
        def snapshot(self):
            return next(reads)

    class Recording:
        name = "recording"

        def apply(self, action, snapshot):
            applied.append(action)
            return ActionResult(action, Outcome.APPLIED)

    rec = Reconciler(source=Reads(), actuator=Recording(), clock=lambda: 1000.0, policy=POLICY,
                     planner=lambda s, f, p, st: (Plan(actions=(taint,)), st))
    report = rec.run_once()
    assert not applied and report.rejected == [(taint, "emergency_stop")]


def test_a_migration_whose_target_gpus_moved_to_another_node_is_not_kept():
    """Actions name GPUs by their position in the snapshot they were planned on. A node that joins between the plan's
    read and the fresh one (GPUs are listed by host name) shifts the target's positions onto another node: the fit
    was checked on that node's GPUs and a move onto a target that had filled up meanwhile was kept, its pod evicted
    with nowhere to run. The same move named by the target's positions in the fresh snapshot is judged on them."""
    def fleet_of(names):
        return fleet_mod.build("t", [Node(name=n, gpu_model="A100-SXM4-80GB", gpu_count=4, inlet_c=25.0)
                                     for n in names])

    planned_on, fresh_fleet = fleet_of(["n0", "n2"]), fleet_of(["n0", "n1", "n2"])   # n1 joined meanwhile
    web = workload("web-0")
    filled = [(workload(f"batch-{i}", WorkloadClass.BATCH, mem=80000), (8 + i,)) for i in range(4)]   # n2 full now
    fresh = snapshot(fresh_fleet, workloads=[(web, (0,)), *filled])
    assert planned_on.gpus[4].node == "n2" and fresh.gpus[4].node == "n1"
    move = Migrate(workload=web.name, source_gpus=(0,), target_gpus=(4,), target_node="n2", reason="hot",
                   expected_gain=1.0)
    assert "not on n2" in Projection(fresh, POLICY).apply(move)
    assert "does not fit" in Projection(fresh, POLICY).apply(replace(move, target_gpus=(8,)))
    assert Projection(fresh, POLICY).apply(replace(move, target_gpus=(5,), target_node="n1")) is None
