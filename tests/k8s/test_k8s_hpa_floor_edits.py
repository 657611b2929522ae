"""An HPA's minReplicas changed by someone else while gputide's floor is raised (an operator's `kubectl edit`, a
GitOps sync of a new value from Git): the new value is the operator's own from then on. gputide records the floor it
wrote beside the operator's own, so a minReplicas that is no longer that floor is known to be someone else's; before,
the stale own value was kept, so gputide lowered an operator's raise and gave back the old minimum."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import HPA_OWN_MIN_ANNOTATION, KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    kube.add(deployment("web", "serve"))
    kube.add(hpa("web", "web", "serve", lo=3, hi=12))
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def floor(actuator: KubernetesActuator, replicas: int) -> None:
    result = actuator.apply(ScaleInference(reason="tide", service="serve/web", replicas=replicas,
                                           previous_replicas=3), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail


def stored(kube: FakeKube) -> tuple[int, str | None]:
    h = kube.get("horizontalpodautoscalers", "web", "serve")
    return h["spec"]["minReplicas"], (h["metadata"].get("annotations") or {}).get(HPA_OWN_MIN_ANNOTATION)


def edit(kube: FakeKube, min_replicas: int) -> None:
    kube.mutate("horizontalpodautoscalers", "web", "serve", {"spec": {"minReplicas": min_replicas}})


def test_an_operator_raise_above_the_floor_is_never_lowered(kube: FakeKube, actuator) -> None:
    floor(actuator, 6)
    edit(kube, 10)          # the operator (or Git) now wants at least 10
    floor(actuator, 7)
    assert stored(kube) == (10, None)   # theirs, and nothing of gputide's left to give back


def test_an_operator_edit_under_a_raised_floor_is_what_is_given_back(kube: FakeKube, actuator) -> None:
    floor(actuator, 8)
    edit(kube, 5)           # their minimum is 5 now, not the 3 gputide first saw
    floor(actuator, 6)
    assert stored(kube) == (6, "5")
    floor(actuator, 1)
    assert stored(kube) == (5, None)


def test_the_floor_gputide_wrote_is_not_taken_for_an_edit(kube: FakeKube, actuator) -> None:
    floor(actuator, 8)
    floor(actuator, 6)
    floor(actuator, 1)
    assert stored(kube) == (3, None)


def test_a_record_without_the_floor_still_gives_back_the_own_min(kube: FakeKube, actuator) -> None:
    # an HPA raised by a controller from before the floor was recorded: its own-min note alone is trusted
    kube.mutate("horizontalpodautoscalers", "web", "serve",
                {"metadata": {"annotations": {HPA_OWN_MIN_ANNOTATION: "3"}}, "spec": {"minReplicas": 8}})
    floor(actuator, 1)
    assert stored(kube) == (3, None)
