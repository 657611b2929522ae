"""A victim found terminating already is waited for, not evicted again, and so neither counted in `preempted`
(`gputide_scheduler_preempted_pods_total`, pods evicted through the Eviction API) nor said evicted: it was both,
by a replica that made no eviction. (a) The replica that evicted low-1 lost the Lease before writing it down; the
next leader, carrying the preemption on, found low-1 terminating, counted it and said "evicted default/low-1,
default/low-2". (b) The victim chosen was being deleted by its owner: no eviction made, yet it was counted and the
pod told "preempting 1 pod(s) ... default/low-1". Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import bound, events, full, most_free, pending, reservations  # noqa: F401 (full: a fixture)
from test_k8s_preemption_lease import one_node

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def test_a_victim_evicted_by_a_replica_that_lost_the_lease_is_not_counted_or_said_evicted_by_the_next(
        kube: FakeKube, api, clock, caplog):
    one_node(kube)
    lease = {"a": True}
    kube.before("POST", r"/eviction$", lambda: lease.update(a=False))   # lost while low-1 is evicted
    a = SecondaryScheduler(api, "gputide", most_free, clock=clock, leading=lambda: lease["a"])
    a.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-1", "default/low-2"]
    terminating = bound("low-1", "a", 4, 1, labels={"tier": "batch"})
    terminating["metadata"]["deletionTimestamp"] = rfc3339(clock.now + 30)
    kube.add(terminating)                                              # as a kubelet keeps it while it terminates

    b = SecondaryScheduler(api, "gputide", most_free, clock=clock)     # the next leader
    caplog.set_level("INFO", logger="balancer.actuate.k8s_holds")
    clock.advance(5)
    assert b.schedule_once() == {"default/urgent": None}
    assert len(kube.calls("POST", r"/pods/low-1/eviction$")) == 1      # terminating already: not evicted again
    assert b.preempted == [("default/low-2", "a")]                     # the one eviction it made
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == ["default/low-1", "default/low-2"]       # waited for, both
    why = b.reasons["default/urgent"]
    assert "evicted default/low-1" not in why and "evicted default/low-1" not in caplog.text
    assert ("preemption: evicted default/low-2 on a (waiting for default/low-1, terminating already) while "
            "default/low-1, default/low-2 terminate(s)") in why


def test_a_victim_its_owner_deletes_is_waited_for_not_counted_or_said_preempted(full: FakeKube, api,  # noqa: F811
                                                                                clock):
    """low-1, the victim chosen on a, is being deleted by its owner when the preemption reads it: no eviction is
    made, a is held for the pod while low-1 terminates."""
    full.add(pending("urgent", 4, 50))
    full.before("GET", r"/namespaces/default/pods/low-1$", lambda: full.mutate(
        "pods", "low-1", "default", {"metadata": {"deletionTimestamp": rfc3339(clock.now + 30)}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert not full.calls("POST", r"/eviction$") and not events(full, "low-1")
    assert sched.preempted == []                                       # nothing evicted: nothing counted
    held = reservations(full, "a")["default/urgent"]
    assert held["evicted"] == ["default/low-1"] and "victims" not in held   # waited for all the same
    why = sched.reasons["default/urgent"]
    assert "preempting" not in why
    assert (f"preemption: no pod evicted on a, waiting for default/low-1, terminating already: a held for it until "
            f"{held['expires']}.") in why
