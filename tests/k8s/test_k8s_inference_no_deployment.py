"""A profiled service that no HPA targets and no Deployment runs (a StatefulSet's, an operator's: its pods are
inference since `k8s_pods.servable`, so the capacity planner scales it) is refused with what is missing.

`InferenceScaling.scale` floors the HPA that targets the service, else scales its Deployment (`_scale_deployment`).
With neither, the Deployment's read got a 404 and the action failed, every cooldown, with "deployment ns/name: HTTP
404 ... not found" (code 404): it named neither the missing HPA nor what gputide can scale. Now it is the actuator's
refusal (FAILED, code "refused", logged at WARNING once while it lasts), saying both; nothing is written. Once an
HPA targets its StatefulSet, it is floored as before."""

from __future__ import annotations

import logging

from fakeapi import FakeKube, hpa
from test_k8s_hpa_floor_restore import SNAP

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import ScaleInference

TOLD = ("no HPA targets serving/chat and there is no Deployment serving/chat: not scaled (gputide scales a "
        "Deployment or floors an HPA: give a StatefulSet's or an operator's service an HPA, or leave it out of the "
        "profiles)")


def scale(act: KubernetesActuator, replicas: int, previous: int) -> ActionResult:
    return act.apply(ScaleInference(reason="tide", service="serving/chat", replicas=replicas,
                                    previous_replicas=previous), SNAP)


def test_a_service_no_hpa_targets_and_no_deployment_runs_is_refused_saying_what_is_missing(
        kube: FakeKube, api, clock, sleeps, caplog) -> None:
    act = KubernetesActuator(api, sleep=sleeps.append, clock=clock, floor_owner="gputide/gputide-controller")
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        first, again = scale(act, 3, 1), scale(act, 3, 1)
    for result in (first, again):
        assert (result.outcome, result.code, result.detail) == (Outcome.FAILED, "refused", TOLD), result
    assert [m for m in caplog.messages if "no HPA targets" in m] == [TOLD]   # once while it lasts
    assert not [r for r in kube.requests if r.method in ("POST", "PUT", "PATCH")]

    # an HPA targeting the StatefulSet, and the same action floors it, as before
    target = hpa("chat", "chat", "serving", lo=1, hi=8)
    target["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    kube.add(target)
    result = scale(act, 3, 1)
    assert (result.outcome, result.detail) == (Outcome.APPLIED, "hpa serving/chat minReplicas = 3"), result
    assert kube.get("horizontalpodautoscalers", "chat", "serving")["spec"]["minReplicas"] == 3
