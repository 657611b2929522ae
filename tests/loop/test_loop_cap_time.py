"""A capped scale's belief is dated when the actuator's result came, not when the cycle began (audit a3, confirmed).
`CapBelief.raised_by` ends a belief on spec.replicas above the cap only if read `safety.maxTelemetryAgeS` after the
belief's `since` (a reading's sample may be that old), so `since` must be when the cap was met. The loop dated it at
the cycle's start: with acting slow (a training shrink before the scale, each action up to the actuator's 180 s), the
reading 30 s after the capped scale, still showing the spec.replicas sampled before the HPA clamped them, ended the
belief just learned: chat asked 3 -> 4 again in vain and the cap counted met afresh. Now each result is folded in
(`planner.cap`) at the clock `_act` read when it came."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from balancer.actuate.base import ActionResult
from balancer.loop import Reconciler
from balancer.model import Action, ClusterSnapshot, ScaleInference, ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.planner import CapBelief
from tests.loop.test_loop_capped_scales import ON, PROFILES, SpecFleet, chat_ups

SHRINK_S = 150.0   # a slow training resize (API retries; the actuator's deadline is 180 s)
LAG_S = ON.safety.max_telemetry_age_s


class SlowSpecFleet(SpecFleet):
    """`SpecFleet` whose training shrinks take `SHRINK_S` of the clock, and whose reading after a scale of chat still
    shows the spec.replicas sampled when it was asked (before the HPA clamped them to its maxReplicas)."""

    def __init__(self, clock: list[float], most: int) -> None:
        super().__init__(clock, most)
        self.sampled: int | None = None

    def apply(self, action: Action, snap: ClusterSnapshot) -> ActionResult:
        if isinstance(action, ScaleTraining) and action.workers < action.previous_workers:
            self.clock[0] += SHRINK_S
        if isinstance(action, ScaleInference):
            self.sampled = self.replicas["chat"]
        return super().apply(action, snap)

    def snapshot(self) -> ClusterSnapshot:
        snap = super().snapshot()
        if self.sampled is not None:
            snap = replace(snap, services={**snap.services, "chat": replace(snap.services["chat"],
                                                                             replicas=self.sampled)})
            self.sampled = None
        return snap


def test_a_cap_met_late_in_a_slow_cycle_is_dated_when_it_was_met() -> None:
    """maxReplicas lowered to 2 while chat runs 3. The cycle at 1000 shrinks cheap (done at 1150), then asks chat
    3 -> 4, capped at 2 at 1150: believed from 1150. The cycle at 1180 reads the 3 sampled before the clamp, within
    the lag of 1150: no raise, chat held at 2 (before: believed from 1000, the 3 read as a raise, chat asked again
    at 1180 in vain and the cap met afresh from then). It is asked again once believed no more (1150 + 5 min)."""
    fleet = SlowSpecFleet([1000.0], 2)
    fleet.replicas = {"chat": 3, "cheap": 2, "other": 3}
    met = 1000.0 + SHRINK_S
    assert met > 1180.0 - LAG_S   # the reading at 1180 may show a sample from before the cap was met
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: fleet.clock[0], planner=planner)
    rec.run_once()
    assert fleet.clock[0] == met and dict(rec.state.capped_scales) == {"chat": CapBelief(2, met)}
    for t in (1180.0, 1240.0, 1300.0, 1360.0, 1420.0, 1480.0):
        fleet.clock[0] = t
        rec.run_once()
    assert [(t, a.previous_replicas, a.replicas) for t, a in fleet.applied if a in chat_ups(fleet)] == [
        (met, 3, 4), (1480.0, 2, 4)]
    assert fleet.replicas["chat"] == 2 and dict(rec.state.capped_scales) == {"chat": CapBelief(2, 1480.0, 2)}
