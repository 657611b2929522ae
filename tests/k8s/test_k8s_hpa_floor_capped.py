"""A floor the HPA's maxReplicas caps is said so (audit: "an HPA floor capped at maxReplicas is reported APPLIED").

Confirmed before the change: a floor of 12 on an HPA with maxReplicas 10 wrote minReplicas 10 and came back APPLIED,
its detail "(asked 12, clamped to HPA range)", the same words as a floor raised to the operator's own minReplicas.
The capacity planner, whose profile left maxReplicas unset, shrank training by two workers for the two replicas, then
kept those two GPUs idle and asked for 12 again every cycle (plan_capacity over 8 cycles: training 20 -> 18, 2 idle
throughout). The result stays APPLIED (the floor of 10 stands and must not be tried again as a failure), but its detail
now names the cap and the replicas that will not start, and the operator is told once, at WARNING, what to change:
the HPA's maxReplicas, or the profile's."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    kube.add(deployment("web", "serve", replicas=10))
    kube.add(hpa("web", "web", "serve", lo=3, hi=10))
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def scale(actuator: KubernetesActuator, replicas: int, previous: int = 10):
    return actuator.apply(ScaleInference(reason="tide", service="serve/web", replicas=replicas,
                                         previous_replicas=previous), SNAP)


def test_a_floor_capped_at_max_replicas_names_the_cap_and_the_replicas_that_will_not_start(kube, actuator) -> None:
    result = scale(actuator, 12)
    assert result.outcome is Outcome.APPLIED   # minReplicas 10 stands
    assert kube.get("horizontalpodautoscalers", "web", "serve")["spec"]["minReplicas"] == 10
    assert "maxReplicas 10" in result.detail and "2 replicas will not start" in result.detail, result.detail


def test_the_operator_is_told_once_what_to_change(kube, actuator, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        for _ in range(3):   # the planner asks again every cycle
            scale(actuator, 12)
    told = [m for m in caplog.messages if "hpa serve/web" in m and "maxReplicas 10" in m]
    assert len(told) == 1 and "will not start" in told[0] and "service profile's maxReplicas" in told[0], told


@pytest.mark.parametrize(("asked", "says"), [
    pytest.param(6, "", id="a floor within the HPA's range stands as asked"),
    pytest.param(1, "clamped up to the operator's own minReplicas", id="one below the operator's own is raised"),
])
def test_a_floor_the_cap_does_not_touch_says_nothing_of_it(kube, actuator, caplog, asked, says) -> None:
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        detail = scale(actuator, asked).detail
    assert "maxReplicas" not in detail and "will not start" not in detail and says in detail, detail
    assert not caplog.messages


def test_the_operator_is_told_once_per_bound_whatever_floor_is_asked(kube, actuator, caplog) -> None:
    """The planner's floor moves with demand (11, 12, ... 14 on maxReplicas 10): one warning for the bound, not one
    per floor asked. A new bound (maxReplicas raised to 12, still too few) is told again."""
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        for asked in (11, 12, 13, 14, 12):
            scale(actuator, asked)
        kube.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"maxReplicas": 12}})
        for asked in (13, 14):
            scale(actuator, asked)
    told = [m for m in caplog.messages if "hpa serve/web" in m]
    assert [("maxReplicas 10" in m, "maxReplicas 12" in m) for m in told] == [(True, False), (False, True)], told
