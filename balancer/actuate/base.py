"""The Actuator protocol: the one seam between decisions and the world.

An actuator receives actions that already passed the safety chokepoint and reports what happened as an
`ActionResult`. It never decides: a Kubernetes actuator maps a `Migrate` to reserve-target-then-evict, the
simulator actuator applies it to the simulated cluster, the dry-run actuator only records it.
Temporary failures (429 on a PDB, 409 conflicts, 5xx) come back as `Outcome.RETRY`; permanent ones as
`Outcome.FAILED`; neither raises, so one bad action never stops a reconcile cycle. A failed action whose change
may have been made all the same (a write timed out: the API server may have carried it out) says so
(`ActionResult.maybe_applied`), and the safety budgets count it as spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from balancer.model import Action, ClusterSnapshot


class Outcome(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry_run"
    RETRY = "retry"        # temporary: try again in a later cycle
    FAILED = "failed"      # permanent: do not retry this action


@dataclass(frozen=True, slots=True)
class ActionResult:
    action: Action
    outcome: Outcome
    detail: str = ""
    code: str = ""  # why a RETRY/FAILED happened: an HTTP status ("409", "429"), "transport" (balancer.actuation_codes)
    # a RETRY/FAILED whose change may have landed all the same (a write got no answer): the loop counts it against
    # the safety budgets as if applied (never told to the planner as done); the simulator and dry run never set it
    maybe_applied: bool = False


@runtime_checkable
class Actuator(Protocol):
    name: str

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        """Carry out one action planned against `snapshot`."""
        ...
