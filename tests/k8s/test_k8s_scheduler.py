"""SecondaryScheduler against the fake API server: binds its own pending pods, honours reservations."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.base import Outcome
from balancer.actuate.kubernetes import (
    RESERVATION_ANNOTATION,
    KubernetesActuator,
    SecondaryScheduler,
    rfc3339,
)


def most_free(request: dict, nodes: list[dict]) -> str | None:
    """A stand-in placement function: the node with the most free GPUs (ties: by name)."""
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


class Recorder:
    def __init__(self, answer=most_free) -> None:
        self.answer, self.calls = answer, []

    def __call__(self, request: dict, nodes: list[dict]) -> str | None:
        self.calls.append((request, [n["name"] for n in nodes]))
        return self.answer(request, nodes)


def bound_to(kube: FakeKube, name: str, namespace: str = "default") -> str | None:
    return kube.get("pods", name, namespace)["spec"].get("nodeName")


def reserve(kube: FakeKube, node_name: str, key: str, count: int, expires: float) -> None:
    value = json.dumps({key: {"pod": key, "gpus": list(range(count)), "count": count, "expires": rfc3339(expires)}})
    kube.mutate("nodes", node_name, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: value}}})


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("big", 8, model="H100"))
    kube.add(node("small", 2, model="L40S"))
    return kube


def test_binds_pending_pods_of_its_own_scheduler_only(cluster: FakeKube, api, clock) -> None:
    cluster.add(pod("mine", gpus=2, scheduler="gputide", phase="Pending"))
    cluster.add(pod("theirs", gpus=1, phase="Pending"))
    cluster.add(pod("other-sched", gpus=1, scheduler="volcano", phase="Pending"))
    cluster.add(pod("already", "ml", gpus=1, scheduler="gputide", node_name="small", phase="Running"))
    place = Recorder()
    results = SecondaryScheduler(api, "gputide", place, clock=clock).schedule_once()
    assert results == {"default/mine": "big"}
    assert bound_to(cluster, "mine") == "big"
    assert bound_to(cluster, "theirs") is None and bound_to(cluster, "other-sched") is None
    request, offered = place.calls[0]
    assert (request["num_gpu"], request["cpu_milli"], request["memory_mib"]) == (2, 2000, 8192)
    assert offered == ["big"]   # small has 1 of its 2 GPUs taken by the bound pod "already"
    assert len(cluster.calls("POST", r"/binding$")) == 1


@pytest.mark.parametrize(
    ("gpus", "answer", "expected"),
    [
        pytest.param(1, lambda r, n: None, None, id="place finds nothing: the pod stays pending"),
        pytest.param(4, lambda r, n: "small", None, id="a node that cannot fit is refused, not bound"),
        pytest.param(4, lambda r, n: "nowhere", None, id="an unknown node name is refused"),
        pytest.param(1, lambda r, n: "small", "small", id="the placement function's choice is bound"),
    ],
)
def test_the_placement_answer_is_checked(cluster: FakeKube, api, clock, gpus, answer, expected) -> None:
    cluster.add(pod("p", gpus=gpus, scheduler="gputide", phase="Pending"))
    results = SecondaryScheduler(api, "gputide", answer, clock=clock).schedule_once()
    assert results == {"default/p": expected}
    assert bound_to(cluster, "p") == expected


def test_bound_pods_and_earlier_bindings_use_up_capacity(cluster: FakeKube, api, clock) -> None:
    cluster.add(pod("resident", gpus=6, node_name="big"))
    for i in range(3):
        cluster.add(pod(f"p{i}", gpus=2, scheduler="gputide", phase="Pending"))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    # 2 GPUs free on each node: ties go to "small" by name, then "big" is the only fit, the third pod waits
    assert results == {"default/p0": "small", "default/p1": "big", "default/p2": None}


def test_tainted_and_selected_nodes(cluster: FakeKube, api, clock) -> None:
    cluster.mutate("nodes", "big", "", {"spec": {"taints": [
        {"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"}]}})
    cluster.add(pod("p", gpus=1, scheduler="gputide", phase="Pending"))
    place = Recorder()
    assert SecondaryScheduler(api, "gputide", place, clock=clock).schedule_once() == {"default/p": "small"}
    assert place.calls[0][1] == ["small"]


def test_a_reservation_goes_to_its_owner_and_is_hidden_from_others(cluster: FakeKube, api, clock) -> None:
    reserve(cluster, "small", "default/web", 2, clock.now + 60)
    cluster.add(pod("batch", gpus=1, scheduler="gputide", phase="Pending"))
    cluster.add(pod("web-5d8f-x2x", gpus=1, scheduler="gputide", phase="Pending", owner=("ReplicaSet", "web-5d8f")))
    prefer_small = Recorder(lambda r, n: "small" if any(x["name"] == "small" for x in n) else most_free(r, n))
    results = SecondaryScheduler(api, "gputide", prefer_small, clock=clock).schedule_once()
    assert results == {"default/batch": "big", "default/web-5d8f-x2x": "small"}
    assert [name for request, name in ((c[0]["pod"], c[1]) for c in prefer_small.calls)] == [["big"]]
    assert RESERVATION_ANNOTATION not in (cluster.get("nodes", "small")["metadata"].get("annotations") or {})


def test_an_expired_reservation_is_ignored(cluster: FakeKube, api, clock) -> None:
    reserve(cluster, "small", "default/web", 2, clock.now - 1)
    cluster.add(pod("batch", gpus=2, scheduler="gputide", phase="Pending"))
    only_small = Recorder(lambda r, n: "small")
    assert SecondaryScheduler(api, "gputide", only_small, clock=clock).schedule_once() == {"default/batch": "small"}


def test_migrate_then_schedule_lands_the_replacement_on_the_reserved_node(cluster: FakeKube, api, clock,
                                                                          sleeps) -> None:
    from test_k8s_actuator import SNAP, migrate

    cluster.add(node("n1", 2))
    cluster.add(node("n2", 2))
    cluster.add(pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    # the ReplicaSet controller recreates the pod; the scheduler must put it where the actuator reserved
    cluster.add(pod("web-5d8f-new", scheduler="gputide", phase="Pending", owner=("ReplicaSet", "web-5d8f")))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert results == {"default/web-5d8f-new": "n2"}


def test_a_placement_function_is_required(api) -> None:
    with pytest.raises(ValueError, match="place"):
        SecondaryScheduler(api, "gputide")
