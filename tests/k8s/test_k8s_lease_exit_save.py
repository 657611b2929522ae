"""The writes of a Lease we hold on the way out: the exit's ledger save and the release (audit a10 of session 40).

Since 9d840831 SIGTERM (`stop_when`) ended every try at its 409, and a try so cut short dropped the lead: a renewal in
flight, or the exit's save of the ledger, answered 409 for an annotation edited on our own Lease lost it; the save
was then refused (`not_leader`: `run --once` exits 4, the successor inherits an older ledger) and `release()` made no
call, so the successor waited for the Lease to expire. A release begun while a renewal's 409 was read again did the
same (older). SIGTERM now cuts short takeovers alone at their 409; a renewal ends there too but keeps the lead (the
save and release that follow read the Lease afresh), and the save writes again once more (`STOPPED_SAVE_RETRIES`),
so SIGTERM's budget to exit stays a few calls. The renewer is ticked by hand (`start(thread=False)`)."""

from __future__ import annotations

import threading

import pytest
from fakeapi import FakeKube

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, STOPPED_SAVE_RETRIES, LeaseLeaderElector
from balancer.actuate.leader import LedgerNotSaved
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
NAME, NS, ME = "gputide-controller", "gputide", "replica-a"
LEASE = rf"/leases/{NAME}$"
L, M = SafetyLedger(evictions=(T0,)).to_json(), SafetyLedger(evictions=(T0, T0 + 60)).to_json()


def leading(api, clock, stop: list[str]) -> LeaseLeaderElector:
    """The leader with its renewer, told of SIGTERM (`stop`), the ledger `L` on its Lease."""
    elector = LeaseLeaderElector(api, NAME, NS, ME, lease_duration_s=15, renew_deadline_s=10, clock=clock)
    elector.stop_when(lambda: bool(stop))
    elector.start(thread=False)
    elector.save_state(L)
    return elector


def noted(kube: FakeKube, n: int = 1):
    """An annotation edited on the Lease (its holder record unchanged): our write in flight gets a 409."""
    return lambda: kube.mutate("leases", NAME, NS, {"metadata": {"annotations": {"example.com/note": f"edit {n}"}}})


def on_lease(kube: FakeKube) -> tuple[str, str | None]:
    lease = kube.get("leases", NAME, NS)
    return lease["spec"]["holderIdentity"], (lease["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)


def calls(kube: FakeKube) -> int:
    return len(kube.calls("GET", LEASE)) + len(kube.calls("PUT", LEASE))


def test_after_sigterm_a_409_on_the_exit_save_is_written_again_and_the_lease_released(kube, api, clock) -> None:
    stop: list[str] = []
    elector = leading(api, clock, stop)
    stop.append("SIGTERM")
    kube.before("PUT", LEASE, noted(kube))
    before = calls(kube)
    elector.save_state(M)   # was: LedgerNotSaved('conflict'), the lead dropped
    assert calls(kube) - before == 4, "read, write (409), read again, write again"
    assert elector.is_leader and on_lease(kube) == (ME, M)
    assert elector.release() is True   # was: False, no call
    assert on_lease(kube) == ("", M), "released, the ledger handed on"


def test_after_sigterm_the_exit_save_writes_again_only_once(kube, api, clock) -> None:
    """Bounded: a second 409 ends it (its read and write within SIGTERM's budget), the lead kept for the release,
    which reads the Lease afresh and hands the ledger on with it."""
    stop: list[str] = []
    elector = leading(api, clock, stop)
    stop.append("SIGTERM")
    kube.before("PUT", LEASE, lambda: noted(kube, len(kube.calls("PUT", LEASE)))(), count=1 + STOPPED_SAVE_RETRIES)
    before = calls(kube)
    with pytest.raises(LedgerNotSaved) as raised:
        elector.save_state(M)
    assert raised.value.reason == "conflict"
    assert calls(kube) - before == 2 * (1 + STOPPED_SAVE_RETRIES), "one write again, no more"
    assert elector.is_leader and elector.release() is True
    assert on_lease(kube) == ("", M)


def test_after_sigterm_a_renewals_409_keeps_the_lead_for_the_exit_save_and_release(kube, api, clock) -> None:
    stop: list[str] = []
    elector = leading(api, clock, stop)

    def noted_and_sigterm() -> None:
        noted(kube)()
        stop.append("SIGTERM")

    kube.before("PUT", LEASE, noted_and_sigterm)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False and elector.is_leader   # was: not leader
    elector.save_state(M)   # was: LedgerNotSaved('not_leader')
    assert elector.release() is True   # was: False, no call: the Lease left to expire
    assert on_lease(kube) == ("", M)


def test_a_release_begun_while_a_renewal_gets_a_409_still_releases(kube, api, clock) -> None:
    """`release()` from the loop's thread while the renewer's write is in flight: it stops the renewer (the try
    ends at its 409), then reads the Lease and, still ours, clears the holder."""
    elector, released = leading(api, clock, []), []
    releasing = threading.Thread(target=lambda: released.append(elector.release()))

    def noted_and_released() -> None:
        noted(kube)()
        releasing.start()
        elector._halt.wait()   # release() has begun: it waits for the renewal's lock

    kube.before("PUT", LEASE, noted_and_released)
    clock.advance(elector.retry_period_s)
    assert elector.renew() is False
    releasing.join()
    assert released == [True], "was: [False], the renewal's 409 dropped the lead and release() made no call"
    assert on_lease(kube) == ("", L)
