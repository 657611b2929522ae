"""A hot node keeps gputide's hot taint for as long as it stays hot. The taint carries an expiry
(`gputide.io/hot-until`, `HOT_TAINT_TTL_S` after it was written) that housekeeping enforces, the safety net for a
dead controller; nothing renewed it, so a node hot for longer than the TTL lost its taint and took new pods for a
cycle until the planner tainted it again. Now the planner renews the taint of a node still hot once its expiry is
within `RENEW_WITHIN_S` (half the TTL), and the safety guard lets a renewal through without spending a budget."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import snapshot, workload
from scripted_fleet import COOL, FL, HOT, HOT_TAINT, M, N

from balancer.actions import HOT_TAINT_TTL_S
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.model import ClusterSnapshot, TaintNode
from balancer.plan.planner import RENEW_WITHIN_S, PlannerState, acknowledge, plan
from balancer.safety import EMERGENCY_LABEL, SafetyGuard, SafetyLedger

INTERVAL_S = 60.0


class ExpiringTaint:
    """n0 as the Kubernetes actuator leaves it: the hot taint with its expiry, removed by housekeeping once the expiry
    has passed; GPU 0 (on n0) at the temperature the test sets."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now, self.temp, self.until = now, COOL, None   # until: None = no taint

    def snapshot(self, hot_until: float | None = ...) -> ClusterSnapshot:
        until = self.until if hot_until is ... else hot_until
        nodes = [replace(FL.nodes[0], taints=(HOT_TAINT,), hot_until=until), *FL.nodes[1:]] \
            if self.until is not None else FL.nodes
        return snapshot(FL, workloads=[(workload("svc-0"), (0,))], temps={0: self.temp}, nodes=nodes, time=self.now)

    def housekeeping(self) -> None:
        if self.until is not None and self.until <= self.now:
            self.until = None

    def apply(self, actions) -> None:
        for a in actions:
            if isinstance(a, TaintNode) and a.node == "n0":
                self.until = None if a.remove else self.now + HOT_TAINT_TTL_S


def run(fleet: ExpiringTaint, temps: list[float], state: PlannerState):
    """One cycle per temperature, `INTERVAL_S` apart: housekeeping, a reading, a plan applied and acknowledged.
    Returns the state and, per cycle, (whether the reading showed n0 tainted, n0's taint actions)."""
    seen = []
    for t in temps:
        fleet.temp = t
        fleet.housekeeping()
        snap = fleet.snapshot()
        p, state = plan(snap, None, BalancerPolicy(), state)
        fleet.apply(p.actions)
        state = acknowledge(state, p.actions, snap)
        seen.append((HOT_TAINT in snap.nodes[0].taints,
                     [a for a in p.actions if isinstance(a, TaintNode) and a.node == "n0"]))
        fleet.now += INTERVAL_S
    return state, seen


def hot_and_tainted() -> tuple[ExpiringTaint, PlannerState]:
    """A controller that has seen GPU 0 hot for `hotReadings` readings and tainted n0."""
    fleet = ExpiringTaint()
    state, seen = run(fleet, [HOT] * N, PlannerState())
    assert [[a.renew for a in acts] for _, acts in seen][-1] == [False] and fleet.until is not None
    return fleet, state


def test_a_node_hot_for_40_minutes_keeps_its_taint_at_every_reading():
    fleet, state = hot_and_tainted()
    cycles = int(40 * 60 / INTERVAL_S)
    _, seen = run(fleet, [HOT] * cycles, state)
    shown = [snap_tainted for snap_tainted, _ in seen]
    assert all(shown), f"readings without the taint: {[i for i, s in enumerate(shown) if not s]}"
    actions = [a for _, acts in seen for a in acts]
    assert actions and all(a.renew and not a.remove for a in actions)   # renewed, never lapsed and tainted again
    # one renewal each time the expiry came within half the TTL: every 8 readings of 60 s (480 s)
    period = int(-(-(HOT_TAINT_TTL_S - RENEW_WITHIN_S) // INTERVAL_S))
    assert len(actions) == cycles // period


@pytest.mark.parametrize("hot_for", [0, 5, 12], ids=lambda k: f"cooled {k} readings after the taint")
def test_a_node_that_cooled_is_opened_again_and_never_renewed_after(hot_for):
    """The hysteresis is today's: the node counts hot (and may be renewed) until it has read cool `coolReadings`
    times; then its taint is removed, and nothing renews or restores it."""
    fleet, state = hot_and_tainted()
    state, _ = run(fleet, [HOT] * hot_for, state)
    _, cooled = run(fleet, [COOL] * (M + 20), state)
    acts = [a for _, a in cooled]
    assert [(a.remove, a.renew) for a in acts[M - 1]] == [(True, False)]
    assert all(a.renew for act in acts[:M - 1] for a in act)
    assert fleet.until is None and not any(acts[M:])


def test_a_dead_controllers_taint_still_expires():
    """The controller stops after 20 hot minutes; housekeeping (a successor's `recover`) removes the taint once the
    expiry of its last renewal has passed, and not before."""
    fleet, state = hot_and_tainted()
    run(fleet, [HOT] * 20, state)
    died, until = fleet.now, fleet.until
    assert died < until <= died + HOT_TAINT_TTL_S
    fleet.now = until - 1
    fleet.housekeeping()
    assert fleet.until is not None
    fleet.now = until
    fleet.housekeeping()
    assert fleet.until is None


def renewal_cases():
    ttl, half = HOT_TAINT_TTL_S, RENEW_WITHIN_S
    return {
        "expiry within half the TTL: renewed": (half - 1, True),
        "expiry exactly half the TTL away: renewed": (half, True),
        "expiry further away: left alone": (half + 1, False),
        "fresh taint (a full TTL away): left alone": (ttl, False),
        "expiry passed but not yet removed: renewed (the taint comes back with a fresh one)": (-5.0, True),
        "no expiry recorded (a taint that never expires): left alone": (None, False),
    }


@pytest.mark.parametrize(("left", "renewed"), renewal_cases().values(), ids=renewal_cases().keys())
def test_a_hot_node_is_renewed_only_when_its_expiry_is_near(left, renewed):
    fleet, state = hot_and_tainted()
    state, _ = run(fleet, [HOT], state)   # the taint shows now; the one acknowledged is no longer fresh
    p, _ = plan(fleet.snapshot(None if left is None else fleet.now + left), None, BalancerPolicy(), state)
    renewals = [a for a in p.actions if isinstance(a, TaintNode) and a.renew]
    assert renewals == ([TaintNode(reason=renewals[0].reason, node="n0", renew=True)] if renewed else [])
    assert not [a for a in p.actions if isinstance(a, TaintNode) and not a.renew]


def test_a_taint_acknowledged_last_cycle_is_not_renewed_again_on_a_node_list_that_lags():
    fleet, state = hot_and_tainted()
    state, _ = run(fleet, [HOT], state)
    snap = fleet.snapshot(fleet.now + 10)
    p, state = plan(snap, None, BalancerPolicy(), state)
    assert [a.renew for a in p.actions if isinstance(a, TaintNode)] == [True]
    state = acknowledge(state, p.actions, snap)
    fleet.now += INTERVAL_S   # the node list still shows the old expiry
    p, _ = plan(fleet.snapshot(fleet.now + 10 - INTERVAL_S), None, BalancerPolicy(), state)
    assert not [a for a in p.actions if isinstance(a, TaintNode)]


def test_a_write_acknowledged_before_a_hold_is_judged_by_the_expiry_the_node_list_shows_now():
    """A renewal acknowledged, then cycles that planned nothing (fail-static holds: the planner does not run): the
    next plan must judge the expiry the node list shows, not count the write as just made. It did (the taint counted
    "acknowledged last cycle" until a plan consumed it), so the renewal due then was skipped and the taint lapsed
    under a node still hot: the short soak saw it on a loaded 2-core machine."""
    fleet, state = hot_and_tainted()
    state, _ = run(fleet, [HOT], state)
    snap = fleet.snapshot(fleet.now + 10)
    p, state = plan(snap, None, BalancerPolicy(), state)
    fleet.apply(p.actions)
    state = acknowledge(state, p.actions, snap)
    assert fleet.until == fleet.now + HOT_TAINT_TTL_S
    fleet.now = fleet.until - 60   # holds in between; the node list shows the renewed expiry, a minute away
    p, _ = plan(fleet.snapshot(), None, BalancerPolicy(), state)
    assert [(a.node, a.renew) for a in p.actions if isinstance(a, TaintNode)] == [("n0", True)]


def test_no_renewal_when_hot_nodes_are_not_tainted_by_policy():
    fleet, state = hot_and_tainted()
    state, _ = run(fleet, [HOT], state)
    policy = BalancerPolicy()
    policy = replace(policy, hotspots=replace(policy.hotspots, taint_hot_nodes=False))
    p, _ = plan(fleet.snapshot(fleet.now + 10), None, policy, state)
    assert not [a for a in p.actions if isinstance(a, TaintNode)]


# ---- the safety guard: a renewal spends no budget ------------------------------------------------------------

RENEW = TaintNode(reason="node still hot", node="n0", renew=True)
TAINT = TaintNode(reason="hot", node="n1", expected_gain=1.0)


def review(actions, ledger: SafetyLedger | None = None, now: float = 1000.0, **policy):
    guard = SafetyGuard(replace(SafetyPolicy(), **policy))
    fleet = ExpiringTaint()
    fleet.until = now + 10
    return guard.review(actions, fleet.snapshot(), ledger or SafetyLedger(), now)


GUARD_CASES = {
    "not counted against maxActionsPerCycle": (dict(max_actions_per_cycle=1), [RENEW, TAINT, RENEW], 3),
    "needs no expected gain": (dict(min_expected_gain=0.5), [RENEW], 1),
    "a per-cycle limit of 0 still lets renewals through": (dict(max_actions_per_cycle=0), [RENEW, TAINT], 1),
}


@pytest.mark.parametrize(("policy", "actions", "accepted"), GUARD_CASES.values(), ids=GUARD_CASES.keys())
def test_the_guard_does_not_count_a_renewal(policy, actions, accepted):
    r = review(actions, **policy)
    assert len(r.accepted) == accepted
    assert not [a for a, _ in r.rejected if a.renew]


def test_a_renewal_neither_waits_for_nor_rearms_the_taint_cooldown():
    guard = SafetyGuard(SafetyPolicy())
    tainted = guard.record(SafetyLedger(), [TaintNode(reason="hot", node="n0", expected_gain=1.0)],
                           ExpiringTaint().snapshot(), 1000.0)
    r = review([RENEW], tainted, now=1001.0)
    assert r.accepted == (RENEW,)   # within the cooldown of the taint it renews
    renewed = guard.record(SafetyLedger(), [RENEW], ExpiringTaint().snapshot(), 1000.0)
    assert renewed.last_action == {}
    cooled = TaintNode(reason="node cooled", node="n0", remove=True, expected_gain=1.0)
    r = review([cooled], renewed, now=1001.0)
    assert r.accepted == (cooled,)   # the node may be opened the moment it cools


def test_an_emergency_stop_on_the_node_holds_a_renewal():
    guard = SafetyGuard(SafetyPolicy())
    fleet = ExpiringTaint()
    fleet.until = 1010.0
    snap = fleet.snapshot()
    snap = replace(snap, nodes=(replace(snap.nodes[0], labels={EMERGENCY_LABEL: "true"}), *snap.nodes[1:]))
    r = guard.review([RENEW], snap, SafetyLedger(), 1000.0)
    assert not r.accepted and r.rejected[0][1].reason == "emergency_stop"
