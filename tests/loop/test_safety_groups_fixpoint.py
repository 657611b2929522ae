"""All or none holds after the review again without a refused group, too (`whole_groups`).

The second review leaves a refused group out, and a check that is not monotonic (a move admitted by pod affinity to a
pod moving to that node in the same cycle, a projection that counts the moves before it) can then refuse a member of
another group it accepted the first time: that group was returned half accepted. Reviews repeat until no group lost a
member."""

from __future__ import annotations

from dataclasses import dataclass

from balancer.safety import Review
from balancer.safety_groups import GroupIncomplete, whole_groups
from balancer.safety_violations import MaxActionsPerCycle, PlacementRefused


@dataclass(frozen=True)
class Act:
    name: str
    group: str = ""


def review_each(actions):
    """a2 is always refused; b1 only fits beside a1 (it follows a1's pod by affinity)."""
    names = {a.name for a in actions}
    rejected = [(a, MaxActionsPerCycle("limit")) for a in actions if a.name == "a2"]
    rejected += [(a, PlacementRefused("affinity")) for a in actions if a.name == "b1" and "a1" not in names]
    refused = {id(a) for a, _ in rejected}
    return Review(tuple(a for a in actions if id(a) not in refused), tuple(rejected))


def test_a_group_that_loses_a_member_in_the_second_review_is_refused_whole_too():
    actions = [Act("a1", "A"), Act("a2", "A"), Act("b1", "B"), Act("b2", "B"), Act("c")]
    r = whole_groups(actions, review_each, Review)
    assert [a.name for a in r.accepted] == ["c"]
    why = {a.name: type(exc) for a, exc in r.rejected}
    assert why == {"a1": GroupIncomplete, "a2": MaxActionsPerCycle, "b1": PlacementRefused, "b2": GroupIncomplete}
