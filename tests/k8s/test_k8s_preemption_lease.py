"""A preemption begun while the scheduler led is not carried out once the Lease is lost within the pod's turn (its
budgets read, its node reserved, its victims evicted one by one take calls, as slow as the API server that cost
the Lease): the new leader may be preempting for the same pod, on another node, at the same time. What is left of
it is on the reservation, which names every victim before the first is evicted, so the next leader carries it on
at once: the victims left were not written down (nothing is written without the Lease), and it held the node for
the pod waiting for victims no one would evict, the whole 5-minute hold."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pdb, pod
from test_k8s_preemption import bound, pending, reservations

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


def one_node(kube: FakeKube) -> None:
    """a: low-1 (guarded by a budget: evicted first) and low-2; the urgent pod needs all of it."""
    kube.add(pdb("guard", "default", {"tier": "batch"}, 1))
    kube.add(node("a", 8))
    kube.add(bound("low-1", "a", 4, 1, labels={"tier": "batch"}))
    kube.add(bound("low-2", "a", 4, 2))
    kube.add(pending("urgent", 8, 50))


def test_the_next_leader_evicts_the_victims_left_when_the_lease_was_lost_between_evictions(kube, api, clock):
    one_node(kube)
    lease = {"a": True}
    kube.before("POST", r"/eviction$", lambda: lease.update(a=False))   # lost while low-1 is evicted
    a = SecondaryScheduler(api, "gputide", most_free, clock=clock, leading=lambda: lease["a"])
    a.schedule_once()
    assert kube.get("pods", "low-1", "default") is None and kube.get("pods", "low-2", "default") is not None
    assert "default/low-2" in reservations(kube, "a")["default/urgent"]["victims"]   # said before it was evicted

    terminating = bound("low-1", "a", 4, 1, labels={"tier": "batch"})
    terminating["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:50Z"
    kube.add(terminating)                                              # as a kubelet keeps it while it terminates

    b = SecondaryScheduler(api, "gputide", most_free, clock=clock)     # the next leader
    clock.advance(5)
    assert b.schedule_once() == {"default/urgent": None}
    assert kube.get("pods", "low-2", "default") is None                # carried on at once, not 5 minutes later
    assert len(kube.calls("POST", r"/pods/low-1/eviction$")) == 1      # terminating already: not evicted again
    held = reservations(kube, "a")["default/urgent"]
    assert "victims" not in held and held["evicted"] == ["default/low-1", "default/low-2"]
    kube.delete("pods", "low-1", "default")
    clock.advance(5)
    assert b.schedule_once() == {"default/urgent": "a"}
