"""`Holds.resume` judges the pods on its node on one clock reading: each pod's room was judged coming on a reading
of its own (`room_coming`), the pods leaving on another and those stuck on a third, so a grace ending between two
readings had a pod coming in one judgment and stuck in the next. Against the fake API server, with a clock that moves
at every reading."""

from __future__ import annotations

from test_k8s_preemption import reservations
from test_k8s_preemption_awaiting_grace import waits_for_both

from balancer.actuate import k8s_holds


class Ticking:
    """The test's clock, a millisecond later at every reading."""

    def __init__(self, clock) -> None:
        self.clock = clock

    @property
    def now(self) -> float:
        return self.clock.now

    def __call__(self) -> float:
        self.clock.advance(0.001)
        return self.clock.now


def test_one_resume_judges_every_pod_at_one_time(kube, api, clock, monkeypatch):
    ticking = Ticking(clock)
    sched = waits_for_both(kube, api, ticking, "other", clock.now + 1800)
    assert sched.holds.preemptor.clock is ticking
    judged: list[float] = []
    real = k8s_holds.room_coming
    monkeypatch.setattr(k8s_holds, "room_coming", lambda pod, now, *a: judged.append(now) or real(pod, now, *a))
    clock.advance(60)
    sched.schedule_once()
    assert "default/urgent" in reservations(kube, "a")                # resumed: still waiting for vip and other
    assert len(judged) >= 2 and len(set(judged)) == 1


def test_one_resume_judges_each_pod_once(kube, api, clock, monkeypatch):
    """`_leaving` takes the pods `_judged` found coming (`going`): it asked `room_coming` again of every pod on the
    node, at the same reading, each pod's room judged twice."""
    sched = waits_for_both(kube, api, clock, "other", clock.now + 1800)
    judged: list[str] = []
    real = k8s_holds.room_coming
    monkeypatch.setattr(k8s_holds, "room_coming", lambda pod, *a: judged.append(pod.key) or real(pod, *a))
    clock.advance(60)
    sched.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/other", "default/vip"]
    assert sorted(judged) == ["default/other", "default/vip"]
