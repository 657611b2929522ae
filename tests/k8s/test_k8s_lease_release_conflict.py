"""A 409 on the release's write for an edit of the Lease's metadata alone (session 41). Takeovers and renewals read
the Lease again after such a 409 and, its holder record unchanged, write again (`_take`); the release did not: a
label or annotation edited between its read and its write failed it, and the successor waited out a whole lease
duration. It now writes again as a renewal does (the same helper), at most `TAKEOVER_CONFLICT_RETRIES` more times,
after SIGTERM `STOPPED_SAVE_RETRIES` (SIGTERM's budget to exit: balancer/app/health.py); the Lease read again no
longer ours (holder record changed), it gives up as before. The write again carries our ledger, over an edit that
put another there, so the successor inherits ours. The leader is test_k8s_lease_exit_save.py's, its renewer ticked
by hand."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_lease_exit_save import LEASE, ME, NAME, NS, L, M, leading

from balancer.actuate.k8s_leader import LEDGER_ANNOTATION, STOPPED_SAVE_RETRIES, TAKEOVER_CONFLICT_RETRIES
from balancer.actuate.leader import LedgerNotSaved


def noted(kube: FakeKube) -> None:
    """An annotation edited on the Lease (its holder record unchanged): our write in flight gets a 409."""
    n = len(kube.calls("PUT", LEASE))
    kube.mutate("leases", NAME, NS, {"metadata": {"annotations": {"example.com/note": f"edit {n}"}}})


def ledger_edited(kube: FakeKube) -> None:
    """`noted`, the edit also putting another ledger (M) on the Lease: a write again that sent the annotations read
    again as they are would hand M on, not ours (L). The note alone left L there, so it could not tell."""
    noted(kube)
    kube.mutate("leases", NAME, NS, {"metadata": {"annotations": {LEDGER_ANNOTATION: M}}})


def on_lease(kube: FakeKube) -> tuple[str, str | None, str | None]:
    lease = kube.get("leases", NAME, NS)
    notes = lease["metadata"].get("annotations") or {}
    return lease["spec"]["holderIdentity"], notes.get(LEDGER_ANNOTATION), notes.get("example.com/note")


def releases(kube: FakeKube, before: int) -> int:
    return len(kube.calls("PUT", LEASE)) - before


@pytest.mark.parametrize("stop", [[], ["SIGTERM"]], ids=["loop", "sigterm"])
def test_an_annotation_edited_before_the_release_write_is_written_again_and_the_lease_released(kube, api, clock,
                                                                                               stop) -> None:
    elector, before = leading(api, clock, stop), len(kube.calls("PUT", LEASE))
    kube.before("PUT", LEASE, lambda: ledger_edited(kube))
    assert elector.release() is True   # was: False, the Lease left held until it expired
    assert releases(kube, before) == 2, "the 409's write, written again over the Lease read again"
    assert kube.calls("PUT", LEASE)[-1].body["metadata"]["annotations"][LEDGER_ANNOTATION] == L
    assert on_lease(kube)[:2] == ("", L), "released, our ledger handed on over the edit's M"
    assert on_lease(kube)[2] is not None, "the edit kept"
    assert not elector.is_leader and elector.last_failure is None
    elector.save_state(L)   # what the release wrote: said saved, no call
    assert releases(kube, before) == 2


@pytest.mark.parametrize(("stop", "writes"), [([], 1 + TAKEOVER_CONFLICT_RETRIES),
                                              (["SIGTERM"], 1 + STOPPED_SAVE_RETRIES)], ids=["loop", "sigterm"])
def test_metadata_edited_before_every_release_write_gives_up_after_a_few(kube, api, clock, stop, writes) -> None:
    """Each write a read before it (the first, then one after each 409). After SIGTERM the release's reads plus
    writes are what balancer/app/health.py's `LEASE_CALLS_TO_RELEASE` counts for it past the renewal in flight,
    2 * (1 + `STOPPED_SAVE_RETRIES`): retried `TAKEOVER_CONFLICT_RETRIES` times, the exit overran its budget."""
    elector, before = leading(api, clock, stop), len(kube.calls("PUT", LEASE))
    # an edit before every write the release could make, SIGTERM or not: a release past its bound meets another 409
    kube.before("PUT", LEASE, lambda: noted(kube), count=2 + TAKEOVER_CONFLICT_RETRIES)
    reads = len(kube.calls("GET", LEASE))
    assert elector.release() is False
    calls = len(kube.calls("GET", LEASE)) - reads + releases(kube, before)
    assert calls == 2 * (1 + (STOPPED_SAVE_RETRIES if stop else TAKEOVER_CONFLICT_RETRIES)), "within the budget"
    assert releases(kube, before) == writes, "bounded: after SIGTERM within its budget to exit"   # was: 1
    assert on_lease(kube)[0] == ME and not elector.is_leader
    with pytest.raises(LedgerNotSaved, match="not_leader"):   # nothing released: no ledger said saved by it
        elector.save_state(L)


def test_the_lease_read_again_no_longer_ours_gives_the_release_up(kube, api, clock) -> None:
    """Our holder record changed meanwhile (another replica took the Lease): read again, not written over."""
    elector, before = leading(api, clock, []), len(kube.calls("PUT", LEASE))
    kube.before("PUT", LEASE, lambda: kube.mutate("leases", NAME, NS, {"spec": {"holderIdentity": "replica-b"}}))
    reads = len(kube.calls("GET", LEASE))
    assert elector.release() is False
    assert len(kube.calls("GET", LEASE)) - reads == 2, "read, and read again after the 409"   # was: 1
    assert releases(kube, before) == 1 and on_lease(kube)[0] == "replica-b"


def test_a_503_on_the_release_written_again_is_no_release(kube, api, clock) -> None:
    """The write again fails (503) within the renew deadline: not released (the failed write answered the lead,
    True), and the last try's failure (None) is what `unreachable()` still says."""
    elector, before = leading(api, clock, []), len(kube.calls("PUT", LEASE))
    kube.before("PUT", LEASE, lambda: (noted(kube), kube.inject("PUT", LEASE, 503)))
    assert elector.release() is False
    assert releases(kube, before) == 2, "the 409's write, then the 503's"   # was: 1
    assert on_lease(kube)[0] == ME and elector.unreachable() is None
    with pytest.raises(LedgerNotSaved, match="not_leader"):
        elector.save_state(L)
