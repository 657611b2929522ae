"""The HPA floor of `ScaleInference` against the fake API server: gputide raises an HPA's minReplicas as a
predictive floor and lowers it again when the tide recedes, but never below the minReplicas the operator set
(remembered on the HPA, so a restarted controller knows it too) nor above maxReplicas."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import HPA_OWN_MIN_ANNOTATION, KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def floor(actuator: KubernetesActuator, replicas: int, previous: int = 3) -> str:
    result = actuator.apply(ScaleInference(reason="tide", service="serve/web", replicas=replicas,
                                           previous_replicas=previous), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result.detail


def stored(kube: FakeKube) -> tuple[int, str | None]:
    h = kube.get("horizontalpodautoscalers", "web", "serve")
    return h["spec"]["minReplicas"], (h["metadata"].get("annotations") or {}).get(HPA_OWN_MIN_ANNOTATION)


@pytest.fixture
def serving(kube: FakeKube) -> FakeKube:
    kube.add(deployment("web", "serve"))
    kube.add(hpa("web", "web", "serve", lo=3, hi=10))
    return kube


def test_the_floor_lowered_stops_at_the_operators_own_min_replicas(serving: FakeKube, api, clock, sleeps) -> None:
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    floor(actuator, 8)
    assert stored(serving) == (8, "3")
    # a new controller (restart, another leader): the operator's 3 is read back from the HPA, not the raised 8
    again = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    assert "clamped" in floor(again, 1, previous=8)
    assert stored(serving) == (3, None)   # back at the operator's own: the note is gone, minReplicas theirs again


def test_a_floor_never_goes_below_the_operators_min_replicas(serving: FakeKube, api, clock, sleeps) -> None:
    floor(KubernetesActuator(api, sleep=sleeps.append, clock=clock), 1)
    assert stored(serving) == (3, None)


def test_an_operator_edit_after_the_floor_is_given_back_is_theirs(serving: FakeKube, api, clock, sleeps) -> None:
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    floor(actuator, 6)
    floor(actuator, 2, previous=6)
    serving.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"minReplicas": 5}})
    floor(actuator, 7, previous=5)
    floor(actuator, 1, previous=7)
    assert stored(serving) == (5, None)


def test_a_floor_above_max_replicas_is_clamped_to_it(serving: FakeKube, api, clock, sleeps) -> None:
    assert "clamped" in floor(KubernetesActuator(api, sleep=sleeps.append, clock=clock), 40)
    assert stored(serving) == (10, "3")
