"""A service's spec.replicas above its cap end the belief (`gputide_inference_replicas`: the HPA keeps them at most
its maxReplicas), but a reading shows them late: a kube-state-metrics scrape and the recording rule's evaluation
(up to a minute or two), and the instant query answers its own evaluation time, not the sample's. Confirmed before
the change: the operator lowers chat's maxReplicas to 2 while it runs 3; the cycle at 1000 asks 3 -> 4, capped at 2
(the HPA scales chat down to 2); the reading at 1060 still shows the 3 sampled before, which ended the belief just
learned: chat asked 3 -> 4 again at 1060 in vain and the cap counted met afresh (asked again at 1360, not 1300). The
rule: a spec.replicas ends a belief only if sampled no earlier than the cap was met (`CapBelief.raised_by`), the
sample taken to be as old as `safety.maxTelemetryAgeS` allows (120 s; `capacity_loop._capped`): a raise read
sooner is planned that much later."""

from __future__ import annotations

from dataclasses import replace

from balancer.model import ClusterSnapshot
from balancer.plan.planner import CapBelief
from tests.loop.test_loop_capped_scales import ON, SpecFleet, chat_ups, drive

LAG_S = ON.safety.max_telemetry_age_s


class LaggingSpecFleet(SpecFleet):
    """`SpecFleet` whose serving reading at the times in `late` still shows chat's spec.replicas of the reading
    before (sampled before the HPA last scaled it); its pods are what runs."""

    def __init__(self, clock: list[float], most: int, late: set[float]) -> None:
        super().__init__(clock, most)
        self.late, self.shown = late, None

    def snapshot(self) -> ClusterSnapshot:
        snap = super().snapshot()
        chat = snap.services["chat"]
        if self.clock[0] in self.late and self.shown is not None:
            snap = replace(snap, services={**snap.services, "chat": replace(chat, replicas=self.shown)})
        self.shown = snap.services["chat"].replicas
        return snap


def test_a_spec_sampled_before_the_cap_does_not_end_it() -> None:
    fleet = LaggingSpecFleet([1000.0], 2, late={1060.0})
    fleet.replicas = {"chat": 3, "cheap": 2, "other": 3}   # maxReplicas lowered to 2 while chat runs 3
    drive(fleet, 8, changes={}, beliefs={1000.0: {"chat": CapBelief(2, 1000.0)},
                                         1060.0: {"chat": CapBelief(2, 1000.0)},
                                         1300.0: {"chat": CapBelief(2, 1300.0, 2)}})
    assert [(t, a.previous_replicas) for t, a in fleet.applied if a in chat_ups(fleet)] == [(1000.0, 3), (1300.0, 2)]
    assert fleet.replicas["chat"] == 2


def test_a_raise_read_as_soon_as_the_sample_may_be_younger_than_the_cap_ends_it() -> None:
    """chat capped at 2 at 1000, then the operator raises maxReplicas and the HPA runs 3 (spec.replicas): read at
    1060 (within the lag of the cap) chat is held at the 3 it runs; read from 1120 (1000 + the lag) it is asked up to
    the 4 its demand wants."""
    fleet = SpecFleet([1000.0], 2)
    drive(fleet, 4, changes={1060.0: (10, {"chat": 3})}, beliefs={1060.0: {"chat": CapBelief(2, 1000.0)},
                                                                 1000.0 + LAG_S: {}})
    assert [(t, a.previous_replicas, a.replicas) for t, a in fleet.applied if a in chat_ups(fleet)] == [
        (1000.0, 1, 4), (1000.0 + LAG_S, 3, 4)]


def test_raised_by_says_spec_replicas_above_the_cap_sampled_since_it_was_met() -> None:
    b = CapBelief(2, 1000.0).met(2, 1300.0)
    assert [b.raised_by(3, t) for t in (1299.0, 1300.0, 1400.0)] == [False, True, True]
    assert not b.raised_by(2, 1400.0) and not b.raised_by(0, 1400.0)   # at the cap, or none read
