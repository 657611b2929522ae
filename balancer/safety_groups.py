"""All or nothing for moves that pay only together (`Migrate.group`): the moves that empty one GPU.

The guard reviews each action on its own, so a per-cycle limit, the eviction budget or the migrations in flight
on a node could accept the first of a GPU's moves and refuse the rest: pods evicted and budget spent for a GPU
left half emptied, freeing nothing. `whole_groups` reviews the actions, and when any member of a group is refused,
reviews again without that group (and again, until no group loses a member): its other members are refused too
(`GroupIncomplete`, naming what refused the first), and what they would have counted (budget, per-cycle slots,
migrations per node) goes to the actions after them. With `leaves` (the nodes a move leaves), a group that moves
onto a node a refused group was to leave is refused too, and so on: it may fit there only in the CPU or memory the
refused moves would have freed, as the consolidation planner's own simulation assumes (`plan.consolidation`), and
its pod would wait Pending. Pure: the review is a function of the actions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from balancer.errors import SafetyViolation

R = TypeVar("R")


class GroupIncomplete(SafetyViolation):
    reason = "group_incomplete"


def group_of(action: Any) -> str:
    return getattr(action, "group", "") or ""


def _onto_left(actions: Sequence[Any], why: dict[str, SafetyViolation],
               leaves: Callable[[Any], frozenset[str]]) -> None:
    """Add to `why` every group moving onto a node a group in `why` was to leave (transitively)."""
    left = {n for a in actions if group_of(a) in why for n in leaves(a)}
    grew = True
    while grew:
        grew = False
        for a in actions:
            g, node = group_of(a), getattr(a, "target_node", "")
            if g and g not in why and node in left:
                why[g] = GroupIncomplete(f"group {g!r} moves onto {node}, which refused moves were to leave: it may "
                                         "fit there only in what they would have freed")
                left |= {n for b in actions if group_of(b) == g for n in leaves(b)}
                grew = True


def whole_groups(actions: Sequence[Any], review_each: Callable[[Sequence[Any]], R],
                 make: Callable[[tuple, tuple], R], leaves: Callable[[Any], frozenset[str]] | None = None) -> R:
    """`review_each(actions)`, with every group that lost a member refused whole (`make(accepted, rejected)`
    builds the result from the last review). Reviewed again until no group loses a member: a check that is not
    monotonic (pod affinity to a pod moving in the same cycle) may refuse, without a group, what it took with it."""
    first = review = review_each(actions)
    why: dict[str, SafetyViolation] = {}   # group refused -> its first refusal
    own: dict[int, SafetyViolation] = {}   # member refused by a check of its own -> that check's refusal
    while lost := [(a, exc) for a, exc in review.rejected if group_of(a) and group_of(a) not in why]:
        for a, exc in lost:
            why.setdefault(group_of(a), exc)
            own.setdefault(id(a), exc)
        if leaves is not None:
            _onto_left(actions, why, leaves)
        review = review_each([a for a in actions if group_of(a) not in why])
    if review is first:
        return first
    split = tuple((a, own.get(id(a)) or _incomplete(group_of(a), why[group_of(a)]))
                  for a in actions if group_of(a) in why)
    return make(review.accepted, review.rejected + split)


def _incomplete(group: str, why: SafetyViolation) -> SafetyViolation:
    if isinstance(why, GroupIncomplete):   # the group moves onto a node refused moves were to leave
        return why
    return GroupIncomplete(f"group {group!r}: another of its moves was refused ({why.reason}: {why})")
