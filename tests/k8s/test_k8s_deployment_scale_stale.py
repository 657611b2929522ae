"""A Deployment no HPA scales is scaled only from the count the plan saw. Its scale was written blind (no
resourceVersion, the action's previous_replicas ignored): an operator's scale-up for a traffic spike, made between the
snapshot and the action, was overwritten with gputide's smaller count. Now a count someone else set since the plan is
theirs (RETRY, code 409, nothing written), and the write carries the resourceVersion read, so one set between the
read and the write is a 409, read again and found stale too."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, deployment

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(kube: FakeKube, api, clock, sleeps) -> KubernetesActuator:
    kube.add(deployment("web", "serve", replicas=4))
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def scale(actuator: KubernetesActuator, replicas: int, previous: int = 4):
    return actuator.apply(ScaleInference(reason="tide", service="serve/web", replicas=replicas,
                                         previous_replicas=previous), SNAP)


def operator_scales(kube: FakeKube, replicas: int) -> None:
    kube.mutate("deployments", "web", "serve", {"spec": {"replicas": replicas}})


def replicas(kube: FakeKube) -> int:
    return kube.get("deployments", "web", "serve")["spec"]["replicas"]


@pytest.mark.parametrize("want", [3, 5], ids=["a lend", "a raise"])
def test_an_operator_scale_since_the_plan_is_not_overwritten(kube: FakeKube, actuator, want) -> None:
    kube.before("GET", r"/deployments/web$", lambda: operator_scales(kube, 10))   # a spike, after the snapshot
    result = scale(actuator, want)
    assert result.outcome is Outcome.RETRY and result.code == "409", result.detail
    assert "10 replicas, not the 4 the plan saw" in result.detail
    assert replicas(kube) == 10
    assert kube.calls("PATCH", r"/scale$") == []


def test_an_operator_scale_between_the_read_and_the_write_is_not_overwritten(kube: FakeKube, actuator) -> None:
    kube.before("PATCH", r"/deployments/web/scale", lambda: operator_scales(kube, 10))
    result = scale(actuator, 3)
    assert result.outcome is Outcome.RETRY and result.code == "409", result.detail
    assert replicas(kube) == 10
    [write] = kube.calls("PATCH", r"/scale$")   # refused by its resourceVersion, then read again: stale
    assert write.body["metadata"]["resourceVersion"]


def test_the_count_the_plan_saw_is_scaled_with_its_resource_version(kube: FakeKube, actuator) -> None:
    seen = kube.get("deployments", "web", "serve")["metadata"]["resourceVersion"]
    result = scale(actuator, 3)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert replicas(kube) == 3
    [write] = kube.calls("PATCH", r"/scale$")
    assert write.body == {"metadata": {"resourceVersion": seen}, "spec": {"replicas": 3}}


def test_a_count_already_there_is_left_as_it_is(kube: FakeKube, actuator) -> None:
    # the same action tried again after its write got no answer but landed: nothing to change, not stale
    operator_scales(kube, 3)
    result = scale(actuator, 3)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert replicas(kube) == 3
    assert kube.calls("PATCH", r"/scale$") == []


@pytest.mark.parametrize("now", [6, 2], ids=["above the plan's count", "below it"])
def test_a_raise_is_written_whatever_the_count_the_plan_saw(kube: FakeKube, actuator, now) -> None:
    # the plan's count lags (kube-state-metrics scraped before the last scale, or placed pods with some pending):
    # a reclaim to 8 must not wait a cycle for the bookkeeping, and 8 lowers no one's count
    operator_scales(kube, now)
    result = scale(actuator, 8)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert replicas(kube) == 8
