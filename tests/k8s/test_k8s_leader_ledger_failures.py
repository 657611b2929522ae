"""A safety ledger the Lease did not take is not counted saved. `save_state` ignored what its write came to: a 500,
a 403 or a timeout left the Lease with an older ledger (or none) while the hand-over counted it saved, so after a
crash the next leader forgot the budget this one spent. Now it raises `LedgerNotSaved` with a reason, the hand-over
keeps the ledger unsaved (tried again every cycle), logs and counts the failure
(`gputide_ledger_write_failures_total{reason}`), and entries cut to fit are counted
(`gputide_ledger_entries_dropped_total`). A replica taking the Lease back no longer overwrites the ledger the holder
in between left with its own from an earlier term."""

from __future__ import annotations

import logging

import pytest
from fakeapi import FakeKube
from kubernetes import client as k8s
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_leader import (
    LEDGER_ANNOTATION,
    MAX_LEDGER_BYTES,
    TAKEOVER_CONFLICT_RETRIES,
    LeaseLeaderElector,
)
from balancer.actuate.leader import LedgerNotSaved
from balancer.ledger_fit import fit
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger

T0 = 1_700_000_000.0
LEASE_PUT = r"/leases/gputide-controller$"


def elector(api: k8s.ApiClient, clock, identity: str) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                              renew_deadline_s=10, clock=clock)


def on_lease(kube: FakeKube) -> SafetyLedger | None:
    text = (kube.get("leases", "gputide-controller", "gputide")["metadata"].get("annotations") or {}).get(
        LEDGER_ANNOTATION)
    return None if text is None else SafetyLedger.from_json(text)


def failures(registry: CollectorRegistry, reason: str) -> float | None:
    return registry.get_sample_value("gputide_ledger_write_failures_total", {"reason": reason})


@pytest.mark.parametrize(("code", "reason"), [(500, "unavailable"), (503, "unavailable"), (429, "unavailable"),
                                              (403, "refused"), (422, "refused")])
def test_a_failed_lease_write_leaves_the_ledger_unsaved_logged_counted_and_tried_again(
        kube: FakeKube, api, clock, caplog, code, reason) -> None:
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    registry = CollectorRegistry()
    handover = LedgerHandover(a, registry)
    first, second = SafetyLedger(evictions=(T0,)), SafetyLedger(evictions=(T0, T0 + 1))
    handover.changed(first)
    assert not handover.unsaved and on_lease(kube) == first
    assert failures(registry, reason) == 0                     # every reason starts at 0
    kube.inject("PUT", LEASE_PUT, code)
    with caplog.at_level(logging.WARNING, logger="balancer.ledger_handover"):
        handover.changed(second)
    assert handover.unsaved                                    # was: counted saved
    assert on_lease(kube) == first                             # the Lease has the older one
    assert failures(registry, reason) == 1
    assert f"safety ledger not saved for a successor ({reason}" in caplog.text
    assert a.is_leader                                         # one failed write does not end the lead
    handover.hand_on(second)                                   # the next cycle's try
    assert not handover.unsaved and on_lease(kube) == second
    assert failures(registry, reason) == 1


def test_a_conflict_is_not_counted_saved_and_the_ledger_goes_at_the_next_try(kube, api, clock) -> None:
    """The writes again run out, the Lease never read changed: the lead runs to its renew deadline (as after any
    failed write), so the next save tries again (was: dropped at once, `not_leader` until a renewal)."""
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    a.save_state(SafetyLedger(evictions=(T0,)).to_json())
    kube.inject("PUT", LEASE_PUT, 409, count=1 + TAKEOVER_CONFLICT_RETRIES)   # its writes again after each too
    with pytest.raises(LedgerNotSaved) as raised:
        a.save_state(SafetyLedger(evictions=(T0, T0 + 1)).to_json())
    assert raised.value.reason == "conflict" and a.is_leader
    assert on_lease(kube) == SafetyLedger(evictions=(T0,))
    a.save_state(SafetyLedger(evictions=(T0, T0 + 1)).to_json())
    assert on_lease(kube) == SafetyLedger(evictions=(T0, T0 + 1)) and a.terms == 1


def test_a_replica_that_does_not_hold_the_lease_has_not_saved_its_ledger(kube, api, clock) -> None:
    a, b = elector(api, clock, "replica-a"), elector(api, clock, "replica-b")
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    with pytest.raises(LedgerNotSaved) as raised:
        b.save_state(SafetyLedger(evictions=(T0,)).to_json())
    assert raised.value.reason == "not_leader"
    assert on_lease(kube) is None


def test_a_renewal_that_carried_the_ledger_saved_it(kube: FakeKube, api, clock) -> None:
    """The renewer writes the Lease with our latest ledger: once it has, the hand-over's retry needs no write."""
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    handover = LedgerHandover(a)
    ledger = SafetyLedger(evictions=(T0,))
    kube.inject("PUT", LEASE_PUT, 500)
    handover.changed(ledger)
    assert handover.unsaved and on_lease(kube) is None
    clock.advance(2.5)
    assert a.renew()                                           # the renewer's next tick
    assert on_lease(kube) == ledger
    puts = len(kube.calls("PUT", LEASE_PUT))
    handover.hand_on(ledger)
    assert not handover.unsaved and len(kube.calls("PUT", LEASE_PUT)) == puts


def test_taking_the_lease_back_keeps_the_ledger_the_holder_in_between_left(kube: FakeKube, api, clock) -> None:
    """a leads and saves; its renewals stop, b takes over, evicts and saves, and gives the Lease up; a takes it back.
    a's renewal wrote its own ledger from its first term over b's: a crash of a then forgot b's evictions."""
    a, b = elector(api, clock, "replica-a"), elector(api, clock, "replica-b")
    assert a.try_acquire_or_renew()
    mine = SafetyLedger(evictions=(T0,))
    a.save_state(mine.to_json())
    assert not b.try_acquire_or_renew()                        # b sees a's record ...
    clock.advance(16)                                          # ... unchanged for a lease duration
    assert b.try_acquire_or_renew()
    handover_b = LedgerHandover(b)
    theirs = handover_b.inherit(SafetyLedger(evictions=(T0 + 10, T0 + 11)))
    assert handover_b.unsaved                                  # b's own evictions are not on the Lease yet
    handover_b.hand_on(theirs)
    assert b.release()
    clock.advance(0.1)
    assert a.try_acquire_or_renew()
    assert on_lease(kube) == theirs                            # was: a's own, without b's two evictions
    handover_a = LedgerHandover(a)
    merged = handover_a.inherit(mine)
    assert merged == theirs and not handover_a.unsaved         # b's holds all of a's: nothing to add


def test_entries_cut_to_fit_the_annotation_are_counted(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    registry = CollectorRegistry()
    handover = LedgerHandover(a, registry)
    caps = {f"set_power_limit:GPU-{i:036d}": T0 + i / 20 for i in range(3000)}
    full = SafetyLedger(last_action=caps, evictions=(T0,))
    _, dropped = fit(full.to_json(), MAX_LEDGER_BYTES)
    assert dropped > 0
    handover.changed(full)
    assert not handover.unsaved
    assert registry.get_sample_value("gputide_ledger_entries_dropped_total") == dropped
    handover.changed(SafetyLedger(evictions=(T0,)))            # one that fits adds nothing
    assert registry.get_sample_value("gputide_ledger_entries_dropped_total") == dropped


def test_a_ledger_that_cannot_be_cut_is_counted_invalid(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    assert a.try_acquire_or_renew()
    registry = CollectorRegistry()
    handover = LedgerHandover(a, registry)

    class Unreadable(SafetyLedger):
        def to_json(self) -> str:
            return "x" * (MAX_LEDGER_BYTES + 1)

    handover.changed(Unreadable())
    assert handover.unsaved and failures(registry, "invalid") == 1


def test_replicas_sharing_a_registry_share_the_counters(kube: FakeKube, api, clock) -> None:
    registry = CollectorRegistry()
    a, b = LedgerHandover(elector(api, clock, "a"), registry), LedgerHandover(elector(api, clock, "b"), registry)
    assert a.metrics is b.metrics                              # registering twice on one registry raised
