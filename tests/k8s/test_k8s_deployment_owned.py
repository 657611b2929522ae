"""A Deployment no HPA scales but another controller keeps (a controlling ownerReference: a KServe
InferenceService, an operator's custom resource) is not gputide's to scale: its owner writes `spec.replicas` back,
so a scale written through deployments/{name}/scale flaps or is silently lost. `ScaleInference` reads the Deployment
first (get) and refuses it (FAILED, code "refused"), naming the owner, logged at WARNING once while it lasts."""

from __future__ import annotations

import logging

import numpy as np
from fakeapi import FakeKube, deployment

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleInference

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
SCALE = ScaleInference(reason="tide", service="serve/web", replicas=6, previous_replicas=2)


def owned(controller: bool) -> dict:
    d = deployment("web", "serve", replicas=2)
    d["metadata"]["ownerReferences"] = [{
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "name": "web",
        "uid": "6f1c1d2e-0000-4000-8000-000000000003", "controller": controller, "blockOwnerDeletion": True}]
    return d


def test_a_deployment_another_controller_keeps_is_refused_and_left_alone(kube: FakeKube, api, clock, sleeps,
                                                                         caplog) -> None:
    kube.add(owned(controller=True))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="balancer.actuate.k8s_actuator"):
        results = [actuator.apply(SCALE, SNAP) for _ in range(3)]   # three cycles proposing it
    for r in results:
        assert r.outcome is Outcome.FAILED and r.code == "refused", r
        assert "InferenceService web (serving.kserve.io/v1beta1)" in r.detail and "not scaled" in r.detail
    assert kube.get("deployments", "web", "serve")["spec"]["replicas"] == 2
    assert not kube.calls("PATCH", r"/deployments/web/scale$")
    warned = [m for m in caplog.records if m.levelno == logging.WARNING and "InferenceService" in m.getMessage()]
    assert len(warned) == 1   # said once, not every cycle


def test_a_deployment_is_read_before_its_scale_and_an_owner_that_is_no_controller_is_scaled(
        kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(owned(controller=False))   # garbage-collected with its owner, but written by people: theirs to scale
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(SCALE, SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("deployments", "web", "serve")["spec"]["replicas"] == 6
    assert kube.calls("GET", r"/namespaces/serve/deployments/web$")   # the controller check needs the object
