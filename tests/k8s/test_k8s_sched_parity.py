"""Where the secondary scheduler must decide as kube-scheduler does, or a pod lands where it cannot run (or waits
where it could): against the fake API server.

* the Binding names the pod's uid, the API server's precondition: a pod deleted and created again under the same
  name between the pass's read and its Binding (a StatefulSet's replica, a new revision) is not bound to the node
  chosen for its predecessor;
* a cordoned node admits a pod that tolerates `node.kubernetes.io/unschedulable:NoSchedule` (kube-scheduler's
  NodeUnschedulable filter): DaemonSet-like and drain-tolerant pods are placed as kube-scheduler places them;
* a pod with DRA resource claims (`spec.resourceClaims`) waits, told why: only kube-scheduler's DynamicResources
  plugin allocates its claims, and bound without that allocation the kubelet never starts it.
"""

from __future__ import annotations

import copy

import pytest
from fakeapi import ApiError, FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def pending(name: str, gpus: int = 1, **spec) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"].update(spec)
    return p


@pytest.fixture
def uid_checked(kube: FakeKube, monkeypatch):
    """The fake API server with the real one's UID precondition on a Binding (BindingREST.setPodNodeAndMetadata:
    a Binding whose metadata.uid is not the pod's answers 409)."""
    bind = type(kube)._bind

    def checked(self, namespace: str, name: str, body: dict) -> dict:
        uid = (body.get("metadata") or {}).get("uid")
        stored = self._existing("pods", namespace, name)["metadata"]["uid"]
        if uid and uid != stored:
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}, "
                                            f"UID in object meta: {stored}")
        return bind(self, namespace, name, body)

    monkeypatch.setattr(type(kube), "_bind", checked)
    return kube


def test_a_pod_created_again_under_the_same_name_is_not_bound_where_its_predecessor_was_to_go(uid_checked, api):
    kube = uid_checked
    kube.add(node("a", 8, labels={"pool": "a"}))
    kube.add(node("b", 8, labels={"pool": "b"}))
    kube.add(pending("db-0", nodeSelector={"pool": "a"}))
    again = pending("db-0", nodeSelector={"pool": "b"})   # the StatefulSet's new revision, recreated meanwhile

    def recreate() -> None:
        kube.delete("pods", "db-0", "default")
        kube.add(copy.deepcopy(again))

    kube.before("POST", r"/pods/db-0/binding$", recreate)
    sched = SecondaryScheduler(api, "gputide", first)
    sched.schedule_once()
    assert kube.get("pods", "db-0", "default")["spec"].get("nodeName") is None   # not on "a", against its selector
    assert sched.schedule_once() == {"default/db-0": "b"}                       # placed by its own rules


def test_a_cordoned_node_takes_the_pods_that_tolerate_the_cordon_only(kube: FakeKube, api) -> None:
    cordoned = node("a", 8)
    cordoned["spec"]["unschedulable"] = True
    kube.add(cordoned)
    kube.add(pending("agent", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                            "effect": "NoSchedule"}]))
    kube.add(pending("everyone", tolerations=[{"operator": "Exists"}]))
    kube.add(pending("plain"))
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/agent": "a", "default/everyone": "a", "default/plain": None}
    assert sched.reasons["default/plain"] == "0/1 nodes are available: 1 node(s) were unschedulable."


def test_a_pod_with_dra_resource_claims_waits_told_why_and_preempts_no_one(kube: FakeKube, api) -> None:
    kube.add(node("a", 8))
    low = pod("low", gpus=8, node_name="a")
    low["spec"]["priority"] = 1
    kube.add(low)
    kube.add(node("b", 4))   # urgent fits nowhere: it would preempt low on a
    # the schema the fake validates by is 1.27's (its claim source nested); the scheduler reads the names only
    claim = [{"name": "gpu", "source": {"resourceClaimTemplateName": "one-gpu"}}]
    dra = pending("dra", resourceClaims=claim)
    dra["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    kube.add(dra)
    urgent = pending("urgent", gpus=8, resourceClaims=claim, priority=100)
    kube.add(urgent)
    kube.add(pending("plain"))
    sched = SecondaryScheduler(api, "gputide", first)
    assert sched.schedule_once() == {"default/urgent": None, "default/dra": None, "default/plain": "b"}
    assert [r.path for r in kube.calls("POST", r"/binding$")] == ["/api/v1/namespaces/default/pods/plain/binding"]
    assert sched.reasons["default/dra"] == (
        "0/2 nodes are available: pod uses dynamic resource allocation (spec.resourceClaims: gpu), whose claims only "
        "kube-scheduler allocates: gputide does not bind it.")
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    assert not kube.calls("GET", r"persistentvolumeclaims")   # no volume claims: none listed
