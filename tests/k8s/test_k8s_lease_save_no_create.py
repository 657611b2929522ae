"""A save of the ledger never creates the Lease (audit of session 41). A save with no renewer thread (`run --once`,
the soak) is a try, to renew a Lease still ours whose lead ran out its renew deadline
(test_k8s_lease_save_lapsed.py), and since review r1 of session 40 a try that is a save takes no Lease over
(test_k8s_lease_save_no_takeover.py). But the try's create path (the Lease not found: deleted by kubectl, a
namespace clean-up) did not ask whether it was a save: it created the Lease with us as holder, a new term (`terms`),
our lead taken back by a save, which `save_state`'s docstring rules out ("a save's try renews a Lease we hold, never
takes one over"). A Lease deleted is held by nobody: the save is now `not_leader`, no write, the lead dropped, the
ledger kept for our next write as holder; the loop's ask (`try_acquire`) creates the Lease, a new term, our ledger
on it. So it is for a leader still within its renew deadline (the stale ledger's save is a try too) and for a
replica that never led."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_lease_save_lapsed import ME, NAME, NS, L, M, elector

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved

LEASES = r"/leases$"


def saved_then_deleted(kube: FakeKube, api, clock, advance: float) -> LeaseLeaderElector:
    """Leading, the ledger `L` saved, `advance` s with no ask, then the Lease deleted behind our back."""
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    lease.save_state(L)
    clock.advance(advance)
    kube.delete("leases", NAME, NS)
    return lease


def refused(lease: LeaseLeaderElector, text: str) -> LedgerNotSaved:
    with pytest.raises(LedgerNotSaved) as raised:
        lease.save_state(text)
    return raised.value


@pytest.mark.parametrize("advance", [11, 1], ids=["its lead lapsed", "leading"])
def test_a_save_over_a_deleted_lease_is_not_leader_and_creates_nothing(kube, api, clock, advance) -> None:
    lease = saved_then_deleted(kube, api, clock, advance)
    creates = len(kube.calls("POST", LEASES))   # the first ask's
    err = refused(lease, M)   # was: saved, the Lease created by the save
    assert err.reason == "not_leader"
    assert str(err) == (f"lease {NS}/{NAME}: safety ledger not written (not_leader); kept for the next write as "
                        "holder")
    assert len(kube.calls("POST", LEASES)) == creates and kube.get("leases", NAME, NS) is None, "nothing created"
    assert not lease.is_leader and lease.terms == 1, "the lead dropped, no new term"   # was: leading, terms 2
    assert lease.unreachable() is None, "the read answered: not cut off from the API"
    assert lease.try_acquire_or_renew() and lease.terms == 2, "the loop's ask creates it: a new term"
    created = kube.get("leases", NAME, NS)
    assert created["spec"]["holderIdentity"] == ME
    assert created["metadata"]["annotations"][LEDGER_ANNOTATION] == M, "the ledger kept, written as holder"
    assert lease.load_state() is None, "nothing inherited from a Lease we created"
    lease.save_state(M)   # written by that create: saved with no further write


def test_a_save_by_a_replica_that_never_led_creates_no_lease(kube, api, clock) -> None:
    lease = elector(api, clock)
    assert refused(lease, L).reason == "not_leader"   # was: saved, the Lease created, our first term
    assert not kube.calls("POST", LEASES) and kube.get("leases", NAME, NS) is None
    assert not lease.is_leader and lease.terms == 0

