"""A binding whose every try got no answer (504s, timeouts, retries spent) may have been made all the same: the pod
is read back. Found on the node asked for, it is bound there; unreadable, it is counted on that node for the rest of
the pass (after a 409 too). Before, such a binding was a plain failure and the next pod was bound onto the same GPUs
(audit a5: bind_all_answers_lost.py)."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_bind_unknown_outcome import most_free, pending

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def two_pods_one_node(kube: FakeKube) -> None:
    kube.add(node("a", 2))
    kube.add(pending("first", 2, 10))
    kube.add(pending("second", 2, 0))


def made_unanswered(kube: FakeKube, name: str, node_name: str, code: int = 504) -> None:
    """Every try of `name`'s binding answers `code`, the first having made it."""
    kube.before("POST", rf"/pods/{name}/binding$",
                lambda: kube.mutate("pods", name, "default", {"spec": {"nodeName": node_name}}))
    kube.inject("POST", rf"/pods/{name}/binding$", code, count=20)


def node_of(kube: FakeKube, name: str) -> str | None:
    return kube.get("pods", name, "default")["spec"].get("nodeName")


def test_a_binding_made_whose_every_answer_was_lost_is_bound(kube: FakeKube, api, clock):
    two_pods_one_node(kube)
    made_unanswered(kube, "first", "a")
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    results = sched.schedule_once()
    assert node_of(kube, "first") == "a"
    assert node_of(kube, "second") is None   # not bound onto the same GPUs
    assert results == {"default/first": "a", "default/second": None}


def test_a_binding_timed_out_then_5xx_is_read_back(kube: FakeKube, api, clock):
    """The first try made it and got no answer; the retries got 500s: still not a 'no'."""
    two_pods_one_node(kube)
    made_unanswered(kube, "first", "a", code=500)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    assert sched.schedule_once() == {"default/first": "a", "default/second": None}
    assert node_of(kube, "second") is None


def test_an_unanswered_binding_of_an_unreadable_pod_is_counted_on_its_node(kube: FakeKube, api, clock):
    two_pods_one_node(kube)
    made_unanswered(kube, "first", "a")
    kube.inject("GET", r"/namespaces/default/pods/first$", 503, count=20)   # and it cannot be read back
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    results = sched.schedule_once()
    assert node_of(kube, "second") is None   # counted on a, conservatively, for the rest of the pass
    assert results == {"default/first": None, "default/second": None}
    assert "unknown" in sched.reasons["default/first"]


def test_a_409_whose_pod_cannot_be_read_back_is_counted_on_its_node(kube: FakeKube, api, clock):
    """The binding's answer was lost and the retry got 409 (made): the read-back that says whose it is fails."""
    two_pods_one_node(kube)
    kube.before("POST", r"/pods/first/binding$",
                lambda: kube.mutate("pods", "first", "default", {"spec": {"nodeName": "a"}}))
    kube.inject("POST", r"/pods/first/binding$", 504)   # then the retry: 409, already bound
    kube.inject("GET", r"/namespaces/default/pods/first$", 503, count=20)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    sched.schedule_once()
    assert node_of(kube, "first") == "a"
    assert node_of(kube, "second") is None


def test_an_unanswered_binding_not_made_leaves_the_node_to_the_next_pod(kube: FakeKube, api, clock):
    """Read back, the pod is on no node: the binding failed, and its GPUs are offered to the next pod as before."""
    two_pods_one_node(kube)
    kube.inject("POST", r"/pods/first/binding$", 504, count=20)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    assert sched.schedule_once() == {"default/first": None, "default/second": "a"}
    assert node_of(kube, "first") is None
