"""The capacity view counts only what the tide may act on: protected training jobs are never shrunk (the safety
guard would refuse it every cycle while the scale-up it was for stayed pending), and an idle GPU is free only where
the tide's pods can schedule and no hotspot move of this cycle goes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from balancer import config
from balancer.model import Forecast, Migrate, Plan, ScaleInference, ScaleTraining, ServiceStatus, TaintNode
from balancer.model import WorkloadClass as C
from balancer.noderules import NodeRules, Toleration
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import SafetyGuard, SafetyLedger
from tests.capacity.settled_state import settled
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


@pytest.mark.parametrize("protect", [{"protected": True}, {"namespace": "kube-system"}], ids=["pod", "namespace"])
def test_a_protected_service_is_not_planned_so_no_training_is_shrunk_for_it(protect):
    """The guard refuses scaling a protected service either way: planned, its scale-up was refused while the
    training shrinks that made room for it were accepted, every cycle. It is left out of the view (its GPUs still
    count as inference's), so nothing is shrunk for it."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload("chat-0", owner="chat", **protect), (0,))]
    wl += [(workload(f"other-{i}", C.TRAINING, owner="other", elastic_min=1, elastic_max=4), (g,))
           for i, g in enumerate((1, 2, 3, 4, 5, 6, 7))]
    snap = snapshot(fl, workloads=wl, time=1000.0, services=chat(25.0))
    view = view_from_snapshot(snap, CHAT, protected_namespaces=ON.safety.protected_namespaces)
    assert not view.services and view.inference_gpus == 1
    plan, review = _reviewed(snap)
    assert not plan.actions and not review.rejected


def _idle_on_n0(n0_taints=(), tolerations=()):
    """n0's 4 GPUs idle; chat (wants 3 replicas) on GPU 4 and an elastic job on 5-7 fill n1."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    rules = NodeRules(tolerations=tuple(tolerations))
    wl = [(workload("chat-0", owner="chat", node_rules=rules), (4,))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8, node_rules=rules), (g,))
           for i, g in enumerate((5, 6, 7))]
    nodes = (replace(fl.nodes[0], taints=tuple(n0_taints)), fl.nodes[1])
    return snapshot(fl, workloads=wl, nodes=nodes, time=5000.0, services=chat(30.0))


@pytest.mark.parametrize("taint", ["gputide.io/hot=true:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule",
                                   "dedicated=other:NoExecute", "gputide.io/hot"])
def test_idle_gpus_on_a_node_the_pods_cannot_schedule_on_are_not_free(taint):
    snap = _idle_on_n0([taint])
    assert dict(view_from_snapshot(snap, CHAT).free) == {}
    plan, review = _reviewed(snap, ON.with_section("hotspots", migrate=False))
    # the scale-up gets its GPUs from training, and no growth is planned onto the tainted node
    assert [(a.kind, a.target) for a in plan.actions] == [("scale_training", "job"), ("scale_inference", "chat")]
    assert plan.actions[0].workers < plan.actions[0].previous_workers and not review.rejected


def test_a_taint_every_tide_pod_tolerates_leaves_its_gpus_free():
    snap = _idle_on_n0(["nvidia.com/gpu=present:NoSchedule", "spot:PreferNoSchedule"],
                       [Toleration(key="nvidia.com/gpu", operator="Exists")])
    assert dict(view_from_snapshot(snap, CHAT).free) == {"A100-SXM4-80GB": 4}
    # ... but not when one of them (the job's workers here) does not tolerate it
    fl = make_fleet(nodes=2, gpus_per_node=4)
    mixed = snapshot(fl, nodes=(replace(fl.nodes[0], taints=("nvidia.com/gpu=present:NoSchedule",)), fl.nodes[1]),
                     workloads=[(workload("chat-0", owner="chat", node_rules=NodeRules(tolerations=(
                         Toleration(key="nvidia.com/gpu", operator="Exists"),))), (4,)),
                         (workload("job-0", C.TRAINING, owner="job", elastic_max=8), (5,))], services=chat(30.0))
    assert dict(view_from_snapshot(mixed, CHAT).free) == {"A100-SXM4-80GB": 2}


def test_the_gpu_a_hotspot_migration_targets_is_not_lent_to_training():
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload("api-0", owner="api"), (0,))]   # hot GPU 0 on n0 (not a profiled service)
    wl += [(workload(f"n0busy-{i}", C.BATCH, owner="b"), (g,)) for i, g in enumerate((1, 2, 3))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate((4, 5, 6))]   # GPU 7 idle: the only place api-0 can go
    snap = snapshot(fl, workloads=wl, time=1000.0, temps={0: 95.0})
    plan, state = None, None
    for k in range(3):   # the hotspot must persist a few readings before it is acted on
        snap = snapshot(fl, workloads=wl, time=1000.0 + 30 * k, temps={0: 95.0})
        plan, state = plan_with_capacity(snap, {}, ON, state, profiles=CHAT, capacity_policy=CapacityPolicy())
    migrations = [a for a in plan.actions if isinstance(a, Migrate)]
    assert [a.target_gpus for a in migrations] == [(7,)]
    assert not any(isinstance(a, ScaleTraining) for a in plan.actions)


def test_idle_gpus_on_a_node_this_cycles_plan_taints_are_not_lent():
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
          for i, g in enumerate((4, 5, 6, 7))]
    snap = snapshot(fl, workloads=wl, time=1000.0, services=chat(0.0, replicas=0))
    idle_chat = {"chat": replace(CHAT["chat"], min_replicas=0)}

    def base(taint):
        def plan_(snapshot, forecasts, policy, state):
            return Plan(actions=taint), state or planner_mod.PlannerState()
        return plan_

    def grown(actions):
        plan, _ = plan_with_capacity(snap, {}, ON, None, profiles=idle_chat, capacity_policy=CapacityPolicy(),
                                     base=base(actions))
        return [a.workers for a in plan.actions if isinstance(a, ScaleTraining)]

    assert grown(()) == [8]   # n0's idle GPUs are lent while nothing taints it...
    assert grown((TaintNode(node="n0", reason="hot"),)) == []   # ...not in the cycle the hotspot plan taints it
    assert grown((TaintNode(node="n0", remove=True, reason="cooled"),)) == [8]


def _loan(chat_gpus, job_gpus, extra=()):
    """Half-GPU chat replicas on `chat_gpus` (one each) and an elastic job on `job_gpus`, demand low enough for chat
    to loan one of its two replicas: the snapshot and the plan."""
    fl = make_fleet(nodes=1, gpus_per_node=4)
    wl = [(workload(f"chat-{k}", owner="chat", milli=500), (g,)) for k, g in enumerate(chat_gpus)]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate(job_gpus)]
    t = 100_000.0
    snap = snapshot(fl, workloads=wl + list(extra), time=t, services=chat(1.0, replicas=len(chat_gpus)))
    fc = {"chat": Forecast(service="chat", issued_at=t - 300, step_s=300.0,
                           quantiles={q: np.full(30, 1.0) for q in (0.5, 0.9, 0.99)})}
    watched = planner_mod.PlannerState(capacity=settled(view_from_snapshot(snap, CHAT)))  # past its hold
    plan, _ = plan_with_capacity(snap, fc, ON, watched, profiles=CHAT, capacity_policy=CapacityPolicy())
    return snap, plan


def _grown(plan):
    return [a.workers for a in plan.actions if isinstance(a, ScaleTraining) and a.workers > a.previous_workers]


def test_replicas_sharing_a_gpu_count_it_once_and_a_loan_lends_it_only_once_empty():
    snap, plan = _loan((0, 0), (1, 2, 3))   # two half-GPU replicas on GPU 0
    view = view_from_snapshot(snap, CHAT)
    assert (view.inference_gpus, view.training_gpus, dict(view.free)) == (1, 3, {})
    assert dict(view.services[0].gpus_by_model) == {"A100-SXM4-80GB": 1}
    loan = [a for a in plan.actions if isinstance(a, ScaleInference)]
    assert [(a.previous_replicas, a.replicas) for a in loan] == [(2, 1)]
    assert _grown(plan) == []   # GPU 0 stays half used by the replica left: no worker for it


def test_a_loan_of_replicas_on_gpus_of_their_own_lends_the_gpu_it_empties():
    _, plan = _loan((0, 1), (2, 3))
    assert _grown(plan) == [3]   # whichever replica goes, its GPU is left empty
    # ... but not where another workload shares each GPU a replica could leave
    others = [(workload(f"other-{k}", owner="other", milli=500), (k,)) for k in (0, 1)]
    _, plan = _loan((0, 1), (2, 3), others)
    assert _grown(plan) == []
