"""A pass that loses the Lease in the turn of a pod whose preemption left a victim in doubt (its eviction unanswered,
not yet read): the victim is not read (nothing more once halted) and keeps its doubt, and the pass says why it
stopped, the Lease lost, not "cannot read <victim> to tell whether its unanswered eviction landed" (`unread_error`,
for a read that failed: none was made). Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_unanswered import first_pass


def test_a_doubted_victim_left_unread_as_the_lease_is_lost_is_said_so(kube: FakeKube, api, clock):
    lease = {"held": True}
    sched, tries = first_pass(kube, api, clock, lambda: None, leading=lambda: lease["held"])
    sched.progress = lambda what: lease.update(held=what != "pod default/urgent")   # lost as urgent's turn begins
    since = len(kube.requests)
    clock.advance(5)
    sched.schedule_once()
    assert not [r for r in kube.requests[since:] if r.path.split("?")[0].endswith("/pods/low-2")]   # not read
    assert set(sched.holds.preemptor._unsure.get(("default/urgent", "a"), {})) == {"default/low-2"}   # kept
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2", "default/low-3"]
    assert len(tries) == 4
    said = sched.reasons.get("default/urgent", "")
    assert "stopping, or the Lease is lost" in said and "cannot read" not in said
