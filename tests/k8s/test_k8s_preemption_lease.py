"""A preemption begun while the scheduler led is not carried out once the Lease is lost within the pod's turn (its
budgets read, its node reserved, its victims evicted one by one take calls, as slow as the API server that cost
the Lease): the new leader may be preempting for the same pod, on another node, at the same time."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def prioritised(p: dict, priority: int) -> dict:
    p["spec"]["priority"] = priority
    return p


def test_the_lease_lost_while_a_preemption_is_planned_evicts_no_one(kube: FakeKube, api, clock):
    kube.add(node("a", 8))
    kube.add(prioritised(pod("low", gpus=8, node_name="a"), 1))
    kube.add(prioritised(pod("urgent", gpus=8, scheduler="gputide", phase="Pending"), 50))
    lease = {"held": True}
    kube.before("GET", r"/poddisruptionbudgets$", lambda: lease.update(held=False))   # the budgets read is slow
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, leading=lambda: lease["held"])
    assert sched.schedule_once() == {"default/urgent": None}
    assert not kube.calls("POST", r"/eviction$") and sched.preempted == []
    annotations = kube.get("nodes", "a")["metadata"].get("annotations") or {}
    assert json.loads(annotations.get(RESERVATION_ANNOTATION) or "{}") == {}


def test_the_lease_lost_between_evictions_evicts_no_more(kube: FakeKube, api, clock):
    kube.add(node("a", 8))
    kube.add(prioritised(pod("low-1", gpus=4, node_name="a"), 1))
    kube.add(prioritised(pod("low-2", gpus=4, node_name="a"), 2))
    kube.add(prioritised(pod("urgent", gpus=8, scheduler="gputide", phase="Pending"), 50))
    lease = {"held": True}
    kube.before("POST", r"/eviction$", lambda: lease.update(held=False))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, leading=lambda: lease["held"])
    sched.schedule_once()
    assert len(kube.calls("POST", r"/eviction$")) == 1
