"""A binding whose answer was lost (a 504, a timeout) but which the API server made: the retry gets 409 "already
assigned", which is the scheduler's own binding, not someone else's. The pod is counted on its node (and its
reservation there used up) for the rest of the pass, or the next pod was offered the same GPUs and bound on top."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def pending(name: str, gpus: int, priority: int) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["priority"] = priority
    return p


def lost_answer(kube: FakeKube, name: str, node_name: str) -> None:
    """The next binding of `name` is made, but its answer is a 504."""
    kube.before("POST", rf"/pods/{name}/binding$",
                lambda: kube.mutate("pods", name, "default", {"spec": {"nodeName": node_name}}))
    kube.inject("POST", rf"/pods/{name}/binding$", 504)


def test_a_binding_made_whose_answer_was_lost_still_takes_its_gpus(kube: FakeKube, api, clock):
    kube.add(node("a", 2))
    kube.add(pending("first", 2, 10))
    kube.add(pending("second", 2, 0))
    lost_answer(kube, "first", "a")
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    results = sched.schedule_once()
    assert kube.get("pods", "first", "default")["spec"]["nodeName"] == "a"
    assert kube.get("pods", "second", "default")["spec"].get("nodeName") is None   # not bound on top of it
    assert results == {"default/first": "a", "default/second": None}


def test_a_binding_made_whose_answer_was_lost_uses_up_its_reservation(kube: FakeKube, api, clock):
    held = node("a", 2)
    held["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({"default/first": {
        "pod": "default/first", "gpus": [], "count": 2, "expires": rfc3339(clock.now + 300)}})}
    kube.add(held)
    kube.add(pending("first", 2, 10))
    lost_answer(kube, "first", "a")
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    sched.schedule_once()
    assert kube.get("pods", "first", "default")["spec"]["nodeName"] == "a"
    annotations = kube.get("nodes", "a")["metadata"].get("annotations") or {}
    assert json.loads(annotations.get(RESERVATION_ANNOTATION) or "{}") == {}   # not held for 5 min for nobody


def test_a_pod_someone_else_bound_elsewhere_meanwhile_takes_its_gpus_there(kube: FakeKube, api, clock):
    """A replica that lost the Lease with its binding in flight bound `first` to b, while this pass picked a for it:
    409. The pod is not this pass's to place, but it runs on b: the next pod must not be bound on top of it."""
    kube.add(node("a", 2, labels={"pool": "x"}))
    kube.add(node("b", 2))
    first = pending("first", 2, 10)
    first["spec"]["nodeSelector"] = {"pool": "x"}                 # this pass picks a for it
    kube.add(first)
    kube.add(pending("second", 2, 0))                               # b, the node with the most free, if b looked free
    kube.before("POST", r"/pods/first/binding$",
                lambda: kube.mutate("pods", "first", "default", {"spec": {"nodeName": "b"}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    assert sched.schedule_once() == {"default/second": "a"}
    clock.advance(5)
    kube.add(pending("third", 2, 0))
    assert sched.schedule_once() == {"default/third": None}         # a and b are both taken
