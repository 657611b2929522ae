"""A hot taint's removal is proposed, carried out and counted once, though the node list lags it (audit s34f).
The planner remembered the taints it wrote (`PlannerState.tainted`, `taint_written`) but not one it took away: a
node list a cycle late still showed the removed taint, so the next plan removed it again, and
`gputide_actions_total{type="taint_node"}` counted the removal twice (the kept-open node's `kept_open`, a cooled
node's `cooled`). Now an acknowledged removal remembers the expiry its node showed (`PlannerState.untainted`) and the
node counts open while the list still shows that taint; a taint shown with another expiry (a later write) is judged
afresh, and a removal never acknowledged (it failed) is proposed again. A taint with no expiry (hand-written) is not
remembered removed (audit s34m6): a person writing it again looks the same as a list lagging its removal."""

from __future__ import annotations

from balancer.action_labels import reason_label
from balancer.config import BalancerPolicy
from balancer.model import TaintNode
from balancer.plan.planner import RENEW_WITHIN_S, PlannerState, acknowledge, plan
from tests.planner.test_planner_hot_taint_last_open import CORDON, HEAT_WAVE, M, N, cycles, fleet_snapshot

UNTIL = 1000.0 + 900.0
ALL = frozenset({"n0", "n1", "n2"})


def removals(p) -> list[tuple[str, str]]:
    return [(a.node, reason_label(a)) for a in p.actions if isinstance(a, TaintNode) and a.remove]


def written(p) -> list[tuple[str, str]]:
    """The hot taints `p` writes: (node, "add" or "renew")."""
    return [(a.node, "renew" if a.renew else "add") for a in p.actions if isinstance(a, TaintNode) and not a.remove]


def step(temps, state: PlannerState, time: float, tainted=ALL, until=UNTIL, ack=True, plans=None, **kw):
    """One plan of `temps` on a node list showing `tainted`'s hot taints expiring at `until`, acknowledged as carried
    out (`ack`): its removals and the state. `plans`: a list the plan is appended to."""
    s = fleet_snapshot(temps, tainted=tainted, until=until, time=time, **kw)
    p, state = plan(s, None, BalancerPolicy(), state)
    if plans is not None:
        plans.append(p)
    return removals(p), acknowledge(state, p.actions, s) if ack else state


def cooled_and_removed(until):
    """n0 hot and tainted (expiring at `until`), cooled: its removal planned and acknowledged; the state."""
    _, state = cycles({0: 86.0}, tainted={"n0"}, until=until)
    p, state = cycles({}, n=M + 1, state=state, tainted={"n0"}, until=until)
    assert removals(p) == [("n0", "cooled")]
    return acknowledge(state, p.actions, fleet_snapshot({}, tainted={"n0"}, until=until))


def test_the_kept_open_removal_is_made_and_counted_once_while_the_node_list_lags():
    p, state = cycles(HEAT_WAVE, tainted=ALL, until=UNTIL)
    assert removals(p) == [("n2", "kept_open")]
    state = acknowledge(state, p.actions, fleet_snapshot(HEAT_WAVE, tainted=ALL, until=UNTIL))
    for c in range(3):   # the list still shows n2's taint as it was
        done, state = step(HEAT_WAVE, state, 2000.0 + 30 * c)
        assert done == [], c   # was [("n2", "kept_open")] each cycle: removed and counted again
        assert state.kept_open == "n2"
    done, state = step(HEAT_WAVE, state, 2100.0, tainted={"n0", "n1"})   # the list caught up
    assert done == [] and dict(state.untainted) == {}


def test_a_cooled_removal_is_made_once_while_the_node_list_lags():
    state = cooled_and_removed(UNTIL)
    done, state = step({}, state, 3000.0, tainted={"n0"})
    assert done == []   # was [("n0", "cooled")] again


def test_a_taint_written_again_or_a_removal_not_carried_out_is_removed_again():
    p, state = cycles(HEAT_WAVE, tainted=ALL, until=UNTIL)
    failed = state   # the removal failed: nothing acknowledged, so it is proposed again
    assert step(HEAT_WAVE, failed, 2000.0)[0] == [("n2", "kept_open")]
    state = acknowledge(state, p.actions, fleet_snapshot(HEAT_WAVE, tainted=ALL, until=UNTIL))
    assert step(HEAT_WAVE, state, 2000.0)[0] == []   # the list lags the removal (was: removed again)
    # someone wrote n2's taint again since (another expiry): the list shows a taint the removal did not take away
    assert step(HEAT_WAVE, state, 2000.0, until=UNTIL + 60)[0] == [("n2", "kept_open")]


def test_a_taint_with_no_expiry_written_again_is_removed_again_and_closes_its_node():
    """n0's taint has no expiry (hand-written, no gputide.io/hot-until): after its removal a list showing it may lag
    or a person may have written it again; it was trusted removed for good (None == None): never removed again, and
    n0 counted open, so n1 turning hot was tainted with n2 cordoned: no node left open for a pod."""
    state = cooled_and_removed(None)
    assert dict(state.untainted) == {}   # was {"n0": None}
    for c in range(3):
        done, state = step({}, state, 3000.0 + 30 * c, tainted={"n0"}, until=None)
        assert done == [("n0", "cooled")], c   # was []: the taint kept for good
    plans: list = []
    for c in range(N):
        _, state = step({4: 86.0}, state, 3100.0 + 30 * c, tainted={"n0"}, until=None, plans=plans,
                        taints={"n2": (CORDON,)})
    assert ("n1", "add") in written(plans[-1])
    assert removals(plans[-1]) == [("n0", "cooled")]   # n0 opened as n1 closes (was: n0's taint left, n1 tainted)


def test_a_kept_node_closing_while_the_list_lags_its_removal_is_tainted_not_renewed():
    """n2 kept open, its taint removed; the list still shows it (expiring within RENEW_WITHIN_S) when n0 cools and
    n2 is no longer the last open node: n2 is tainted anew, once (a renewal of the taint the list shows as well would
    write it twice in one plan)."""
    p, state = cycles(HEAT_WAVE, tainted=ALL, until=UNTIL)
    state = acknowledge(state, p.actions, fleet_snapshot(HEAT_WAVE, tainted=ALL, until=UNTIL))
    start = UNTIL - RENEW_WITHIN_S + 50   # renewals due
    plans: list = []
    for c in range(M + 1):   # n0 cools
        _, state = step({4: 85.0, 8: 84.5}, state, start + 30 * c, plans=plans)
        if state.kept_open is None:
            break
    assert state.kept_open is None   # n0 open again: n2 closes
    assert [w for w in written(plans[-1]) if w[0] == "n2"] == [("n2", "add")]   # was add and renew
    assert removals(plans[-1]) == [("n0", "cooled")]


def test_a_cooled_node_hot_again_while_the_list_lags_its_removal_is_tainted_again():
    """n0's taint removed once it cooled; the list still shows it when n0 turns hot again: n0 counts open (the taint
    is gone), so it is tainted again at once, not left open until the list catches up."""
    state = cooled_and_removed(UNTIL)
    plans: list = []
    for c in range(N):
        _, state = step({0: 86.0}, state, 1500.0 + 30 * c, tainted={"n0"}, plans=plans)
    assert [written(p) for p in plans] == [[]] * (N - 1) + [[("n0", "add")]]
    assert removals(plans[-1]) == []
