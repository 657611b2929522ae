"""A hot taint's removal is proposed, carried out and counted once, though the node list lags it (audit s34f).
The planner remembered the taints it wrote (`PlannerState.tainted`, `taint_written`) but not one it took away: a
node list a cycle late still showed the removed taint, so the next plan removed it again, and
`gputide_actions_total{type="taint_node"}` counted the removal twice (the kept-open node's `kept_open`, a cooled
node's `cooled`). Now an acknowledged removal remembers the expiry its node showed (`PlannerState.untainted`) and the
node counts open while the list still shows that taint; a taint shown with another expiry (a later write) is judged
afresh, and a removal never acknowledged (it failed) is proposed again."""

from __future__ import annotations

from balancer.action_labels import reason_label
from balancer.config import BalancerPolicy
from balancer.model import TaintNode
from balancer.plan.planner import PlannerState, acknowledge, plan
from tests.planner.test_planner_hot_taint_last_open import HEAT_WAVE, M, cycles, fleet_snapshot

UNTIL = 1000.0 + 900.0
ALL = frozenset({"n0", "n1", "n2"})


def removals(p) -> list[tuple[str, str]]:
    return [(a.node, reason_label(a)) for a in p.actions if isinstance(a, TaintNode) and a.remove]


def step(temps, state: PlannerState, time: float, tainted=ALL, until=UNTIL, ack=True):
    """One plan of `temps` on a node list showing `tainted`'s hot taints expiring at `until`, acknowledged as carried
    out (`ack`): its removals and the state."""
    s = fleet_snapshot(temps, tainted=tainted, until=until, time=time)
    p, state = plan(s, None, BalancerPolicy(), state)
    return removals(p), acknowledge(state, p.actions, s) if ack else state


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
    _, state = cycles({0: 86.0}, tainted={"n0"}, until=UNTIL)   # n0 hot and tainted; then it cools
    p, state = cycles({}, n=M + 1, state=state, tainted={"n0"}, until=UNTIL)
    assert removals(p) == [("n0", "cooled")]
    state = acknowledge(state, p.actions, fleet_snapshot({}, tainted={"n0"}, until=UNTIL))
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
