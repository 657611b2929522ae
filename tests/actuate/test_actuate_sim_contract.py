"""The sim actuator keeps the Actuator contract: a refused action is a FAILED result, never an exception."""

from __future__ import annotations

import pytest

from balancer import fleet as fleet_mod
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.model import ScaleInference, ScaleTraining
from balancer.sim import SimCluster, default_mix


@pytest.mark.parametrize(
    "action",
    [ScaleTraining(job="", workers=1, previous_workers=2, reason="owner unknown to Prometheus"),
     ScaleTraining(job="no-such-job", workers=0, previous_workers=1, reason="gone"),
     ScaleInference(service="no-such-service", replicas=3, previous_replicas=1, reason="gone")],
    ids=["training-without-owner", "unknown-training-job", "unknown-service"],
)
def test_an_action_the_simulator_refuses_is_a_failed_result(action):
    sim = SimCluster(fleet_mod.scaled_fleet(64), seed=0)
    default_mix(sim)
    before = dict(sim.placements)
    result = SimActuator(sim).apply(action, sim.snapshot())
    assert result.outcome is Outcome.FAILED
    assert dict(sim.placements) == before
