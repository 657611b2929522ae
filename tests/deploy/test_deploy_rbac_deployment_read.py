"""Capacity shifting reads a Deployment before it writes its scale (a Deployment another controller keeps is
refused): one `get`, granted where --services is (components/capacity), never a write nor a list or watch of
Deployments, whose pod templates say what runs under which ServiceAccount."""

from __future__ import annotations

from api_calls import FLAG_GATED, requests_of, requests_of_command
from test_deploy_manifests import OVERLAYS
from test_deploy_rbac import granted, needs


def test_the_controller_reads_one_deployment_and_writes_only_its_scale():
    deployments = {r for r in requests_of_command("run") if r[:2] == ("apps", "deployments")}
    assert deployments == {("apps", "deployments", "get")}
    assert ("apps", "deployments", "get") in requests_of("balancer.actuate.k8s_inference.InferenceScaling")
    assert FLAG_GATED["run"][("apps", "deployments")] == "services"


def test_the_deployment_read_is_granted_exactly_where_capacity_shifting_runs():
    for overlay in OVERLAYS:
        rights, wanted = granted(overlay), needs(overlay)
        for sa in rights:
            held = {r for r in rights[sa] if r[:2] == ("apps", "deployments")}
            scales = ("apps", "deployments/scale", "patch") in rights[sa]
            assert held == ({("apps", "deployments", "get")} if scales else set()), (overlay, sa, held)
            assert held <= wanted.get(sa, set())
