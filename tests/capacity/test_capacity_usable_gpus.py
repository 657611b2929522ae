"""The capacity view counts only what the tide may act on: protected training jobs are never shrunk (the safety
guard would refuse it every cycle while the scale-up it was for stayed pending)."""

from __future__ import annotations

from balancer import config
from balancer.model import ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import SafetyGuard, SafetyLedger
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


def chat(demand: float, replicas: int = 1) -> dict[str, ServiceStatus]:
    return {"chat": ServiceStatus(name="chat", demand_rps=demand, p99_latency_s=0.1, slo_latency_s=0.5,
                                  replicas=replicas)}


def _reclaim_snapshot(**protect):
    """chat on GPU 0 wants 3 replicas; `prot` (priority 0, the cheapest) on GPUs 1-3, `other` (priority 5) on 4-7."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload("chat-0", owner="chat"), (0,))]
    wl += [(workload(f"prot-{i}", C.TRAINING, owner="prot", elastic_min=1, elastic_max=4, **protect), (g,))
           for i, g in enumerate((1, 2, 3))]
    wl += [(workload(f"other-{i}", C.TRAINING, owner="other", elastic_min=1, elastic_max=4, priority=5), (g,))
           for i, g in enumerate((4, 5, 6, 7))]
    return snapshot(fl, workloads=wl, time=1000.0, services=chat(25.0))


def _reviewed(snap, policy=ON):
    plan, _ = plan_with_capacity(snap, {}, policy, None, profiles=CHAT, capacity_policy=CapacityPolicy())
    return plan, SafetyGuard(policy.safety).review(plan.actions, snap, SafetyLedger(), snap.time)


def test_a_protected_job_is_not_shrunk_for_a_reclaim_the_unprotected_one_is():
    snap = _reclaim_snapshot(protected=True)
    plan, review = _reviewed(snap)
    shrinks = [a for a in plan.actions if isinstance(a, ScaleTraining) and a.workers < a.previous_workers]
    assert [a.job for a in shrinks] == ["other"] and shrinks[0].workers == 2
    assert not review.rejected
    assert any(isinstance(a, ScaleInference) and a.replicas == 3 for a in review.accepted)
    view = view_from_snapshot(snap, CHAT)
    assert {j.name: j.protected for j in view.jobs} == {"other": False, "prot": True}
    assert view.training_gpus == 7  # a protected job's GPUs still count as training's


def test_a_job_in_a_protected_namespace_is_neither_shrunk_nor_grown():
    snap = _reclaim_snapshot(namespace="kube-system")
    plan, review = _reviewed(snap)
    assert {a.job for a in plan.actions if isinstance(a, ScaleTraining)} == {"other"}
    assert not review.rejected
    # idle GPUs are lent to a job the guard lets grow, not held for one it refuses
    idle = snapshot(make_fleet(nodes=1, gpus_per_node=4), time=1000.0, services=chat(0.0, replicas=0),
                    workloads=[(workload(f"prot-{i}", C.TRAINING, owner="prot", elastic_min=1, elastic_max=4,
                                         namespace="kube-system"), (i,)) for i in range(2)])
    plan, review = _reviewed(idle)
    assert not any(isinstance(a, ScaleTraining) for a in plan.actions) and not review.rejected
