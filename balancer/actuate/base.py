"""The Actuator protocol: the one seam between decisions and the world.

An actuator receives actions that already passed the safety chokepoint and reports what happened as an
`ActionResult`. It never decides: a Kubernetes actuator maps a `Migrate` to reserve-target-then-evict, the
simulator actuator applies it to the simulated cluster, the dry-run actuator only records it.
Temporary failures come back as `Outcome.RETRY`, permanent ones as `Outcome.FAILED`; neither raises, so one bad
action never stops a reconcile cycle. An actuator may also refuse an action itself, before changing anything
(`Refused`, `refusal`, `refused_result`).

The result types live one layer down, in `balancer.action_results` (their docstring tells outcomes and refusals
apart), so that code below the actuators (the shard wrappers of `balancer.telemetry.shard`) can build a result too;
they are re-exported here, where actuators have always imported them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from balancer.action_results import (  # re-exported: an actuator's results (balancer/action_results.py)
    ActionResult,
    Outcome,
    Refused,
    refusal,
    refused_result,
)
from balancer.model import Action, ClusterSnapshot

__all__ = ["ActionResult", "Actuator", "Outcome", "Refused", "refusal", "refused_result"]


@runtime_checkable
class Actuator(Protocol):
    name: str

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        """Carry out one action planned against `snapshot`."""
        ...
