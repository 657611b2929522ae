"""A save of the ledger after the lead merely ran out its renew deadline, with no renewer thread (audit a10 of
session 40). `run --once` and the soak keep the Lease by asking the elector before each action (`try_acquire`), so a
cycle longer than the renew deadline let the lead lapse between two asks, the Lease still ours. fc8a7f98 made every
save by a replica not leading `not_leader`, with no call: the exit's save (`saved_before_exit`) of a ledger the Lease
held failed, and `run --once` exited saying its successor inherits an older ledger. Without a renewer the save is
the try now: it renews a Lease still ours, and only one another replica holds is `not_leader`, as
`InMemoryLeaderElector` refuses. With a renewer (`start()`) a lapsed lead is its renewals failed to the deadline:
still `not_leader`, no call (test_k8s_leader_save_state_raised.py)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
NAME, NS, ME = "gputide-controller", "gputide", "replica-a"
LEASE = rf"/leases/{NAME}$"
L, M = SafetyLedger(evictions=(T0,)).to_json(), SafetyLedger(evictions=(T0, T0 + 60)).to_json()


def elector(api, clock) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)


def lapsed(api, clock) -> LeaseLeaderElector:
    """Leading, the ledger `L` saved, then a cycle past the renew deadline with no ask: the Lease still ours."""
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    lease.save_state(L)
    clock.advance(11)
    assert not lease.is_leader
    return lease


def on_lease(kube: FakeKube) -> tuple[str, str | None]:
    lease = kube.get("leases", NAME, NS)
    return lease["spec"]["holderIdentity"], (lease["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)


def calls(kube: FakeKube) -> tuple[int, int]:
    return len(kube.calls("GET", LEASE)), len(kube.calls("PUT", LEASE))


@pytest.mark.parametrize("text", [L, M], ids=["the ledger on the Lease", "a new ledger"])
def test_a_save_after_the_lead_ran_out_its_deadline_renews_the_lease_still_ours(kube, api, clock, text) -> None:
    lease = lapsed(api, clock)
    before = calls(kube)
    lease.save_state(text)   # was: LedgerNotSaved('not_leader'), no call
    assert lease.is_leader and lease.terms == 1, "renewed, the same term"
    assert calls(kube) == (before[0] + 1, before[1] + 1), "one try: a read and the write"
    assert on_lease(kube) == (ME, text)


def test_run_once_exit_save_after_a_long_cycle_is_saved(kube, api, clock) -> None:
    """The hand-over's saves of what the last action spent (`changed`, then `saved_before_exit`), after an action
    that ran past the renew deadline with no ask since."""
    lease = elector(api, clock)
    assert lease.try_acquire_or_renew()
    handover = LedgerHandover(lease, CollectorRegistry())
    handover.changed(SafetyLedger.from_json(L))
    assert not handover.unsaved
    clock.advance(11)   # the action ran long
    handover.changed(SafetyLedger.from_json(M))   # what it spent
    assert handover.saved_before_exit(SafetyLedger.from_json(M))   # was: False, exit 4 (EXIT_LEDGER_NOT_SAVED)
    assert on_lease(kube) == (ME, M)


def test_a_save_after_the_lead_lapsed_and_another_replica_took_the_lease_is_not_leader(kube, api, clock) -> None:
    lease = lapsed(api, clock)
    theirs = SafetyLedger().to_json()
    taken = {"spec": {"holderIdentity": "replica-b", "renewTime": "2030-01-01T00:00:00.000000Z"},
             "metadata": {"annotations": {LEDGER_ANNOTATION: theirs}}}
    kube.mutate("leases", NAME, NS, taken)
    before = calls(kube)
    with pytest.raises(LedgerNotSaved) as raised:
        lease.save_state(L)
    assert raised.value.reason == "not_leader" and not lease.is_leader
    assert calls(kube) == (before[0] + 1, before[1]), "read: another holder's, no write"
    assert on_lease(kube) == ("replica-b", theirs)


def test_a_save_after_the_lead_lapsed_with_the_api_failing_says_why(kube, api, clock) -> None:
    lease = lapsed(api, clock)
    kube.inject(None, LEASE, 503, count=1000)
    with pytest.raises(LedgerNotSaved) as raised:
        lease.save_state(L)
    assert raised.value.reason == "unavailable" and not lease.is_leader

