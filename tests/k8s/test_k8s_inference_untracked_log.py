"""`InferenceScaling` kept a set `untracked` (the Deployments it logged) beside a method `_untracked` (the log), two
names one underscore apart for a set and the call that fills it. The method is `_log_untracked` now: it logs, once
per Deployment, that the API server tracks no owner of its spec.replicas, and remembers it in `untracked`; a
Deployment whose managedFields own the replicas is not logged. Behaviour unchanged (test_k8s_deployment_record.py
pins the log through the actuator); this pins the names (fails on the old code: no `_log_untracked`)."""

from __future__ import annotations

import logging

from fakeapi import deployment

from balancer.actuate.k8s_inference import InferenceScaling

OWNS_REPLICAS = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]


def test_the_log_of_untracked_replicas_is_log_untracked_and_fills_the_set_untracked(caplog) -> None:
    scaling = InferenceScaling(None, None, set())   # no call reaches the API: the log reads the Deployment given
    assert not hasattr(scaling, "_untracked") and callable(scaling._log_untracked)
    bare, told = deployment("web", "serve"), deployment("told", "serve")
    told["metadata"]["managedFields"] = OWNS_REPLICAS
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_actuator"):
        for d in (bare, bare, told):
            scaling._log_untracked(d)
    said = [m for m in caplog.messages if "tracks no owner of its spec.replicas" in m]
    assert len(said) == 1 and said[0].startswith("deployment serve/web:"), caplog.messages
    assert scaling.untracked == {"serve/web"}
