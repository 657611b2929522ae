"""The fake API server's own checks, branch by branch: each kind's semantic validation refuses what the API
server refuses (with the API server's reason, so a schema error cannot stand in for it), and the request routing
serves exactly the verbs and subresources the fake implements, answering 405 for the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakeapi import ApiError, FakeKube, clusterqueue, deployment, hpa, job, node, pod, validate

MERGE = "application/merge-patch+json"


def lease(**spec: str) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default"}, "spec": {"holderIdentity": "a", **spec}}


def tainted(effect: str) -> dict:
    obj = node("n1")
    obj["spec"]["taints"] = [{"key": "k", "effect": effect}]
    return obj


INVALID = [
    ("a taint effect the API server does not know", tainted("Sometimes"),
     "spec.taints: unsupported effect 'Sometimes'"),
    ("an HPA floor of zero", hpa("h", "web", lo=0), "spec.minReplicas: 0 must be >= 1"),
    ("an HPA floor above its ceiling", hpa("h", "web", lo=5, hi=3), "5 must be >= 1 and <= maxReplicas 3"),
    ("a Lease renewTime without microseconds", lease(renewTime="2024-01-01T00:00:00Z"),
     "spec.renewTime: '2024-01-01T00:00:00Z' is not RFC3339 MicroTime"),
    ("a Lease acquireTime without microseconds", lease(acquireTime="2024-01-01T00:00:00Z"),
     "spec.acquireTime: '2024-01-01T00:00:00Z' is not RFC3339 MicroTime"),
    ("a ClusterQueue lending more than its quota", clusterqueue("cq", "tide", 8, lending=9),
     "h100/nvidia.com/gpu: lendingLimit > nominalQuota"),
    ("negative Deployment replicas", deployment("d", replicas=-1), "spec.replicas must be >= 0"),
    ("negative Job parallelism", job("j", parallelism=-1), "spec.parallelism must be >= 0"),
    ("negative Job completions", job("j", completions=-1), "spec.completions must be >= 0"),
    ("an Indexed Job without completions", job("j", indexed=True), "spec.completions: Required value"),
]
VALID = [tainted("NoSchedule"), hpa("h", "web", lo=3, hi=3), lease(renewTime="2024-01-01T00:00:00.000001Z"),
         clusterqueue("cq", "tide", 8, lending=8), deployment("d", replicas=0), job("j", parallelism=0),
         job("j", parallelism=4, completions=4, indexed=True)]


@pytest.mark.parametrize(("obj", "reason"), [pytest.param(o, r, id=name) for name, o, r in INVALID])
def test_each_kinds_semantic_checks_refuse_what_the_api_server_refuses(obj: dict, reason: str) -> None:
    with pytest.raises(ApiError) as info:
        validate(obj)
    assert info.value.code == 422 and reason in info.value.message, info.value.message


@pytest.mark.parametrize("obj", [pytest.param(o, id=o["kind"]) for o in VALID])
def test_valid_objects_of_the_same_kinds_pass(obj: dict) -> None:
    validate(obj)


@pytest.fixture
def served() -> Iterator[FakeKube]:
    """Not the `kube` fixture: these requests include verbs gputide's RBAC does not grant, on purpose."""
    with FakeKube() as kube:
        for obj in (node("n1"), pod("p", phase="Pending"), pod("q", node_name="n1"), deployment("d")):
            kube.add(obj)
        yield kube


ROUTES = [
    ("GET", "/api/v1/nodes", None, None, 200),
    ("GET", "/api/v1/nodes?watch=true&timeoutSeconds=0", None, None, 200),
    ("POST", "/api/v1/nodes?watch=true", None, node("n2"), 201),          # a create, whatever the query says
    ("GET", "/api/v1/nodes/n1", None, None, 200),
    ("PUT", "/api/v1/nodes/n1", None, "stored", 200),
    ("PATCH", "/api/v1/nodes/n1", MERGE, {"metadata": {"labels": {"x": "y"}}}, 200),
    ("PATCH", "/api/v1/nodes/n1", "application/strategic-merge-patch+json", {}, 415),
    ("PATCH", "/api/v1/nodes/n1/bogus", "application/json-patch+json", [], 415),   # 415 before the route's 405
    ("DELETE", "/api/v1/nodes/n1", None, None, 405),                 # only pods are deleted through the API
    ("DELETE", "/api/v1/namespaces/default/pods/q", None, None, 200),
    ("GET", "/api/v1/nodes/n1/list", None, None, 405),               # a subresource named like a shape
    ("GET", "/api/v1/nodes/n1/item", None, None, 405),
    ("PATCH", "/api/v1/namespaces/default/pods/p/status", MERGE, {"status": {"phase": "Running"}}, 200),
    ("PATCH", "/api/v1/nodes/n1/status", MERGE, {"status": {}}, 405),
    ("PUT", "/api/v1/namespaces/default/pods/p/status", None, {}, 405),
    ("POST", "/api/v1/namespaces/default/pods/p/binding", None,
     {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}, 201),
    ("POST", "/api/v1/namespaces/default/pods/q/eviction", None, {"metadata": {"name": "q"}}, 201),
    ("POST", "/apis/apps/v1/namespaces/default/deployments/d/eviction", None, {"metadata": {"name": "d"}}, 405),
    ("GET", "/apis/apps/v1/namespaces/default/deployments/d/scale", None, None, 200),
    ("PATCH", "/apis/apps/v1/namespaces/default/deployments/d/scale", MERGE, {"spec": {"replicas": 3}}, 200),
    ("PUT", "/apis/apps/v1/namespaces/default/deployments/d/scale", None, {}, 405),
    ("GET", "/api/v1/namespaces/default/pods/p/scale", None, None, 405),
]


@pytest.mark.parametrize(("method", "path", "content_type", "body", "code"),
                         [pytest.param(*row, id=f"{row[0]} {row[1]}") for row in ROUTES])
def test_routes_serve_the_implemented_verbs_only(served: FakeKube, method, path, content_type, body, code) -> None:
    if body == "stored":
        body = served.get("nodes", "n1")
    answered, _ = served.dispatch(method, path, content_type, body)
    assert answered == code
