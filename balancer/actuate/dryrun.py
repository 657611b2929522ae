"""The dry-run actuator: records and logs what would be done, touches nothing.

Dry-run is an actuator, not an `if` in the planner: the loop plans, simulates and passes the safety chokepoint
exactly as it would for real, and this actuator answers `Outcome.DRY_RUN` for every action. The loop keeps those
answers in a what-if ledger (`dry_run`: balancer/loop.py `_WhatIf`), so the safety guard restrains a dry run as it
would a live one (the eviction budget, cooldowns, migrations per node and per workload spent), and hands none of it
on to a live successor (the Lease, --ledger-file).
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

    @property
    def dry_run(self) -> bool:
        """Whether every answer is DRY_RUN, so the loop reviews against its what-if ledger and reserves nothing for a
        successor (`Reconciler._guard`): this class's `apply`, not a subclass's own (one answering APPLIED is live)."""
        return type(self).apply is DryRunActuator.apply

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        self.actions.append(action)
        log.info("dry-run: would %s", action.describe())
        return ActionResult(action, Outcome.DRY_RUN, "dry run: not applied", unchanged=True)
