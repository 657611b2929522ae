"""The labels an action is counted under in `gputide_actions_total{type, reason}`: its kind and a low-cardinality
reason (the free text goes to the audit log).

The reasons are a table of rules per action class, tried in order, so the set of every (type, reason) pair the
controller can count (`action_label_pairs`) is read from the same table `reason_label` decides with: the metrics
start each pair at 0 (balancer.metrics), and a pair added here is there too.

A training resize is labelled by its planner's cause (`ScaleTraining.cause`: the tide's `loan` and `reclaim`,
co-location's `colocation_slo` and `colocation_slack`), an inference scale by its direction (up: `reclaim`, down:
`loan`); a hotspot shrink by its record (`shrunk_from` > 0:
`hotspot`, 0: its give-back, `give_back`); a resize with neither as `resize`. A hot taint's removal is `cooled`, but
the one that keeps the last node open to GPU work in a heat wave (`hotspot_detect.kept_open`: `TaintNode.kept_open`,
which the hotspot planner sets; never read from the reason's free text), which is `kept_open`: that node is still hot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from balancer import actions
from balancer.actions import (
    Action,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
    TrainingCause,
)


def _always(_: Any) -> bool:
    return True


def _cause(cause: str) -> Callable[[ScaleTraining], bool]:
    return lambda a: a.cause == cause


_Rules = tuple[tuple[str, Callable[[Any], bool]], ...]

# per action class: (reason, applies) in order; the first that applies labels the action. A class without rules is
# labelled by its kind.
RULES: dict[type[Action], _Rules] = {
    Migrate: (("hotspot", _always),),
    SetPowerLimit: (("throttle", lambda a: a.is_throttle), ("unthrottle", _always)),
    TaintNode: (("kept_open", lambda a: a.remove and a.kept_open), ("cooled", lambda a: a.remove),
                ("renew", lambda a: a.renew), ("hot_node", _always)),
    ScaleTraining: (*((c, _cause(c)) for c in get_args(TrainingCause)),
                    ("give_back", lambda a: a.shrunk_from == 0),
                    ("hotspot", lambda a: a.shrunk_from is not None),
                    ("resize", _always)),
    # only the tide scales inference: up gives GPUs back to inference, down lends them to training
    ScaleInference: (("reclaim", lambda a: a.replicas > a.previous_replicas), ("loan", _always)),
}


def reason_label(action: Action) -> str:
    """A low-cardinality reason for `gputide_actions_total{reason}`."""
    for reason, applies in RULES.get(type(action), ()):
        if applies(action):
            return reason
    return action.kind


def action_classes() -> tuple[type[Action], ...]:
    """Every action class the controller's planners build (balancer.actions), in definition order."""
    return tuple(c for c in vars(actions).values()
                 if isinstance(c, type) and issubclass(c, Action) and c is not Action
                 and c.__module__ == actions.__name__)


def action_label_pairs() -> tuple[tuple[str, str], ...]:
    """Every (type, reason) `gputide_actions_total` can count: each action kind with each reason its rules give."""
    return tuple((cls.kind, reason) for cls in action_classes()
                 for reason in ([r for r, _ in RULES.get(cls, ())] or [cls.kind]))
