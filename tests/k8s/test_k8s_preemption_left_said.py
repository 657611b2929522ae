"""What a preemption whose eviction failed half-way tells the pod (`Holds._left_said`): the node stays held while the
victims it evicted, or found terminating already, terminate. Its only victim before the failure found terminating
already (its owner deleting it), nothing evicted, the pod was told "a stays held while the evicted pods terminate".
Against the fake API server, then `_left_said` itself: each of evicted, found terminating, both and neither."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_preemption import most_free
from test_k8s_preemption_partial import two_nodes

from balancer.actuate.k8s_holds import Holds
from balancer.actuate.k8s_preempt import Evictions
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339
from balancer.errors import ActuationError


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


def test_a_resumed_preemption_refused_again_says_only_that_the_node_stays_held(kube: FakeKube, api, clock):
    """low-1 evicted (gone at once), low-2 refused at the preemption and again at the next pass (`resume`): that
    pass evicted none and found none terminating, so the pod is told the node stays held, not that any pod it
    waits for terminates ("neither", db2fbfe7)."""
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=2)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == []
    why = sched.reasons["default/urgent"]
    assert " preemption: holding a; evicting default/low-2 failed (" in why
    assert "): a stays held, and default/low-2 is evicted at the next pass." in why
    assert " terminate" not in why


@pytest.mark.parametrize("evicted, terminating, held", [
    ([], [], "a stays held"),
    (["default/v1"], [], "a stays held while the evicted pods terminate"),
    ([], ["default/v1"], "a stays held while those found terminating already terminate"),
    (["default/v1"], ["default/v0"],
     "a stays held while the evicted pods and those found terminating already terminate"),
])
def test_the_left_said_names_what_the_node_is_held_for(evicted, terminating, held):
    done = Evictions(evicted=evicted, terminating=terminating, left=["default/v2"], error=ActuationError("HTTP 429"))
    assert Holds._left_said("a", done) == \
        f"; evicting default/v2 failed (HTTP 429): {held}, and default/v2 is evicted at the next pass"


def test_the_left_said_names_several_victims_left_as_such():
    done = Evictions(left=["default/v2", "default/v3"], error=ActuationError("HTTP 429"))
    assert Holds._left_said("a", done) == \
        "; evicting default/v2 failed (HTTP 429): a stays held, and default/v2, default/v3 are evicted at the next pass"
    assert Holds._left_said("a", Evictions(evicted=["default/v1"])) == ""   # nothing left undone
