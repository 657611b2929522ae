"""A latency-net step served by replicas already asked is not remembered as made when its shrinks did not go out.
Such a step sends no scale, only the reclaim shrinks that free GPUs for the held asks (26d1f44 counts it a change);
`capacity_loop.unsent` put back only the services of ScaleInferences up, so with the shrinks held (an emergency stop
set mid-cycle, an actuator failure that changed nothing) the step was 'not honoured' and never asked again, though no
GPU was freed for it. A reclaim shrink now names the latency-net steps it frees GPUs for (`ScaleTraining.service`),
and `unsent` forgets their counted change when it did not go out.

The fleet (tests/capacity/test_capacity_clash.py's, every GPU but chat's trained on): chat, one replica on GPU 0 and
two more asked (pending), p99 at 80% of its SLO (the net steps at 50%) on 5 req/s; "job" on GPUs 1-7."""

from __future__ import annotations

from dataclasses import replace

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import Action, ClusterSnapshot, ScaleInference, ScaleTraining, ServiceStatus
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityState
from balancer.plan.capacity_loop import unsent
from tests.capacity.test_capacity_clash import fleet_snapshot
from tests.loop import test_loop_unsent_scales as unsent_scales


def held_asks(t: float) -> ClusterSnapshot:
    snap = fleet_snapshot({"job": (1, 2, 3, 4, 5, 6, 7)}, chat_rps=5.0, t=t)
    chat = ServiceStatus(name="chat", demand_rps=5.0, p99_latency_s=0.4, slo_latency_s=0.5, replicas=3)
    return replace(snap, services={**snap.services, "chat": chat})


class HeldSource(unsent_scales.Source):
    def snapshot(self) -> ClusterSnapshot:
        self.reads += 1
        self.on_read(self.reads)
        return held_asks(self.clock[0])


class Actuator:
    """Applies everything, or answers a training resize RETRY (nothing changed) while `failing`."""

    def __init__(self, failing: bool = False) -> None:
        self.failing = failing

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        if self.failing and isinstance(action, ScaleTraining):
            return ActionResult(action, Outcome.RETRY, "no", "503")
        return ActionResult(action, Outcome.APPLIED)


def reconciler(tmp_path, on_read=lambda n: None, actuator=None):
    """test_loop_unsent_scales.py's, reading `held_asks`."""
    rec, clock = unsent_scales.reconciler(tmp_path, on_read, actuator or Actuator())
    rec.source = HeldSource(clock, on_read)
    return rec, clock


def reclaims(actions) -> list[tuple[str, int]]:
    return [(a.job, a.workers) for a in actions if isinstance(a, ScaleTraining) and a.cause == "reclaim"]


def test_the_step_is_served_by_a_shrink_that_names_chat_and_no_scale(tmp_path):
    rec, _ = reconciler(tmp_path)
    plan = rec.run_once().plan
    shrinks = [(a.job, a.workers, a.service) for a in plan.actions if isinstance(a, ScaleTraining)]
    assert shrinks == [("job", 6, "chat")]
    assert not [a for a in plan.actions if isinstance(a, ScaleInference)]


def test_a_step_served_by_held_asks_whose_shrink_an_emergency_stop_held_is_asked_again_once_lifted(tmp_path):
    stop = tmp_path / "stop"
    rec, clock = reconciler(tmp_path, on_read=lambda n: stop.touch() if n == 2 else None)   # set before acting
    report = rec.run_once()
    assert reclaims(report.plan.actions) == [("job", 6)]
    assert "emergency_stop" in {r for _, r in report.rejected}
    clock[0] = 1060.0
    assert rec.run_once().status == "fail_static"
    stop.unlink()
    clock[0] = 1120.0
    report = rec.run_once()
    assert reclaims(report.plan.actions) == [("job", 6)], report.plan.notes   # was: none, warming up
    clock[0] = 1500.0   # applied this time (the actuator does not move the fleet): made, then 'not honoured'
    assert reclaims(rec.run_once().plan.actions) == []


def test_a_step_whose_shrink_the_actuator_could_not_make_is_tried_again_next_cycle(tmp_path):
    actuator = Actuator(failing=True)
    rec, clock = reconciler(tmp_path, actuator=actuator)
    assert reclaims(rec.run_once().plan.actions) == [("job", 6)]
    for t in (1060.0, 1120.0):   # was: none (a warm-up, then 'not honoured' for good)
        clock[0] = t
        report = rec.run_once()
        assert reclaims(report.plan.actions) == [("job", 6)], report.plan.notes
    actuator.failing = False
    clock[0] = 1180.0
    assert reclaims(rec.run_once().plan.actions) == [("job", 6)]
    clock[0] = 1240.0
    assert reclaims(rec.run_once().plan.actions) == []   # made: a warm-up waited


def test_unsent_forgets_a_shrunk_for_service_only_where_the_plan_counted_its_change():
    before = planner_mod.PlannerState(capacity=CapacityState(last_change={"chat": 100.0, "embed": 200.0},
                                                             first_seen={"new": 900.0}, emergency={}))
    after = planner_mod.replace(before, capacity=CapacityState(
        last_change={"chat": 1000.0, "embed": 200.0}, first_seen={"new": 900.0}, emergency={"chat": 1}))

    def shrink(service: str, cause: str = "reclaim") -> ScaleTraining:
        return ScaleTraining(job="job", workers=1, previous_workers=2, reason="", expected_gain=1.0, cause=cause,
                             service=service)

    cap = unsent(after, before, [shrink("chat,embed,new")]).capacity
    assert dict(cap.last_change) == {"chat": 100.0, "embed": 200.0} and dict(cap.emergency) == {}
    assert dict(cap.first_seen) == {"new": 900.0}   # embed's and new's reclaims counted no change: left alone
    assert unsent(after, before, [shrink("embed")]) is after
    assert unsent(after, before, [shrink("chat", "colocation_slo")]) is after   # co-location's: not the tide's
