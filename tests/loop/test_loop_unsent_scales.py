"""A capacity scale that did not go out is not remembered as made. `plan_capacity` counts a ScaleInference as a change
when it proposes it (the service's last change, and for the latency net's step the replicas it was asked at): a step
the guard refused, the fresh snapshot held (an emergency stop), or the actuator failed having changed nothing was
then 'not honoured' and never repeated while the service held the same replicas, so a service under latency pressure
stayed there after the stop was lifted, its idle GPUs lent to training instead. The loop tells the planner what did
not go out (`capacity_loop.unsent`): that service's memory is as before the plan.

The fleet (tests/capacity/test_capacity_clash.py's): chat, one replica on GPU 0, p99 at 80% of its SLO (the net
steps at 50%) on 5 req/s (one replica is enough for the demand); GPUs 1-3 and 7 idle, "job" on 4-6."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.model import Action, ClusterSnapshot, ScaleInference
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, CapacityState
from balancer.plan.capacity_loop import plan_with_capacity, unsent
from balancer.safety import SafetyGuard
from tests.capacity.test_capacity_clash import ON, PROFILES, fleet_snapshot


class Source:
    """The fleet at the clock; `on_read(n)` runs at each read (the n-th, from 1)."""

    def __init__(self, clock: list[float], on_read=lambda n: None) -> None:
        self.clock, self.on_read, self.reads = clock, on_read, 0

    def snapshot(self) -> ClusterSnapshot:
        self.reads += 1
        self.on_read(self.reads)
        return fleet_snapshot({"job": (4, 5, 6)}, chat_rps=5.0, t=self.clock[0])


class Actuator:
    """Applies everything, or answers chat's scale with `chat` (outcome, code) while `failing`."""

    def __init__(self, chat: tuple[str, str] | None = None) -> None:
        self.chat, self.failing = chat, chat is not None

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        if self.failing and isinstance(action, ScaleInference):
            return ActionResult(action, Outcome(self.chat[0]), "no", self.chat[1])
        return ActionResult(action, Outcome.APPLIED)


def reconciler(tmp_path, on_read=lambda n: None, actuator=None):
    clock = [1000.0]
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=Source(clock, on_read), actuator=actuator or Actuator(), policy=ON, planner=planner,
                     guard=SafetyGuard(ON.safety, emergency_stop_file=tmp_path / "stop"), clock=lambda: clock[0])
    return rec, clock


def chat_step(actions) -> list[int]:
    return [a.replicas for a in actions if isinstance(a, ScaleInference) and a.service == "chat"]


def test_a_step_an_emergency_stop_held_before_acting_is_asked_again_once_the_stop_is_lifted(tmp_path):
    stop = tmp_path / "stop"
    rec, clock = reconciler(tmp_path, on_read=lambda n: stop.touch() if n == 2 else None)   # set before acting
    report = rec.run_once()
    assert chat_step(report.plan.actions) == [2] and ("emergency_stop" in {r for _, r in report.rejected})
    clock[0] = 1060.0
    assert rec.run_once().status == "fail_static"
    stop.unlink()
    clock[0] = 1120.0
    report = rec.run_once()
    assert chat_step(report.plan.actions) == [2], report.plan.notes   # was: "not honoured", never asked again
    assert not any("not honoured" in n for n in report.plan.notes)


def test_a_step_the_actuator_could_not_make_is_tried_again_next_cycle(tmp_path):
    actuator = Actuator(("retry", "503"))
    rec, clock = reconciler(tmp_path, actuator=actuator)
    assert chat_step(rec.run_once().plan.actions) == [2]
    actuator.failing = False
    clock[0] = 1060.0
    assert chat_step(rec.run_once().plan.actions) == [2]
    # applied this time: the step is made, and counted so (the replicas have not come yet: not asked again)
    clock[0] = 1120.0
    report = rec.run_once()
    assert chat_step(report.plan.actions) == []


def test_unsent_puts_back_only_the_unsent_services_memory():
    before = planner_mod.PlannerState(capacity=CapacityState(last_change={"chat": 100.0, "embed": 200.0},
                                                             first_seen={}, emergency={"embed": 3}))
    after = planner_mod.replace(before, capacity=CapacityState(
        last_change={"chat": 1000.0, "embed": 1000.0, "new": 1000.0}, emergency={"chat": 1, "embed": 4, "new": 2}))
    up = [ScaleInference(service=s, replicas=9, previous_replicas=1, reason="", expected_gain=1.0)
          for s in ("chat", "new")]
    cap = unsent(after, before, up).capacity
    assert dict(cap.last_change) == {"chat": 100.0, "embed": 1000.0}
    assert dict(cap.emergency) == {"embed": 4}
    assert dict(cap.first_seen) == {"new": 1000.0}   # held from the cycle it was first planned, as if not acted on
    assert unsent(after, before, []) is after
    down = [ScaleInference(service="chat", replicas=1, previous_replicas=3, reason="", expected_gain=1.0)]
    assert unsent(after, before, down) is after   # a loan not made still waits its hold: not asked every cycle


def test_a_step_the_guard_refuses_for_a_lasting_cause_waits_as_before_not_asked_every_cycle(tmp_path):
    """Its minimum gain refuses the step each time: forgotten, it was asked, refused, logged and audited every cycle
    (audit a7); waited out as if made, once, then after the service's hold."""
    policy = replace(ON, safety=replace(ON.safety, min_expected_gain=50.0))
    clock = [1000.0]
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=Source(clock), actuator=Actuator(), policy=policy, planner=planner,
                     guard=SafetyGuard(policy.safety, emergency_stop_file=tmp_path / "stop"), clock=lambda: clock[0])
    refusals = 0
    for i in range(6):
        clock[0] = 1000.0 + 60 * i
        refusals += sum(r == "min_gain" for a, r in rec.run_once().rejected if chat_step([a]))
    assert refusals == 1
