"""A preemption's hold whose saved priority is not an integer (`10.0`, `true`: written by an older or a foreign
writer) counts against every pod (`k8s_filters.counts_against`) until a pass that carries it on writes the pod's
priority (`k8s_preempt.ranked`). That write compared the hold by equality, where `10.0 == 10` and `True == 1`: the
corrected hold was taken for the one saved and never written, and the hold stayed unranked, held against more
important pods, until its next real change. Written once, a hold that says its priority is not written again.
Against the fake API server."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, most_free, pending, reservations

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


def preempting(kube: FakeKube, api, clock, priority: int) -> SecondaryScheduler:
    """As `test_k8s_preemption_room_taken.half_preempted`, the preemptor `mid` of `priority`: mid holds a (8 GPUs)
    after evicting low-1 (0), low-2's (0) eviction refused, 4 GPUs free on a; b full with low-3, of mid's priority
    (no victim for mid, one for a more important pod)."""
    for obj in (pdb("guard", "default", {"tier": "batch"}, 1), node("a", 8),
                bound("low-1", "a", 4, 0, labels={"tier": "batch"}), bound("low-2", "a", 4, 0), node("b", 8),
                bound("low-3", "b", 8, priority), pending("mid", 8, priority)):
        kube.add(obj)
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=1)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [("default/low-1", "a")]
    refused(kube, clock)
    assert sched.schedule_once() == {"default/mid": None}   # low-1 gone: the hold no longer names it
    assert reservations(kube, "a")["default/mid"]["priority"] == priority
    return sched


def refused(kube: FakeKube, clock) -> None:
    """low-2's eviction refused again at the next pass, 5 s on: one that carries mid's preemption on and has
    nothing else to note."""
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=1)
    clock.advance(5)


def saved_as(kube: FakeKube, value) -> None:
    """mid's hold on a as a writer that saved its priority as `value` left it."""
    holds = reservations(kube, "a")
    holds["default/mid"]["priority"] = value
    kube.mutate("nodes", "a", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(holds)}}})


@pytest.mark.parametrize(("priority", "value"), [(10, 10.0), (1, True)])
def test_a_hold_saying_its_priority_in_another_type_is_written_as_an_integer_once(kube: FakeKube, api, clock,
                                                                                  priority, value):
    sched = preempting(kube, api, clock, priority)
    saved_as(kube, value)
    refused(kube, clock)
    patches = len(kube.calls("PATCH", r"/nodes/a$"))
    assert sched.schedule_once() == {"default/mid": None}
    saved = reservations(kube, "a")["default/mid"]["priority"]
    assert saved == priority and type(saved) is int
    assert len(kube.calls("PATCH", r"/nodes/a$")) == patches + 1
    refused(kube, clock)
    assert sched.schedule_once() == {"default/mid": None}
    assert len(kube.calls("PATCH", r"/nodes/a$")) == patches + 1   # said as an integer already: not written again
    kube.add(pending("top", 4, 50))
    clock.advance(5)
    # mid's hold ranks below top: top takes a's 4 free GPUs rather than evicting low-3 on b
    assert sched.schedule_once() == {"default/top": "a", "default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "low-3", "default") is not None
