"""A profiled inference service whose pods run but which has no serving series at all holds capacity shifting, as a
NaN demand does, and `gputide_inference_demand_unknown{service}` names every service held for.

rules/serving/vllm.yaml records a service's demand NaN while fewer pods report than are ready, then nothing once no
pod has reported for the 5 minutes its rate reads: every vLLM scrape of it lost (or never set up). The snapshot then
has neither a status nor a `demand_unknown` entry for it, and the capacity planner simply left it out: no hold, no
note, and the idle GPUs its demand needs lent to training, 3 minutes after the same lost scrape had held. The alert
GputideInferenceDemandUnknown read the recorded NaN only, so it never fired for it (the NaN lasts under its 10 min).
A profiled service with no pod placed has nothing running to misjudge: left out as before. A shard holds for it too
(test_capacity_hold_no_series_everywhere: it tells it from a service spread over two shards)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import HOLD_DEMAND_UNKNOWN, NO_SERIES, plan_with_capacity
from balancer.plan.planner import PlannerState
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import WHY, Fleet

PROFILED = {"chat": PROFILES["chat"]}


def idle_two():
    """chat (demand 30 req/s: 4 replicas wanted) on GPU 0, with two GPUs idle: two workers of "other" gone."""
    fleet = Fleet([1000.0])
    fleet.unknown = fleet.hot = False
    snap = fleet.snapshot()
    drop = {w.name for w in snap.workloads if w.owner == "other"}
    drop = set(sorted(drop)[-2:])
    return snap.replace(workloads=tuple(w for w in snap.workloads if w.name not in drop),
                        placements={k: v for k, v in snap.placements.items() if k not in drop})


def plan(snap, state=None, *, policy=ON, sharded=False):
    return plan_with_capacity(snap, {}, policy, state or PlannerState(), profiles=PROFILED,
                              capacity_policy=CapacityPolicy(), sharded=sharded)


def test_no_series_while_its_pod_runs_holds_as_a_nan_demand_does():
    snap = idle_two()
    absent = snap.replace(services={}, demand_unknown={})
    p, state = plan(absent)
    assert state.capacity_holding == {HOLD_DEMAND_UNKNOWN} and state.demand_held == {"chat": NO_SERIES}
    assert not [a for a in p.actions if isinstance(a, ScaleTraining)], [a.describe() for a in p.actions]
    assert any("chat" in n and NO_SERIES in n for n in p.notes if n.startswith("capacity holds")), p.notes
    nan = snap.replace(services={}, demand_unknown={"chat": WHY})
    assert plan(nan)[1].demand_held == {"chat": WHY}
    known = plan(snap, state)[1]   # known again: planned, and no service held for
    assert (known.capacity_holding, known.demand_held, known.capacity_targets) == (frozenset(), {},
                                                                                   {"chat": 4})


def test_a_profiled_service_with_no_pod_is_left_out_and_a_shard_holds_for_it_as_for_nan():
    snap = idle_two()
    gone = snap.replace(services={}, demand_unknown={},
                        workloads=tuple(w for w in snap.workloads if w.owner != "chat"))
    p, state = plan(gone)
    assert (state.capacity_holding, state.demand_held) == (frozenset(), {})
    assert [a.job for a in p.actions if isinstance(a, ScaleTraining)], "idle GPUs lent: nothing of chat runs"
    absent = snap.replace(services={}, demand_unknown={})
    # a shard's, nothing of it spread (`spread_services`)
    assert plan(absent, sharded=True)[1].demand_held == {"chat": NO_SERIES}
    assert plan(absent.replace(demand_unknown={"chat": WHY}), sharded=True)[1].demand_held == {"chat": WHY}


def test_capacity_shifting_off_clears_the_services_held_for():
    held = replace(PlannerState(), capacity_holding=frozenset({HOLD_DEMAND_UNKNOWN}), demand_held={"chat": WHY})
    off = replace(ON, capacity=replace(ON.capacity, enabled=False))
    assert plan(idle_two().replace(services={}, demand_unknown={}), held, policy=off)[1].demand_held == {}


class Absent(Fleet):
    """`Fleet` whose serving series are gone altogether while `absent` (chat in neither `services` nor
    `demand_unknown`)."""

    absent = True

    def snapshot(self):
        snap = super().snapshot()
        return snap.replace(services={}, demand_unknown={}) if self.absent else snap


def test_the_gauge_names_the_service_held_for_and_goes_once_it_is_known_or_the_replica_stands_by():
    clock = [1000.0]
    fleet, reg = Absent(clock), CollectorRegistry()
    fleet.unknown = fleet.hot = False
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], metrics=ControllerMetrics(reg),
                     planner=partial(plan_with_capacity, profiles=PROFILED, capacity_policy=CapacityPolicy()))

    def gauge():
        return reg.get_sample_value("gputide_inference_demand_unknown", {"service": "chat"})

    assert rec.run_once().status == "ok" and gauge() == 1
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": HOLD_DEMAND_UNKNOWN}) == 1
    clock[0] += 60
    fleet.absent = False   # its series back: planned, the series goes (not left at 0)
    assert rec.run_once().status == "ok" and gauge() is None
    rec.metrics.set_inference_demand_unknown({"chat", "embed"})
    rec.metrics.set_inference_demand_unknown({"embed"})   # a service no longer held for loses its series
    assert gauge() is None and reg.get_sample_value("gputide_inference_demand_unknown", {"service": "embed"}) == 1
    rec.metrics.standby()
    assert reg.get_sample_value("gputide_inference_demand_unknown", {"service": "embed"}) is None
