"""A node the secondary scheduler holds for a pod (it preempted there, or it starved) is held with the pod's CPU and
memory as well as its GPUs: a pod that needs no more GPUs than are left over must not take the CPU or memory the
held pod needs, or that pod would never fit. Against the fake API server, and the filters on their own."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_filters import Offers, why_not
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339
from balancer.noderules import NO_AFFINITY, NO_RULES


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def asking(p: dict, cpu: str = "8", memory: str = "8Gi") -> dict:
    p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
    return p


def pending(name: str, gpus: int, clock, *, age_s: float = 0.0, priority: int = 0, cpu: str = "8",
            memory: str = "8Gi") -> dict:
    p = asking(pod(name, gpus=gpus, scheduler="gputide", phase="Pending"), cpu, memory)
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age_s)
    p["spec"]["priority"] = priority
    return p


def held(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


def holding(n: dict, entries: dict) -> dict:
    n["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps(entries)}
    return n


@pytest.mark.parametrize("b_gpus", [0, 1])
def test_a_starving_pod_keeps_the_cpu_it_needs_on_the_node_it_holds(kube: FakeKube, api, clock, b_gpus: int):
    kube.add(node("a", 2, cpu="8"))
    kube.add(asking(pod("busy", gpus=1, node_name="a"), cpu="6"))   # a: 1 GPU and 2 CPU free
    kube.add(pending("big", 1, clock, age_s=11 * 60))                   # 1 GPU, 8 CPU: fits nowhere, starves
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/big": None} and sched.starving == [("default/big", "a")]
    assert held(kube, "a")["default/big"] | {"expires": None} == {
        "pod": "default/big", "gpus": [], "count": 1, "cpu_milli": 8000, "memory_mib": 8192, "priority": 0,
        "expires": None, "scheduler": "gputide",   # a hold of this scheduler's: given back once the pod no longer waits
        "extended": {"pods": 1.0}}   # its pod slot too, as the filters count it
    kube.delete("pods", "busy", "default")                               # a: 2 GPUs and 8 CPU free
    # as important and older, so placed first (a GPU would be left over); of higher priority, the hold would not
    # count against it (test_k8s_hold_priority)
    kube.add(pending("b", b_gpus, clock, age_s=12 * 60))
    assert sched.schedule_once() == {"default/b": None, "default/big": "a"}
    assert "1 node(s) had cpu reserved for other pods" in sched.reasons["default/b"]
    assert held(kube, "a") == {}


def test_a_preemptor_holds_its_cpu_and_memory_while_its_victims_terminate(kube: FakeKube, api, clock):
    kube.add(node("a", 4, cpu="16"))
    low = asking(pod("low", gpus=4, node_name="a"), cpu="16")
    low["spec"]["priority"] = 1
    kube.add(low)
    kube.add(pending("urgent", 2, clock, priority=50, cpu="12", memory="16Gi"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/low", "a")]
    entry = held(kube, "a")["default/urgent"]
    assert (entry["count"], entry["cpu_milli"], entry["memory_mib"]) == (2, 12000, 16384)
    kube.add(pending("filler", 2, clock, priority=50, cpu="8"))          # 2 GPUs spare, but only 4 CPU
    other = SecondaryScheduler(api, "gputide", most_free, clock=clock, preemption=False)   # another replica
    assert other.schedule_once() == {"default/filler": None, "default/urgent": "a"}
    assert "cpu reserved for other pods" in other.reasons["default/filler"]


def test_a_migrations_reservation_holds_gpus_only_so_pods_without_gpus_still_fit(kube: FakeKube, api, clock):
    kube.add(holding(node("a", 2, cpu="16"), {"default/web": {"pod": "default/web", "gpus": [0, 1], "count": 2,
                                                                "expires": rfc3339(clock.now + 300)}}))
    kube.add(pending("cpu-only", 0, clock))
    kube.add(pending("gpu", 1, clock, cpu="1"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/cpu-only": "a", "default/gpu": None}
    assert "GPUs reserved for other pods" in sched.reasons["default/gpu"]


def view(gpus_free: int, cpu_free: int, memory_free: int, reservations: dict) -> dict:
    return {"name": "a", "labels": {}, "gpu_model": "H100", "taints": (), "unschedulable": False, "gpus_total": 4,
            "gpus_free": gpus_free, "cpu_milli_total": 16000, "cpu_milli_free": cpu_free, "memory_mib_total": 65536,
            "memory_mib_free": memory_free, "extended_total": {}, "extended_free": {}, "reservations": reservations}


def request(gpus: int, cpu: int, memory: int, owned: frozenset = frozenset()) -> dict:
    return {"name": "ml/b", "namespace": "ml", "num_gpu": gpus, "cpu_milli": cpu, "memory_mib": memory,
            "rules": NO_RULES, "pod_affinity": NO_AFFINITY, "owned": owned, "extended": {}, "labels": {}}


HELD = {"ml/a": {"count": 1, "cpu_milli": 8000, "memory_mib": 32768}}


@pytest.mark.parametrize(("why", "node", "req", "refusal"), [
    ("what is left after the hold fits", view(4, 16000, 65536, HELD), request(1, 8000, 32768), None),
    ("the hold's CPU is not offered", view(4, 12000, 65536, HELD), request(1, 8000, 0),
     "node(s) had cpu reserved for other pods"),
    ("the hold's memory is not offered", view(4, 16000, 40000, HELD), request(0, 0, 16384),
     "node(s) had memory reserved for other pods"),
    ("a shortage before any hold is Kubernetes' own reason", view(4, 4000, 65536, HELD), request(0, 8000, 0),
     "Insufficient cpu"),
    ("a pod's own hold is not held against it", view(1, 8000, 32768, HELD), request(1, 8000, 32768,
                                                                                     frozenset({"ml/a"})), None),
    ("a hold that says no CPU holds none", view(4, 8000, 65536, {"ml/a": {"count": 1}}), request(0, 8000, 0), None),
    ("a hold whose CPU is no number holds none", view(4, 8000, 65536, {"ml/a": {"count": 1, "cpu_milli": "lots"}}),
     request(0, 8000, 0), None),
])
def test_the_filters_offer_no_pod_what_a_hold_keeps_for_another(why, node, req, refusal) -> None:
    assert why_not(node, req) == refusal
    offers = Offers([node])
    assert offers.fitting(req).tolist() == ([0] if refusal is None else [])
    assert offers.reasons() == [refusal]


def test_a_hold_made_in_the_pass_counts_for_the_rest_of_the_pass() -> None:
    node = view(4, 16000, 65536, {})
    offers = Offers([node])
    assert offers.fitting(request(1, 16000, 0)).tolist() == [0]
    node["reservations"] = HELD
    offers.update(0)
    assert offers.fitting(request(1, 16000, 0)).tolist() == []
    assert offers.reasons() == ["node(s) had cpu reserved for other pods"]


def test_a_migrations_replacement_uses_the_reservation_its_owner_label_keys(kube: FakeKube, api, clock):
    """A migration keys its target's reservation by the workload's owner, which the `gputide.io/service` label names
    before the ownerReference does (`k8s_pods.pod_owner`): `default/chat`. The scheduler matched a pod by its
    ownerReferences only (`chat-v2-5d8f`, `chat-v2`), so the replacement was kept off the GPUs held for it."""
    from balancer.actuate.k8s_pods import pod_owner

    labels = {"gputide.io/service": "chat", "pod-template-hash": "5d8f"}
    assert pod_owner({"labels": labels}) == ("chat", "Deployment")
    kube.add(node("n1", 2))
    kube.add(holding(node("n2", 2), {"default/chat": {"pod": "default/chat-v2-5d8f-aaaaa", "gpus": [0, 1],
                                                      "count": 2, "expires": rfc3339(clock.now + 300)}}))
    kube.add(pod("chat-v2-5d8f-bbbbb", gpus=2, phase="Pending", labels=labels, owner=("ReplicaSet", "chat-v2-5d8f"),
                 scheduler="gputide"))
    kube.add(pod("other", gpus=2, phase="Pending", scheduler="gputide"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/chat-v2-5d8f-bbbbb": "n2", "default/other": "n1"}
