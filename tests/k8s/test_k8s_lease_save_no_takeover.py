"""A save of the ledger never takes the Lease over (review r1 of session 40's Lease commits). Since 2ae5a7f7 a save
with no renewer thread (`run --once`, the soak) tries the Lease even when not leading, to renew a Lease still ours
whose lead ran out its renew deadline; but the try was a whole try: a Lease released meanwhile (holder "") was
taken over by the save, written with us as holder, leaseTransitions + 1, a new term (`terms`), our ledger dropped for
the one found, while `save_state` raised `not_leader` and said the ledger kept, `is_leader` True. A save now renews
a Lease we hold and is `not_leader` otherwise, with no write, as `InMemoryLeaderElector` refuses a Lease it does not
hold; the loop's ask (`try_acquire`) takes it over."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
NAME, NS, ME = "gputide-controller", "gputide", "replica-a"
LEASE = rf"/leases/{NAME}$"
L, M = SafetyLedger(evictions=(T0,)).to_json(), SafetyLedger(evictions=(T0, T0 + 60)).to_json()
THEIRS = SafetyLedger().to_json()


def released(kube: FakeKube) -> None:
    """Our Lease let go (holder "") with another ledger on it, as a replica's release leaves it."""
    kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": "", "leaseTransitions": 5},
                                     "metadata": {"annotations": {LEDGER_ANNOTATION: THEIRS}}})


def on_lease(kube: FakeKube) -> tuple[str, int, str | None]:
    lease = kube.get("leases", NAME, NS)
    return (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"],
            (lease["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION))


@pytest.mark.parametrize("lapsed", [True, False], ids=["its lead lapsed", "leading"])
def test_a_save_over_a_released_lease_is_not_leader_and_writes_nothing(kube, api, clock, lapsed) -> None:
    lease = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    assert lease.try_acquire_or_renew()
    lease.save_state(L)
    clock.advance(11 if lapsed else 1)
    released(kube)
    puts = len(kube.calls("PUT", LEASE))
    with pytest.raises(LedgerNotSaved) as raised:
        lease.save_state(M)
    assert raised.value.reason == "not_leader"
    assert len(kube.calls("PUT", LEASE)) == puts, "no write"   # was: taken over
    assert on_lease(kube) == ("", 5, THEIRS)   # was: (ME, 6, THEIRS)
    assert not lease.is_leader and lease.terms == 1   # was: leading, a second term
    assert lease.try_acquire_or_renew() and lease.terms == 2, "the loop's ask takes it over"
    assert lease.load_state() == THEIRS
