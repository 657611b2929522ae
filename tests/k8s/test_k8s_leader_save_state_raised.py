"""`LeaseLeaderElector.save_state` never reports saved a ledger it could not vouch for (audit a7 of session 40).

A try of the Lease that raised other than `ActuationError` (a client's ValueError on a reply it cannot read, past
`_Api`; the renewer catches every exception) left `last_failure` None, as after a try that succeeded: the next
save of the ledger already on the Lease returned with no I/O, and the loop released the moves held back for the
reservation that had just failed, to hold them back again every cycle. The raised try is now a failed one: the next
save writes again. Raised out of `save_state`, it is `LedgerNotSaved` (`error`): a bare ValueError was counted
`invalid` by the hand-over (a ledger that cannot be cut to fit).

A replica no longer leading returned from a save of the text of its last write with no I/O, though its last try had
failed or another replica had taken the Lease since: `not_leader` now, as `InMemoryLeaderElector` says."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved
from balancer.errors import TemporaryActuationError
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
NAME, NS = "gputide-controller", "gputide"
LEASE = rf"/leases/{NAME}$"
L, R = SafetyLedger(evictions=(T0,)), SafetyLedger(evictions=(T0, T0 + 1))   # the ledger, and a reservation


def elector(api, clock) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, NAME, NS, "replica-a", lease_duration_s=15, renew_deadline_s=10, clock=clock)


def puts(kube: FakeKube) -> int:
    return len(kube.calls("PUT", LEASE))


def on_lease(kube: FakeKube) -> str | None:
    return (kube.get("leases", NAME, NS)["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)


def unreadable_replies(lease: LeaseLeaderElector, monkeypatch) -> None:
    """The Lease's writes answered with what the client cannot deserialize (it raises past `_Api`)."""
    def replace(*args, **kwargs):
        raise ValueError("Invalid value for `holder_identity`, must not be `None`")

    monkeypatch.setattr(lease.api.coordination, "replace_namespaced_lease", replace)


def test_a_save_whose_write_raised_is_not_saved_and_the_next_save_writes_again(kube, api, clock,
                                                                                monkeypatch) -> None:
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    registry = CollectorRegistry()
    handover = LedgerHandover(lease, registry)
    handover.changed(L)
    assert not handover.unsaved and on_lease(kube) == L.to_json()
    unreadable_replies(lease, monkeypatch)
    with pytest.raises(LedgerNotSaved) as raised:   # was: a bare ValueError, counted `invalid` by the hand-over
        lease.save_state(R.to_json())
    assert raised.value.reason == "error" and isinstance(raised.value.__cause__, ValueError)
    assert isinstance(lease.last_failure, TemporaryActuationError)   # was: None, as after a try that succeeded
    handover.changed(R)   # the reservation, not saved
    assert handover.unsaved and lease.is_leader   # within the renew deadline
    handover.hand_on(L)   # the next cycle's start: the ledger already on the Lease, the write still raising
    assert handover.unsaved, "was: saved with no I/O, the held-back moves released"
    assert registry.get_sample_value("gputide_ledger_write_failures_total", {"reason": "error"}) == 2
    assert registry.get_sample_value("gputide_ledger_write_failures_total", {"reason": "invalid"}) == 0
    monkeypatch.undo()   # replies read again: written, saved
    before = puts(kube)
    handover.hand_on(L)
    assert not handover.unsaved and puts(kube) == before + 1 and lease.last_failure is None


def test_a_renewal_that_raised_makes_the_next_save_of_the_ledger_on_the_lease_write(kube, api, clock,
                                                                                   monkeypatch) -> None:
    lease = elector(api, clock)
    lease.start(thread=False)
    lease.save_state(L.to_json())
    unreadable_replies(lease, monkeypatch)
    clock.advance(2.5)
    assert lease.renew() is False and lease.is_leader   # the renewer logs it and goes on
    assert lease.last_failure is not None
    with pytest.raises(LedgerNotSaved, match="ValueError"):   # was: returned, no I/O
        lease.save_state(L.to_json())
    monkeypatch.undo()
    before = puts(kube)
    lease.save_state(L.to_json())
    assert puts(kube) == before + 1


def test_a_save_after_the_lead_ended_in_failed_renewals_is_not_leader(kube, api, clock) -> None:
    """The renewer's renewals failed to the deadline: no try (without a renewer the save is the try:
    test_k8s_lease_save_lapsed.py)."""
    lease = elector(api, clock)
    lease.start(thread=False)
    lease.save_state(L.to_json())
    kube.inject(None, LEASE, 503, count=1000)   # the API server fails every Lease call
    clock.advance(5)
    assert lease.renew()   # failed, still within the renew deadline
    clock.advance(6)
    assert not lease.renew() and not lease.is_leader and lease.last_failure is not None
    before = len(kube.requests)
    with pytest.raises(LedgerNotSaved) as raised:   # was: returned, the text of its last write
        lease.save_state(L.to_json())
    assert raised.value.reason == "not_leader" and len(kube.requests) == before


def test_a_save_after_another_replica_took_the_lease_is_not_leader(kube, api, clock) -> None:
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    lease.save_state(L.to_json())
    taken = {"spec": {"holderIdentity": "replica-b", "renewTime": "2030-01-01T00:00:00.000000Z"},
             "metadata": {"annotations": {LEDGER_ANNOTATION: SafetyLedger().to_json()}}}
    kube.mutate("leases", NAME, NS, taken)
    assert not lease.try_acquire_or_renew() and lease.last_failure is None   # read: another holder's, no failure
    with pytest.raises(LedgerNotSaved) as raised:   # was: returned, though the Lease holds replica-b's ledger
        lease.save_state(L.to_json())
    assert raised.value.reason == "not_leader"
    assert on_lease(kube) == SafetyLedger().to_json()
