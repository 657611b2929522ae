"""The capacity planner's holds count inference pods only (`placed` with `WorkloadClass.INFERENCE` in
`capacity_loop.unattributed_services` and `unseen_services`), while the forecaster counts any pod of a service.

A batch pod with no owner is no inference pod unattributed: a profiled service reporting replicas and owning no pod
(none placed yet) is no sign that pod metadata is unread, so capacity is not held for `unattributed_pods`. A profiled
service whose only placed pod is a batch one (its own job, say, not a serving replica) has no replica running whose
demand is unknown: it is not held as unseen (NO_SERIES). Counting every class, either would hold the whole tide;
and a service owning only a batch pod would own none of the inference pods left unattributed, yet pass for owning
them."""

from __future__ import annotations

from dataclasses import replace

from balancer.model import ScaleTraining, Workload, WorkloadClass
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import HOLD_UNATTRIBUTED, plan_with_capacity
from balancer.plan.planner import PlannerState
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_capacity_hold_no_series import idle_two

BOTH = {n: PROFILES[n] for n in ("chat", "embed")}
IDLE_GPU = 6   # idle in `idle_two`


def with_batch(owner: str):
    """`idle_two` with a batch pod of `owner` ("": none) placed on an idle GPU."""
    snap = idle_two()
    pod = Workload(name="batch/job-0", workload_class=WorkloadClass.BATCH, namespace="batch", owner=owner)
    assert IDLE_GPU not in {g for idx in snap.placements.values() for g in idx}
    return snap.replace(workloads=(*snap.workloads, pod), placements={**snap.placements, pod.name: (IDLE_GPU,)})


def plan(snap):
    return plan_with_capacity(snap, {}, ON, PlannerState(), profiles=BOTH, capacity_policy=CapacityPolicy())


def test_a_batch_pod_without_owner_is_no_unattributed_inference_pod():
    snap = with_batch("")
    chat = snap.services["chat"]
    # embed reports a replica and owns no pod (pending, say): with an inference pod unowned, it would hold
    snap = snap.replace(services={**snap.services, "embed": replace(chat, name="embed", demand_rps=0.0)})
    p, state = plan(snap)
    assert HOLD_UNATTRIBUTED not in state.capacity_holding, p.notes
    assert not any("have no owner" in n for n in p.notes), p.notes


def test_a_service_owning_only_a_batch_pod_owns_none_of_the_unattributed_inference_pods():
    snap = with_batch("embed")
    chat = snap.services["chat"]
    # chat's replica unowned (its metadata unread), embed reporting a replica with only a batch pod of its own
    snap = snap.replace(workloads=tuple(replace(w, owner="") if w.owner == "chat" else w for w in snap.workloads),
                        services={**snap.services, "embed": replace(chat, name="embed", demand_rps=0.0)})
    p, state = plan(snap)
    assert HOLD_UNATTRIBUTED in state.capacity_holding, p.notes
    assert any("embed report replicas" in n for n in p.notes), p.notes


def test_a_profiled_service_whose_only_placed_pod_is_batch_is_not_held_as_unseen():
    snap = with_batch("embed")
    assert "embed" not in snap.services and "embed" not in snap.demand_unknown
    p, state = plan(snap)
    assert "embed" not in state.demand_held and state.capacity_holding == frozenset(), (state.demand_held, p.notes)
    assert [a for a in p.actions if isinstance(a, ScaleTraining)], "the tide plans: nothing of embed serves"

