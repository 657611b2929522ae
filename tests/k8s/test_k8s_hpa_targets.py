"""`ScaleInference` when the service's HPA scales something other than a Deployment: a StatefulSet, or an Argo
Rollout (whose /scale subresource the HPA drives as it drives a Deployment's). The floor is the HPA's minReplicas
whatever the target's kind; the Deployment's scale subresource is only for a service no HPA scales."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def targeting(kind: str, api_version: str) -> dict:
    h = hpa("web", "web", "serve", lo=2, hi=10)
    h["spec"]["scaleTargetRef"] = {"apiVersion": api_version, "kind": kind, "name": "web"}
    return h


@pytest.mark.parametrize(("kind", "api_version"), [("StatefulSet", "apps/v1"), ("Rollout", "argoproj.io/v1alpha1")])
def test_an_hpa_on_a_statefulset_or_a_rollout_gets_the_floor(kube: FakeKube, api, clock, sleeps, kind,
                                                             api_version) -> None:
    kube.add(targeting(kind, api_version))
    # Argo Rollouts' workloadRef: the Rollout runs the pods of a Deployment of its name, which it keeps at 0
    kube.add(deployment("web", "serve", replicas=0))
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(
        ScaleInference(reason="tide", service="serve/web", replicas=6, previous_replicas=2), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("horizontalpodautoscalers", "web", "serve")["spec"]["minReplicas"] == 6
    assert kube.get("deployments", "web", "serve")["spec"]["replicas"] == 0   # never a second set of pods


def test_an_hpa_on_the_deployment_wins_over_one_on_another_kind_of_the_same_name(kube: FakeKube, api, clock,
                                                                                  sleeps) -> None:
    other = targeting("StatefulSet", "apps/v1")
    other["metadata"]["name"] = "web-sts"
    kube.add(other)
    kube.add(hpa("web", "web", "serve", lo=2, hi=10))
    kube.add(deployment("web", "serve"))
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(
        ScaleInference(reason="tide", service="serve/web", replicas=5, previous_replicas=2), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("horizontalpodautoscalers", "web", "serve")["spec"]["minReplicas"] == 5
    assert kube.get("horizontalpodautoscalers", "web-sts", "serve")["spec"]["minReplicas"] == 2
