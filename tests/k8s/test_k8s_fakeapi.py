"""The fake API server itself answers like the real one where the actuator depends on it.

If the fake were lenient (accepting a stale resourceVersion, an invalid body, a strategic merge patch on a
custom resource), the actuator tests would pass against behaviour no cluster has; these cases pin it down,
through the official client as the actuator uses it.
"""

from __future__ import annotations

import datetime as dt

import pytest
from fakeapi import FakeKube, clusterqueue, deployment, hpa, merge_patch, node, pdb, pod
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

MERGE = "application/merge-patch+json"


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 2))
    kube.add(pod("p", labels={"app": "p"}, node_name="n1"))
    kube.add(pod("q", scheduler="gputide", phase="Pending"))
    kube.add(hpa("h", "web"))
    kube.add(clusterqueue("cq", "tide", 8, lending=4))
    kube.mutate("nodes", "n1", "", {"metadata": {"labels": {"zone": "a"}}})   # n1 moves past resourceVersion 1
    return kube


def lease_body(renew: object, rv: str | None = None) -> dict:
    meta = {"name": "l", "namespace": "default", **({"resourceVersion": rv} if rv else {})}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": "a", "renewTime": renew}}


CASES = [
    ("stale resourceVersion in a merge patch", 409,
     lambda c: c.patch_node("n1", {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}}, _content_type=MERGE)),
    ("strategic merge patch (the client's default) is refused", 415,
     lambda c: c.patch_node("n1", {"metadata": {"labels": {"x": "y"}}})),
    ("an invalid taint effect", 422,
     lambda c: c.patch_node("n1", {"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}, _content_type=MERGE)),
    ("an unknown field fails strict schema validation", 422,
     lambda c: c.patch_node("n1", {"spec": {"colour": "blue"}}, _content_type=MERGE)),
    ("eviction of an unknown pod", 404,
     lambda c: c.create_namespaced_pod_eviction("ghost", "default", {"metadata": {"name": "ghost"}})),
    ("eviction whose body names another pod", 400,
     lambda c: c.create_namespaced_pod_eviction("p", "default", {"metadata": {"name": "q"}})),
    ("binding an already bound pod", 409, lambda c: c.create_namespaced_pod_binding(
        "p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}})),
    ("an unsupported field selector", 400, lambda c: c.list_pod_for_all_namespaces(field_selector="spec.colour=x")),
    ("reading an unknown node", 404, lambda c: c.read_node("n9")),
]


@pytest.mark.parametrize(("code", "call"), [pytest.param(code, call, id=name) for name, code, call in CASES])
def test_core_api_errors(cluster: FakeKube, api, code, call) -> None:
    with pytest.raises(ApiException) as info:
        call(k8s.CoreV1Api(api))
    assert info.value.status == code


@pytest.mark.parametrize(
    ("patch", "code"),
    [
        pytest.param({"spec": {"minReplicas": 11}}, 422, id="HPA minReplicas above maxReplicas"),
        pytest.param({"spec": {"minReplicas": 0}}, 422, id="HPA minReplicas of zero"),
        pytest.param({"spec": {"minReplicas": 3}}, 200, id="a valid HPA floor"),
    ],
)
def test_hpa_validation(cluster: FakeKube, api, patch, code) -> None:
    call = k8s.AutoscalingV2Api(api).patch_namespaced_horizontal_pod_autoscaler
    if code == 200:
        assert call("h", "default", patch, _content_type=MERGE).spec.min_replicas == 3
        return
    with pytest.raises(ApiException) as info:
        call("h", "default", patch, _content_type=MERGE)
    assert info.value.status == code


@pytest.mark.parametrize(
    ("renew", "code"),
    [
        pytest.param("2024-01-01T00:00:00.000001Z", 201, id="MicroTime with six digits"),
        pytest.param(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), 422,
                     id="a whole-second datetime loses its fraction in the client and is refused"),
    ],
)
def test_lease_microtime(kube: FakeKube, api, renew, code) -> None:
    call = k8s.CoordinationV1Api(api).create_namespaced_lease
    if code == 201:
        call("default", lease_body(renew))
        assert kube.get("leases", "l", "default")["spec"]["renewTime"].endswith(".000001+00:00")
        return
    with pytest.raises(ApiException) as info:
        call("default", lease_body(renew))
    assert info.value.status == code


def test_lease_create_twice_and_update_without_version(kube: FakeKube, api) -> None:
    coord = k8s.CoordinationV1Api(api)
    coord.create_namespaced_lease("default", lease_body("2024-01-01T00:00:00.000001Z"))
    with pytest.raises(ApiException) as twice:
        coord.create_namespaced_lease("default", lease_body("2024-01-01T00:00:00.000001Z"))
    with pytest.raises(ApiException) as unversioned:
        coord.replace_namespaced_lease("l", "default", lease_body("2024-01-01T00:00:01.000001Z"))
    assert (twice.value.status, unversioned.value.status) == (409, 422)


def test_eviction_respects_the_pdb_and_consumes_it(cluster: FakeKube, api) -> None:
    cluster.add(pdb("p", "default", {"app": "p"}, allowed=1))
    cluster.add(pod("p2", labels={"app": "p"}, node_name="n1"))
    core = k8s.CoreV1Api(api)
    core.create_namespaced_pod_eviction("p", "default", {"metadata": {"name": "p"}}, _preload_content=False)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_eviction("p2", "default", {"metadata": {"name": "p2"}})
    assert info.value.status == 429
    assert cluster.get("pods", "p", "default") is None and cluster.get("pods", "p2", "default") is not None


def test_clusterqueue_lending_limit_cannot_exceed_nominal(cluster: FakeKube, api) -> None:
    body = cluster.get("clusterqueues", "cq")
    body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 2
    with pytest.raises(ApiException) as info:
        k8s.CustomObjectsApi(api).patch_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta1", "clusterqueues", "cq", {"spec": body["spec"]})
    assert info.value.status == 422


def test_injected_faults_are_consumed_in_order(cluster: FakeKube, api) -> None:
    cluster.inject("GET", r"/nodes/n1$", 500, count=2)
    core, codes = k8s.CoreV1Api(api), []
    for _ in range(3):
        try:
            core.read_node("n1", _preload_content=False)
            codes.append(200)
        except ApiException as exc:
            codes.append(exc.status)
    assert codes == [500, 500, 200]


def replicas_managers(kube: FakeKube) -> list[tuple[str, str | None]]:
    """(manager, subresource) of every managedFields entry of serve/web owning f:spec.f:replicas."""
    fields = kube.get("deployments", "web", "serve")["metadata"].get("managedFields") or []
    return [(e["manager"], e.get("subresource")) for e in fields
            if e["operation"] == "Update" and e["fieldsType"] == "FieldsV1" and "f:replicas" in e["fieldsV1"]["f:spec"]]


def test_a_deployments_replicas_belong_to_the_field_manager_that_changed_them_last() -> None:
    """As the API server's Update operation keeps metadata.managedFields: gputide's decision whether a Deployment's
    count is still its own reads who owns f:spec.f:replicas, so the fake must move it as the real server does. Its own
    fake: the patch of a Deployment itself is one gputide's RBAC does not grant (the `kube` fixture's check)."""
    with FakeKube() as kube, kube.client() as api:
        manages(kube, k8s.AppsV1Api(api))


def manages(kube: FakeKube, apps: k8s.AppsV1Api) -> None:
    kube.add(deployment("web", "serve", replicas=6), manager="kubectl-client-side-apply")
    assert replicas_managers(kube) == [("kubectl-client-side-apply", None)]
    apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 2}}, field_manager="gputide",
                                           _content_type=MERGE)
    assert replicas_managers(kube) == [("gputide", "scale")]   # taken from the creator, whose other fields stay
    fields = kube.get("deployments", "web", "serve")["metadata"]["managedFields"]
    assert {e["manager"] for e in fields} == {"kubectl-client-side-apply", "gputide"}
    assert [e["fieldsV1"] for e in fields if e["manager"] == "gputide"] == [{"f:spec": {"f:replicas": {}}}]
    kube.mutate("deployments", "web", "serve", {"status": {"observedGeneration": 3}}, manager="kube-controller")
    kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 2}}, manager="kubectl-edit")   # unchanged
    assert replicas_managers(kube) == [("gputide", "scale")]   # neither changed the count: still gputide's
    apps.patch_namespaced_deployment("web", "serve", {"spec": {"replicas": 5}}, _content_type=MERGE)
    assert replicas_managers(kube) == [("OpenAPI-Generator", None)]   # no fieldManager: the User-Agent's prefix
    apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 3}}, field_manager="gputide",
                                           _content_type=MERGE)
    kube.mutate("deployments", "web", "serve", {"metadata": {"managedFields": [{}]}, "spec": {"paused": True}})
    assert "managedFields" not in kube.get("deployments", "web", "serve")["metadata"]   # stripped: not tracked
    kube.delete("deployments", "web", "serve")
    kube.add(deployment("web", "serve"), manager=None)
    assert "managedFields" not in kube.get("deployments", "web", "serve")["metadata"]


SSA_WITHOUT_REPLICAS = [{"manager": "kustomize-controller", "operation": "Apply", "apiVersion": "apps/v1",
                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:selector": {}, "f:template": {}}}}]


def test_writes_the_real_api_server_does_not_track_are_not_tracked() -> None:
    """The real server's skip rules (fieldmanager skipnonapplied.go, scalehandler.go; kubernetes#131892): an update of
    a Deployment with no managedFields records nothing, and a scale write records nothing where no entry owns
    spec.replicas (applied server-side from a manifest without them: Flux, Argo CD); once an update has made some
    manager their owner, a scale write takes them. Before, the fake named the writer their owner in both cases, so
    gputide's count looked gputide's where the real server tells no one's."""
    with FakeKube() as kube, kube.client() as api:
        apps = k8s.AppsV1Api(api)
        kube.add(deployment("web", "serve", replicas=6), manager=None)
        apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 2}}, field_manager="gputide",
                                               _content_type=MERGE)
        kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 3, "paused": True}}, manager="kubectl-edit")
        dep = kube.get("deployments", "web", "serve")
        assert dep["spec"]["replicas"] == 3 and "managedFields" not in dep["metadata"]
        kube.delete("deployments", "web", "serve")
        kube.add(deployment("web", "serve", replicas=6), manager=None)
        kube.mutate("deployments", "web", "serve", {"metadata": {"managedFields": SSA_WITHOUT_REPLICAS}},
                    manager="kustomize-controller")
        assert kube.get("deployments", "web", "serve")["metadata"]["managedFields"] == SSA_WITHOUT_REPLICAS
        apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 2}}, field_manager="gputide",
                                               _content_type=MERGE)
        assert kube.get("deployments", "web", "serve")["metadata"]["managedFields"] == SSA_WITHOUT_REPLICAS
        assert replicas_managers(kube) == [] and kube.get("deployments", "web", "serve")["spec"]["replicas"] == 2
        kube.mutate("deployments", "web", "serve", {"spec": {"replicas": 4}}, manager="kubectl-edit")
        assert replicas_managers(kube) == [("kubectl-edit", None)]   # an update of a tracked object is tracked
        apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 1}}, field_manager="gputide",
                                               _content_type=MERGE)
        assert replicas_managers(kube) == [("gputide", "scale")]   # some entry owned them: the scale takes them



def test_an_empty_managed_fields_list_sent_changes_nothing() -> None:
    """The real server takes `managedFields: []` in a write as no change (only [{}] strips them); the fake stripped
    every entry, so a test could see a count turn untracked that the real server keeps gputide's."""
    with FakeKube() as kube, kube.client() as api:
        apps = k8s.AppsV1Api(api)
        kube.add(deployment("web", "serve", replicas=6), manager="kubectl-client-side-apply")
        apps.patch_namespaced_deployment_scale("web", "serve", {"spec": {"replicas": 2}}, field_manager="gputide",
                                               _content_type=MERGE)
        kube.mutate("deployments", "web", "serve", {"metadata": {"managedFields": []}, "spec": {"paused": True}},
                    manager="kubectl-edit")
        assert replicas_managers(kube) == [("gputide", "scale")]

json_values = st.recursive(st.none() | st.integers() | st.text(max_size=3),
                           lambda inner: st.dictionaries(st.text(max_size=2), inner, max_size=3), max_leaves=8)


@given(json_values, json_values)
def test_merge_patch_follows_rfc7386(target, patch) -> None:
    result = merge_patch(target, patch)
    if not isinstance(patch, dict):
        assert result == patch
        return
    for key, value in patch.items():
        if value is None:
            assert key not in result
        elif not isinstance(value, dict):
            assert result[key] == value
    if isinstance(target, dict):
        for key in set(target) - set(patch):
            assert result[key] == target[key]


def test_a_held_watch_cache_serves_lists_at_a_version_older_state_but_never_older_than_asked(
        kube: FakeKube, api) -> None:
    """`hold_cache()`: a list at "0" gets the state the cache froze (a lagging API server's), one at a version the
    cache has not reached 504 Too large resource version, one without a version what exists now."""
    core = k8s.CoreV1Api(api)

    def names(**kw) -> tuple[str, list[str]]:
        out = core.list_pod_for_all_namespaces(**kw)
        return out.metadata.resource_version, [p.metadata.name for p in out.items]

    held = kube.add(pod("a"))["metadata"]["resourceVersion"]
    kube.hold_cache()
    now = kube.add(pod("b"))["metadata"]["resourceVersion"]
    assert names(resource_version="0") == (held, ["a"])
    assert names(resource_version=held, resource_version_match="NotOlderThan") == (held, ["a"])
    with pytest.raises(ApiException) as err:
        names(resource_version=now, resource_version_match="NotOlderThan")
    assert err.value.status == 504 and "Too large resource version" in err.value.body
    assert names() == (now, ["a", "b"])   # consistent
    kube.release_cache()
    assert names(resource_version="0") == names(resource_version=now) == (now, ["a", "b"])
    with pytest.raises(ApiException) as err:
        names(resource_version_match="NotOlderThan")
    assert err.value.status == 400
