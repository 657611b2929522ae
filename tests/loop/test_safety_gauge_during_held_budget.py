"""gputide_eviction_budget_remaining while an unreadable inherited ledger's budget is held: the guard allows no
eviction (but reclaims) for one window, and the gauge said the whole budget was left."""

from __future__ import annotations

from test_safety_disruption_and_unreadable_ledger import POLICY, _evicted, _replica

from balancer.loop import InMemoryLease
from balancer.safety import SafetyLedger


def _gauge(rec):
    return rec.metrics.registry.get_sample_value("gputide_eviction_budget_remaining")


def test_the_gauge_shows_no_budget_while_an_unreadable_ledgers_budget_is_held():
    clock, lease = [1000.0], InMemoryLease(duration_s=15)
    a = _replica(lease, "a", clock)
    assert _evicted(a.run_once()) == 2 and _gauge(a) == 0
    lease.state = lease.state[:-2]   # the annotation cut short
    clock[0] += POLICY.safety.eviction_window_s   # a's evictions have left their window: only the hold holds now
    b = _replica(lease, "b", clock)
    b._lead(clock[0])   # taken office: the ledger did not read, the next review holds the budget
    assert _gauge(b) == 0
    assert _evicted(b.run_once()) == 0 and _gauge(b) == 0
    clock[0] += POLICY.safety.eviction_window_s - 1
    assert _evicted(b.run_once()) == 0 and _gauge(b) == 0
    clock[0] += 1   # the window from b's first review has passed
    assert b.handover.remaining_evictions(b.guard, SafetyLedger(), clock[0]) == POLICY.safety.eviction_budget
    assert _evicted(b.run_once()) == 2 and _gauge(b) == 0   # its own two, spent now
