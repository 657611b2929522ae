"""No eviction before the Lease holds it. The leader saved its safety ledger only after a cycle's actions, and a
failed save counted as saved: a leader whose Lease writes failed (the API server erroring, RBAC or size refusing the
annotation) went on evicting, crashed, and its successor inherited a ledger without those evictions and spent the
whole budget again. Now the ledger with a cycle's evictions is written before any is carried out; when that write
fails they wait (rejected as `eviction_budget`), while what evicts nothing and reclaims of loaned GPUs go on."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actions import Plan, ScaleInference, ScaleTraining
from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import WorkloadClass
from balancer.safety_ledger import SafetyLedger
from tests.loop.loop_helpers import make_fleet, snapshot, workload

LEASE_PUT = r"/leases/gputide-controller$"
JOBS = 4
SNAP = snapshot(make_fleet(2, 4), age=0.0, workloads=[
    *[(workload(f"job{j}-{i}", WorkloadClass.TRAINING, owner=f"job{j}", elastic_min=1), (2 * j + i,))
      for j in range(JOBS) for i in range(2)],
    *[(workload(f"web-{i}", owner="web"), ()) for i in range(2)]])


def shrink(job: int, reclaim: bool = False) -> ScaleTraining:
    return ScaleTraining(job=f"job{job}", workers=1, previous_workers=2, reclaim=reclaim, reason="room",
                         expected_gain=5.0)


SCALE_UP = ScaleInference(service="web", replicas=3, previous_replicas=2, reason="demand", expected_gain=5.0)


class Replica:
    """A controller replica on the fake API server: its Lease elector (renewed on demand), a planner that sends
    `plan`, and an actuator that records what it carried out and what the Lease held at that moment."""

    def __init__(self, kube: FakeKube, api, clock, identity: str, plan: list, policy: BalancerPolicy) -> None:
        self.kube, self.plan, self.applied, self.on_lease = kube, plan, [], []
        self.registry = CollectorRegistry()
        self.elector = LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                                          renew_deadline_s=10, clock=clock)
        replica = self

        class Recording(DryRunActuator):
            def apply(self, action, snap):
                replica.applied.append(action)
                replica.on_lease.append(replica.lease_ledger())
                return ActionResult(action, Outcome.APPLIED)

        self.loop = Reconciler(source=self, actuator=Recording(), elector=self.elector, clock=clock, policy=policy,
                               metrics=ControllerMetrics(self.registry),
                               planner=lambda s, f, p, state: (Plan(actions=tuple(self.plan)), state))

    def snapshot(self):
        return SNAP

    def lease_ledger(self) -> SafetyLedger | None:
        text = (self.kube.get("leases", "gputide-controller", "gputide")["metadata"].get("annotations") or {}).get(
            LEDGER_ANNOTATION)
        return None if text is None else SafetyLedger.from_json(text)

    def failures(self, reason: str) -> float | None:
        return self.registry.get_sample_value("gputide_ledger_write_failures_total", {"reason": reason})


@pytest.fixture
def replicas(kube: FakeKube, api, clock):
    def make(identity: str, plan: list, budget: int = 30) -> Replica:
        return Replica(kube, api, clock, identity, plan, BalancerPolicy(safety=SafetyPolicy(eviction_budget=budget)))
    return make


def test_the_lease_holds_an_eviction_before_it_is_carried_out(replicas) -> None:
    a = replicas("replica-a", [shrink(0)])
    report = a.loop.run_once()
    assert a.applied == [shrink(0)]
    assert a.on_lease[0] is not None and len(a.on_lease[0].evictions) == 1   # was: nothing on the Lease yet
    assert report.rejected == [] and len(a.lease_ledger().evictions) == 1


@pytest.mark.parametrize("code", [500, 403])
def test_a_leader_that_cannot_save_its_ledger_evicts_nothing_but_goes_on_with_the_rest(kube, replicas, code) -> None:
    a = replicas("replica-a", [shrink(0), SCALE_UP, shrink(1, reclaim=True)])
    kube.inject("PUT", LEASE_PUT, code, count=1000)   # every Lease write fails; reads still answer
    report = a.loop.run_once()
    assert a.applied == [SCALE_UP, shrink(1, reclaim=True)]   # the reclaim: the budget never refuses one
    assert report.rejected == [(shrink(0), "eviction_budget")]
    assert a.failures("unavailable" if code == 500 else "refused") >= 1
    assert a.registry.get_sample_value("gputide_actions_rejected_total", {"reason": "eviction_budget"}) == 1
    assert a.loop.handover.unsaved and a.lease_ledger() is None
    kube.faults.clear()                                # the API server answers again: the next cycle evicts
    a.plan[:] = [shrink(0)]
    a.loop.run_once()
    assert a.applied[-1] == shrink(0) and not a.loop.handover.unsaved
    assert len(a.lease_ledger().evictions) == 2        # the reclaim's eviction and the shrink's


def test_a_successor_never_spends_the_budget_a_leader_that_could_not_save_spent(kube, clock, replicas) -> None:
    """Budget 2. a's Lease writes fail while it plans two shrinks, and it dies; b takes over and plans all four.
    Before, a evicted two (counted saved), b inherited no evictions and evicted two more: four in the window."""
    a = replicas("replica-a", [], budget=2)
    b = replicas("replica-b", [shrink(j) for j in range(JOBS)], budget=2)
    a.loop.run_once()                                  # a leads, nothing to do yet
    assert b.loop.run_once().status == "standby"
    kube.inject("PUT", LEASE_PUT, 500, count=1000)
    a.plan[:] = [shrink(0), shrink(1)]
    for _ in range(3):
        a.loop.run_once()
    kube.faults.clear()
    clock.advance(16)                                  # a is gone; its Lease expires
    for _ in range(3):
        b.loop.run_once()
    evictions = len([x for x in a.applied + b.applied if isinstance(x, ScaleTraining)])
    assert evictions == 2, (a.applied, b.applied)
