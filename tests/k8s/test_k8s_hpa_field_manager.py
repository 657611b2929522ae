"""gputide's writes of an inference floor carry its own field manager (`gputide`), so they show as gputide's in the
object's managedFields rather than as the generic "OpenAPI-Generator" every Python client shares: a GitOps tool can
then be told to leave them alone by manager (Argo CD's `ignoreDifferences.managedFieldsManagers: [gputide]`)
instead of reverting the floor at each sync."""

from __future__ import annotations

from urllib.parse import parse_qs

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.mark.parametrize("with_hpa", [True, False], ids=["hpa floor", "deployment scale"])
def test_every_scale_write_names_gputide_as_its_field_manager(kube: FakeKube, api, clock, sleeps,
                                                              with_hpa: bool) -> None:
    kube.add(deployment("web", "serve"))
    if with_hpa:
        kube.add(hpa("web", "web", "serve", lo=2, hi=10))
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(
        ScaleInference(reason="tide", service="serve/web", replicas=5, previous_replicas=2), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    writes = [r for r in kube.requests if r.method == "PATCH" and "/events" not in r.path]
    assert writes and all(parse_qs(r.query).get("fieldManager") == ["gputide"] for r in writes), writes
