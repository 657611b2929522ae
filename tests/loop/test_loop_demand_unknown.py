"""An inference service whose demand is unknown (a stalled vLLM pod: rules/serving/vllm.yaml records NaN) holds
capacity shifting, not the whole controller. Before, the reading was refused (`MissingTelemetry`): the loop held
still fleet-wide, and a hot GPU elsewhere was neither throttled nor migrated until the pod was mended. Now the
snapshot names the service in `demand_unknown`, the capacity planner holds (`gputide_capacity_holding{reason=
"inference_demand_unknown"}`: no scale, no loan, no reclaim), thermal relief goes on (`gputide_fail_static` 0), and
once the demand is known again the tide plans again.

The fleet: 8 GPUs on 2 nodes, chat's replica first, then 4 workers of "cheap" and 3 of "other". Known, chat's demand
(30 req/s, 10 per replica) wants 4 replicas: the capacity planner shrinks training and scales chat up."""

from __future__ import annotations

import logging
from functools import partial

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_capped_scales import HpaCappedFleet

WHY = "stalled: 1 pod(s) with requests in hand and no progress"
HOT_GPU = 6   # a worker of "other", on the second node


class Fleet(HpaCappedFleet):
    """The loop's telemetry and actuator (`HpaCappedFleet`, no cap): what it applies, the next snapshot shows.
    `unknown`: chat's demand is unknown (in `demand_unknown`, not in `services`); `hot`: GPU `HOT_GPU` runs at
    92 C."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__(clock, most=8)
        self.unknown, self.hot = True, True

    def snapshot(self) -> ClusterSnapshot:
        snap = super().snapshot()
        if self.hot:
            temps = snap.temperature_c.copy()
            temps[HOT_GPU] = 92.0
            snap = snap.replace(temperature_c=temps, memory_temperature_c=temps + 5)
        return snap.replace(services={}, demand_unknown={"chat": WHY}) if self.unknown else snap

    @property
    def actions(self) -> list[Action]:
        return [a for _, a in self.applied]


def capacity(actions: list[Action]) -> list[Action]:
    return [a for a in actions if isinstance(a, ScaleInference | ScaleTraining)]


def thermal(actions: list[Action]) -> list[Action]:
    return [a for a in actions if isinstance(a, SetPowerLimit | Migrate | TaintNode)]


def test_an_unknown_demand_holds_capacity_while_a_hot_gpu_is_still_relieved_then_the_tide_plans_again(caplog):
    clock = [1000.0]
    fleet, reg = Fleet(clock), CollectorRegistry()
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner,
                     metrics=ControllerMetrics(reg))
    caplog.set_level(logging.INFO, logger="balancer.loop")
    reports = []
    for k in range(3):
        clock[0] = 1000.0 + 60.0 * k
        reports.append(rec.run_once())
    assert [r.status for r in reports] == ["ok"] * 3, [r.reason for r in reports]
    assert reg.get_sample_value("gputide_fail_static") == 0
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": "inference_demand_unknown"}) == 1
    assert any(a.gpu == HOT_GPU if isinstance(a, SetPowerLimit) else HOT_GPU in getattr(a, "source_gpus", ())
               for a in thermal(fleet.actions)), "the hot GPU must still be relieved"
    assert capacity(fleet.actions) == [], "no scale, no loan, no reclaim while chat's demand is unknown"
    assert fleet.replicas == {"chat": 1, "cheap": 4, "other": 3}
    assert any("chat" in n and WHY in n and "capacity holds" in n for n in reports[0].plan.notes)
    said = [r.getMessage() for r in caplog.records if "inference demand unknown for chat" in r.getMessage()]
    assert len(said) == 1 and WHY in said[0], said   # once while the set stays the same, not every cycle
    # known again: the tide plans again (chat wants 4 replicas: scaled up, training shrunk for it), the gauge clears
    fleet.unknown, fleet.hot = False, False
    clock[0] += 60.0
    report = rec.run_once()
    assert report.status == "ok" and capacity(fleet.actions), report.plan.notes
    assert fleet.replicas["chat"] > 1
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": "inference_demand_unknown"}) is None
    assert any("inference demand known again for chat" in r.getMessage() for r in caplog.records)


def test_a_stale_gpu_still_holds_the_whole_loop_still():
    """Only the demand's unknown is no hold of the loop's: stale GPU telemetry is fail-static as ever."""
    clock = [1000.0]
    fleet, reg = Fleet(clock), CollectorRegistry()
    stale = type("Stale", (), {"snapshot": lambda self: fleet.snapshot().replace(
        sample_age_s=fleet.snapshot().sample_age_s + 3600.0)})()
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=stale, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner,
                     metrics=ControllerMetrics(reg))
    assert rec.run_once().status == "fail_static" and fleet.actions == []
    assert reg.get_sample_value("gputide_fail_static") == 1
