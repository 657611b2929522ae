"""Releasing a hold whose preemption asked an eviction without an answer reads that victim (`Preemptor.release`:
counted where it landed). The read comes after the node is given back: before it, an API that hangs on the read
spent the pass's time (the reads' deadline, or the pod's turn) and the give-back waited a pass, the node held for no
one. And a pass halted (the Lease lost during its reads) gives back nothing and reads nothing (`release_gone`): the
read, and an Event `Preempted` where it found the victim gone, were sent by a replica no longer leading. Against the
fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def doubted(kube: FakeKube, api, clock, landed, **kwargs) -> SecondaryScheduler:
    """urgent preempts p on a, its eviction unanswered (`landed`: what the API server did)."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, **kwargs)
    unanswered(sched, "p", landed)
    sched.schedule_once()
    assert sched.preempted == [] and set(reservations(kube, "a")) == {"default/urgent"}
    return sched


def order(kube: FakeKube, since: int) -> list[str]:
    """The node a give-backs and reads of p among the requests from `since` on, in order."""
    return [("give back" if r.method == "PATCH" else "read p") for r in kube.requests[since:]
            if (r.method, r.path.split("?")[0].rsplit("/", 2)[-2:]) in (("PATCH", ["nodes", "a"]),
                                                                        ("GET", ["pods", "p"]))]


def test_a_hold_of_a_pod_deleted_is_given_back_before_its_doubted_victim_is_read(kube: FakeKube, api, clock):
    sched = doubted(kube, api, clock, lambda: kube.delete("pods", "p", "default"))
    kube.delete("pods", "urgent", "default")
    kube.add(pending("other", 8, 5))                                   # a pass that reads the nodes (fits none)
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/other": None}
    assert order(kube, since) == ["give back", "read p"]
    assert sched.preempted == [("default/p", "a")] and reservations(kube, "a") == {}


def test_a_hold_of_a_pod_bound_elsewhere_is_given_back_before_its_doubted_victim_is_read(kube: FakeKube, api, clock):
    sched = doubted(kube, api, clock, lambda: None)                   # p runs on
    kube.mutate("nodes", "a", "", {"spec": {"unschedulable": True}})    # urgent fits b only
    kube.add(node("b", 4))
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "b"}
    assert order(kube, since) == ["give back", "read p"]
    assert sched.preempted == [] and reservations(kube, "a") == {}


def test_a_pass_halted_in_its_reads_reads_no_doubted_victim_of_a_hold_it_leaves(kube: FakeKube, api, clock):
    lease = {"held": True}
    sched = doubted(kube, api, clock, lambda: kube.delete("pods", "p", "default"), leading=lambda: lease["held"])
    kube.delete("pods", "urgent", "default")
    kube.add(pending("other", 8, 5))
    kube.before("GET", r"/pods\?fieldSelector=spec\.nodeName%21", lambda: lease.update(held=False))  # bound pods
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {}
    assert order(kube, since) == []                                    # neither given back nor read
    assert set(reservations(kube, "a")) == {"default/urgent"}
    assert sched.preempted == [] and events(kube, "p") == []
