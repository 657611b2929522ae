"""A clash between the hotspot plan and the tide drops only the clashing capacity actions and what depends on them.
Before, any clash held back the whole capacity decision, every cycle the hotspot plan proposed it again, even when the
safety guard refused the hotspot action each time."""

from __future__ import annotations

from balancer import config
from balancer.model import Plan, ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, CapacityState, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import SafetyGuard, SafetyLedger
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
PROFILES = {name: ServiceCapacity(name=name, rps_per_replica=10, warmup_s=300) for name in ("chat", "embed")}


def hot_shrink(job, workers=3):
    return ScaleTraining(job=job, workers=workers - 1, previous_workers=workers,
                         reason="hot GPU, throttling not enough", expected_gain=1.0)


def base_with(*actions):
    def base(snapshot, forecasts, policy, state):
        return Plan(actions=tuple(actions)), state or planner_mod.PlannerState()
    return base


def fleet_snapshot(jobs, chat_rps=30.0, embed=None, t=1000.0):
    """chat (one replica on GPU 0) and `jobs`: {name: GPUs}, one worker each on a 2x4 fleet."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload("chat-0", owner="chat"), (0,))]
    services = {"chat": ServiceStatus(name="chat", demand_rps=chat_rps, p99_latency_s=0.4, slo_latency_s=0.5,
                                      replicas=1)}
    if embed is not None:
        wl.append((workload("embed-0", owner="embed"), (embed,)))
        services["embed"] = ServiceStatus(name="embed", demand_rps=30.0, p99_latency_s=0.4, slo_latency_s=0.5,
                                          replicas=1)
    for job, gpus in jobs.items():
        wl += [(workload(f"{job}-{i}", C.TRAINING, owner=job, elastic_min=1, elastic_max=8), (g,))
               for i, g in enumerate(gpus)]
    return snapshot(fl, workloads=wl, time=t, services=services)


def plan_for(snap, *hotspot, state=None):
    profiles = {n: p for n, p in PROFILES.items() if n in snap.services}
    return plan_with_capacity(snap, {}, ON, state, profiles=profiles, capacity_policy=CapacityPolicy(),
                              base=base_with(*hotspot))


def ups(plan, service="chat"):
    return [a for a in plan.actions if isinstance(a, ScaleInference) and a.service == service
            and a.replicas > a.previous_replicas]


def test_a_refused_hotspot_shrink_no_longer_holds_back_a_scale_up_on_idle_gpus():
    snap = fleet_snapshot({"job": (4, 5, 6)})   # GPUs 1-3 and 7 idle
    guard, ledger = SafetyGuard(ON.safety), SafetyLedger(last_action={"job": 940.0})   # the tide grew job 60 s ago
    for k in range(3):   # the hotspot planner proposes its shrink every cycle, the guard refuses it every cycle
        plan, _ = plan_for(snap, hot_shrink("job"))
        review = guard.review(plan.actions, snap, ledger, 1000.0 + 60 * k)
        assert [a.service for a in review.accepted if isinstance(a, ScaleInference)] == ["chat"]
        assert [a for a in plan.actions if isinstance(a, ScaleTraining)] == [hot_shrink("job")]   # no tide on job
        assert any("capacity leaves job to the hotspot plan" in n for n in plan.notes)


def test_a_scale_up_that_needs_the_clashing_jobs_gpus_goes_with_it_and_no_other_job_is_shrunk_instead():
    # no idle GPU: chat's 3 more replicas come from "cheap" (first in the cost order) on GPUs 1-4, not "other"
    jobs = {"cheap": (1, 2, 3, 4), "other": (5, 6, 7)}
    plan, _ = plan_for(fleet_snapshot(jobs))
    assert ups(plan) and {a.job for a in plan.actions if isinstance(a, ScaleTraining)} == {"cheap"}
    plan, _ = plan_for(fleet_snapshot(jobs), hot_shrink("cheap", 4))
    assert ups(plan) == [] and any("capacity leaves cheap to the hotspot plan" in n for n in plan.notes)
    assert [a for a in plan.actions if isinstance(a, ScaleTraining)] == [hot_shrink("cheap", 4)]


def test_a_clashing_service_keeps_its_replicas_and_its_memory_while_the_others_go_ahead():
    snap = fleet_snapshot({"job": (5, 6)}, embed=4)   # GPUs 1-3 and 7 idle: both services scale up
    plan, _ = plan_for(snap)
    assert ups(plan, "chat") and ups(plan, "embed")
    hot = ScaleInference(service="embed", replicas=1, previous_replicas=1, reason="hotspot", expected_gain=1.0)
    before = CapacityState()
    plan, state = plan_for(snap, hot, state=planner_mod.PlannerState(capacity=before))
    assert ups(plan, "chat") and ups(plan, "embed") == []
    assert "embed" not in state.capacity.last_change and "embed" not in state.capacity.last_demand
    assert "chat" in state.capacity.last_change
