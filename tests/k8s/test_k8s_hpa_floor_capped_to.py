"""A floor the HPA's maxReplicas caps carries the cap as data (`ActionResult.capped_to`), for the loop to tell the
capacity planner (tests/loop/test_loop_capped_scales.py): before, only the detail's words said it, and the planner
shrank training for the replicas that would not start every cycle. Any other scale carries None."""

from __future__ import annotations

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
    kube.add(deployment("plain", "serve", replicas=2))   # no HPA: its scale is set directly
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


@pytest.mark.parametrize(("service", "asked", "capped_to"), [
    pytest.param("serve/web", 12, 10, id="a floor above maxReplicas carries the most the HPA runs"),
    pytest.param("serve/web", 10, None, id="a floor at maxReplicas is no cap"),
    pytest.param("serve/web", 6, None, id="a floor within the HPA's range is no cap"),
    pytest.param("serve/web", 1, None, id="a floor raised to the operator's own minReplicas is no cap"),
    pytest.param("serve/plain", 12, None, id="a Deployment without an HPA is scaled as asked"),
])
def test_a_capped_floor_carries_its_cap(kube, actuator, service, asked, capped_to) -> None:
    previous = 10 if service == "serve/web" else 2
    result = actuator.apply(ScaleInference(reason="tide", service=service, replicas=asked,
                                           previous_replicas=previous), SNAP)
    assert result.outcome is Outcome.APPLIED and result.capped_to == capped_to, result
