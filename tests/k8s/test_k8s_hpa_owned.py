"""An HPA another controller generates and keeps (KEDA's `keda-hpa-<ScaledObject>`, controlled by its ScaledObject)
is not gputide's to floor: its owner writes the spec back from its own (KEDA's ScaledObject controller updates the
HPA whenever it differs from the ScaledObject's minReplicaCount), so a floor written there is undone within
moments, reported APPLIED, and written again every cycle. `ScaleInference` refuses it, naming the owner, and changes
nothing."""

from __future__ import annotations

import numpy as np
from fakeapi import FakeKube, deployment, hpa

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def test_an_hpa_a_scaledobject_controls_is_refused_and_left_alone(kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(deployment("web", "serve", replicas=2))
    keda = hpa("keda-hpa-web", "web", "serve", lo=2, hi=10)
    keda["metadata"]["ownerReferences"] = [{
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "web",
        "uid": "6f1c1d2e-0000-4000-8000-000000000001", "controller": True, "blockOwnerDeletion": True}]
    kube.add(keda)
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(
        ScaleInference(reason="tide", service="serve/web", replicas=6, previous_replicas=2), SNAP)
    assert result.outcome is Outcome.FAILED
    assert "ScaledObject web" in result.detail
    h = kube.get("horizontalpodautoscalers", "keda-hpa-web", "serve")
    assert h["spec"]["minReplicas"] == 2 and not (h["metadata"].get("annotations") or {})
    assert kube.get("deployments", "web", "serve")["spec"]["replicas"] == 2   # nor the scale the HPA owns


def test_an_hpa_with_an_owner_that_is_no_controller_still_gets_the_floor(kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(deployment("web", "serve", replicas=2))
    mine = hpa("web", "web", "serve", lo=2, hi=10)
    mine["metadata"]["ownerReferences"] = [{   # e.g. garbage-collected with its app's object, written by people
        "apiVersion": "v1", "kind": "ConfigMap", "name": "web-app", "uid": "6f1c1d2e-0000-4000-8000-000000000002"}]
    kube.add(mine)
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(
        ScaleInference(reason="tide", service="serve/web", replicas=6, previous_replicas=2), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("horizontalpodautoscalers", "web", "serve")["spec"]["minReplicas"] == 6
