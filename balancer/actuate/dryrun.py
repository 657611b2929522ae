"""The dry-run actuator: records and logs what would be done, touches nothing.

Dry-run is an actuator, not an `if` in the planner: the loop plans, simulates and passes the safety chokepoint
exactly as it would for real, and this actuator answers `Outcome.DRY_RUN` for every action.
"""

from __future__ import annotations

import logging

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import Action, ClusterSnapshot

log = logging.getLogger(__name__)


class DryRunActuator:
    name = "dry-run"

    def __init__(self) -> None:
        self.actions: list[Action] = []

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        self.actions.append(action)
        log.info("dry-run: would %s", action.describe())
        return ActionResult(action, Outcome.DRY_RUN, "dry run: not applied", unchanged=True)
