"""A pod whose preemption asked an eviction without an answer is bound, and the Lease is lost during the binding's
POST: its hold is released reading nothing (`Preemptor.release` drops the doubt once `halted()`), whether it was
bound on the node held for it (`Binder._bound_to`) or elsewhere (`Holds.release_elsewhere`, which never asked
`halted()`). The doubted victim was read, and where it had left an Event `Preempted` was posted and it was counted,
by a replica no longer leading. An eviction that landed then goes uncounted, as where the next term forgets it.
Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import events
from test_k8s_preemption_unanswered_release import doubted, order


def lease_lost_in_binding(kube: FakeKube, api, clock):
    """urgent's eviction of p on a unanswered and landed (p gone); the Lease is lost as urgent's binding is sent."""
    lease = {"held": True}
    sched = doubted(kube, api, clock, lambda: kube.delete("pods", "p", "default"), leading=lambda: lease["held"])
    kube.before("POST", r"/pods/urgent/binding$", lambda: lease.update(held=False))
    return sched


def test_a_pod_bound_on_its_held_node_as_the_lease_is_lost_reads_no_doubted_victim(kube: FakeKube, api, clock):
    sched = lease_lost_in_binding(kube, api, clock)
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}
    assert "read p" not in order(kube, since)
    assert sched.preempted == [] and events(kube, "p") == []


def test_a_pod_bound_elsewhere_as_the_lease_is_lost_reads_no_doubted_victim(kube: FakeKube, api, clock):
    sched = lease_lost_in_binding(kube, api, clock)
    kube.mutate("nodes", "a", "", {"spec": {"unschedulable": True}})    # urgent fits b only
    kube.add(node("b", 4))
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "b"}
    assert "read p" not in order(kube, since)
    assert sched.preempted == [] and events(kube, "p") == []
