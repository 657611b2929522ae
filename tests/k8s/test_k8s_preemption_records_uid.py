"""The pass-over after a give-back (a victim whose evictions went unanswered `UNANSWERED_ASKS` times is not preempted
by that pod there for `reserve_s`) is for the pending pod of one uid: a pod deleted and made again under its name (a
StatefulSet's, a Job's retry with a fixed name) is another pod, whose preemption weighs every victim afresh. Before,
it was kept by the pod's name: the new pod inherited the pass-over and waited up to `reserve_s` with its preemption
never tried. So is it for the victim of one uid: a victim made again under its name was never asked. Against the
fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import bound, pending, reservations
from test_k8s_preemption_unanswered import unanswered
from test_k8s_preemption_unanswered_again import fits_beside, placed

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS


def given_back(kube: FakeKube, api, clock):
    """urgent's evictions of p got no answer `UNANSWERED_ASKS` times while p ran on: a given back, fits bound there.
    The scheduler, and the tries of p's eviction."""
    sched = fits_beside(kube, api, clock)
    tries = unanswered(sched, "p", lambda: None)
    for _ in range(UNANSWERED_ASKS + 1):
        sched.schedule_once()
        clock.advance(5)
    assert reservations(kube, "a") == {} and placed(kube, "fits") == "a"
    assert len(tries) == 4 * UNANSWERED_ASKS
    return sched, tries


def test_a_pod_made_again_under_its_name_is_not_passed_over(kube: FakeKube, api, clock):
    sched, tries = given_back(kube, api, clock)
    old = kube.get("pods", "urgent", "default")["metadata"]["uid"]
    kube.delete("pods", "urgent", "default")
    kube.add(pending("urgent", 8, 50))                                 # its name again, another uid
    assert kube.get("pods", "urgent", "default")["metadata"]["uid"] != old
    sched.schedule_once()
    assert "default/urgent" in reservations(kube, "a")                 # preempts there: p asked again
    assert len(tries) == 4 * UNANSWERED_ASKS + 4


def test_the_same_pod_stays_passed_over(kube: FakeKube, api, clock):
    sched, tries = given_back(kube, api, clock)
    sched.schedule_once()
    assert reservations(kube, "a") == {} and len(tries) == 4 * UNANSWERED_ASKS


def test_a_victim_made_again_under_its_name_is_not_passed_over(kube: FakeKube, api, clock):
    """p deleted and made again on a by its StatefulSet (another uid) after the give-back: a pod never asked, it is
    preempted at once, and the reason no longer says it was passed over "after 3 unanswered evictions"."""
    sched, tries = given_back(kube, api, clock)
    old = kube.get("pods", "p", "default")["metadata"]["uid"]
    kube.delete("pods", "p", "default")
    kube.add(bound("p", "a", 4, 1))                                    # its name again, another uid, on a
    assert kube.get("pods", "p", "default")["metadata"]["uid"] != old
    clock.advance(1)
    sched.schedule_once()
    assert "default/urgent" in reservations(kube, "a")                 # preempts there: the new p asked
    assert len(tries) == 4 * UNANSWERED_ASKS + 4
    assert "passed over" not in sched.reasons["default/urgent"]


def test_an_assumed_pod_carries_its_uid(kube: FakeKube, api, clock):
    """A pod this scheduler has just bound is counted on its node before the caches show it (assumed): with its
    uid, so a victim made again under its name and bound here by gputide is not taken for the one passed over."""
    sched, _ = given_back(kube, api, clock)
    assumed = sched._assumed.get("default/fits")
    assert assumed is not None and assumed.usage.uid
    assert assumed.usage.uid == kube.get("pods", "fits", "default")["metadata"]["uid"]
