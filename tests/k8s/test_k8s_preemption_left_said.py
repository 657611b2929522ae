"""What a preemption whose eviction failed half-way tells the pod (`Holds._left_said`): the node stays held while the
victims it evicted, or found terminating already, terminate. Its only victim before the failure found terminating
already (its owner deleting it), nothing evicted, the pod was told "a stays held while the evicted pods terminate".
Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import most_free
from test_k8s_preemption_partial import two_nodes

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def test_a_failure_after_a_victim_found_terminating_says_nothing_was_evicted(kube: FakeKube, api, clock):
    two_nodes(kube)   # on a: low-1 (a budget covers it: first), then low-2
    kube.before("GET", r"/namespaces/default/pods/low-1$", lambda: kube.mutate(
        "pods", "low-1", "default", {"metadata": {"deletionTimestamp": rfc3339(clock.now + 30)}}))
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert not kube.calls("POST", r"/pods/low-1/eviction$") and sched.preempted == []
    why = sched.reasons["default/urgent"]
    assert ": a stays held while those found terminating already terminate, and default/low-2 is evicted at the " \
        "next pass." in why
    assert "evicted pods" not in why


def test_a_failure_after_an_eviction_says_the_evicted_pods(kube: FakeKube, api, clock):
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]
    assert ": a stays held while the evicted pods terminate, and default/low-2 is evicted at the next pass." in \
        sched.reasons["default/urgent"]
