"""A pod with `spec.schedulingGates` is not ready to be scheduled (Kueue's pod integration, topology-aware
scheduling and other admission controllers gate pods until they admit them): kube-scheduler keeps it out of its
queue, and so must the secondary scheduler. Against the fake API server, which refuses to bind a gated pod (409)
and gives it PodScheduled=False/SchedulingGated, as the real one does."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339

GATE = [{"name": "kueue.x-k8s.io/admission"}]


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def gated(name: str, gpus: int, clock, *, priority: int = 0, age_s: float = 0.0) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["schedulingGates"] = list(GATE)
    p["spec"]["priority"] = priority
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age_s)
    return p


def ungate(kube: FakeKube, name: str) -> None:
    """What Kueue does once it admits the pod's workload: the gate is removed (merge patch: the field goes)."""
    kube.mutate("pods", name, "default", {"spec": {"schedulingGates": None}})


def scheduled_condition(kube: FakeKube, name: str) -> dict:
    conditions = (kube.get("pods", name, "default").get("status") or {}).get("conditions") or []
    return next(c for c in conditions if c["type"] == "PodScheduled")


def test_a_gated_pod_that_fits_nowhere_evicts_reserves_and_writes_nothing(kube: FakeKube, api, clock) -> None:
    kube.add(node("a", 2))
    low = pod("low", gpus=2, node_name="a")
    low["spec"]["priority"] = 1
    kube.add(low)
    kube.add(gated("urgent", 2, clock, priority=100, age_s=3600))   # would preempt, and starves long enough to hold
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, starving_s=600)
    assert sched.schedule_once() == {} and sched.reasons == {}
    assert sched.preempted == [] and sched.starving == []
    assert kube.get("pods", "low", "default") is not None and not kube.calls("POST", r"/eviction$")
    assert RESERVATION_ANNOTATION not in (kube.get("nodes", "a")["metadata"].get("annotations") or {})
    assert not kube.calls("POST", r"/binding$") and not kube.calls("PATCH", r"/status$")
    assert not kube.calls("POST", r"/events$")
    assert scheduled_condition(kube, "urgent")["reason"] == "SchedulingGated"   # the API server's, kept
    ungate(kube, "urgent")   # admitted: from now on a pod like any other, which preempts as any would
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/low", "a")]
    assert "default/urgent" in json.loads(kube.get("nodes", "a")["metadata"]["annotations"][RESERVATION_ANNOTATION])
    assert scheduled_condition(kube, "urgent")["reason"] == "Unschedulable"
    assert sched.schedule_once() == {"default/urgent": "a"}


@pytest.fixture
def watching(kube: FakeKube, api, clock):
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=True, watch_s=1.0)
    yield sched.start()
    sched.close()


def test_a_gated_pod_is_never_bound_and_is_bound_in_the_pass_after_its_gates_go(kube: FakeKube, watching,
                                                                                  clock) -> None:
    kube.add(node("a", 8))
    kube.add(gated("train-0", 1, clock))
    eventually(lambda: all(w.synced for w in watching.watches.values()))
    # The watches began before the node was added, and each follows the API server on a thread of its own: synced
    # says their first lists came, not that the nodes watch has applied node a's event, which may lag the pending
    # pods' (nothing orders two watches). A pass before it does places the pod nowhere.
    eventually(lambda: [n["name"] for n in watching.nodes_view()] == ["a"])
    watching.wait_for_work(0)
    assert watching.pending() == [] and watching.schedule_once() == {}
    assert not kube.calls("POST", r"/binding$")   # no 409 "non-empty .spec.schedulingGates" every pass
    ungate(kube, "train-0")
    assert watching.wait_for_work(10.0)           # the watch delivers the pod again once its gates are gone
    eventually(lambda: [r["pod"] for r in watching.pending()] == ["train-0"])
    assert watching.schedule_once() == {"default/train-0": "a"}
    assert kube.get("pods", "train-0", "default")["spec"]["nodeName"] == "a"


def test_the_fake_api_server_refuses_to_bind_a_gated_pod_and_to_add_a_gate(kube: FakeKube, api, clock) -> None:
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    kube.add(node("a", 8))
    kube.add(gated("p", 1, clock))
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "default"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "a"}}
    with pytest.raises(ApiException) as refused:
        k8s.CoreV1Api(api).create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    assert refused.value.status == 409 and "non-empty .spec.schedulingGates" in str(refused.value.body)
    with pytest.raises(Exception, match="only deletion is allowed"):
        kube.mutate("pods", "p", "default", {"spec": {"schedulingGates": [*GATE, {"name": "another"}]}})
