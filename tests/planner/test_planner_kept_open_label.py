"""Taking gputide's taint away from the node kept open in a heat wave is counted as `kept_open`, not `cooled`
(s33h13, audit s33a7 of 2154ce8): the node is still hot, and `gputide_actions_total{type="taint_node",
reason="cooled"}` counted it as a node that cooled."""

from __future__ import annotations

from balancer.action_labels import action_label_pairs, reason_label
from balancer.model import TaintNode
from tests.planner.test_planner_hot_taint_last_open import HEAT_WAVE, M, cycles


def test_the_kept_open_removal_has_its_own_reason_and_a_cooled_one_keeps_cooled():
    p, _ = cycles(HEAT_WAVE, tainted={"n0", "n1", "n2"})
    (removal,) = [a for a in p.actions if isinstance(a, TaintNode) and a.remove]
    assert (removal.node, removal.kept_open, reason_label(removal)) == ("n2", True, "kept_open")   # was "cooled"
    assert ("taint_node", "kept_open") in action_label_pairs()
    p, _ = cycles({0: 86.0, 4: 85.0}, n=M + 1, tainted={"n0", "n1", "n2"})   # n2 cooled: its taint goes as such
    (removal,) = [a for a in p.actions if isinstance(a, TaintNode) and a.remove]
    assert (removal.node, removal.kept_open, reason_label(removal)) == ("n2", False, "cooled")
