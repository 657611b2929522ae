"""A preemption evicts the victim it chose, on the node it holds, and no other pod of its name. The victim is read
just before its eviction (for its grace period): a StatefulSet's victim that died since the pass listed it is made
again under its name, perhaps on another node, and the eviction by name alone took that fresh replica, which frees
nothing on the held node (a pod killed for no one). The read pod on another node counts as gone from the held one,
and the eviction names the uid it read (409, not evicted, when another pod of its name is there by then)."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_migrate_lifecycle import honour_uid_preconditions
from test_k8s_preemption import bound, most_free, pending, reservations

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def one_victim(kube: FakeKube) -> None:
    """a: db-0 (priority 1) fills it; b: full of a pod of priority 100; urgent (50) fits nowhere."""
    for obj in (node("a", 8), bound("db-0", "a", 8, 1), node("b", 8), bound("high", "b", 4, 100), node("c", 4),
                bound("c-high", "c", 4, 100), pending("urgent", 8, 50)):
        kube.add(obj)


def remade_on_b(kube: FakeKube) -> None:
    kube.delete("pods", "db-0", "default")
    kube.add(bound("db-0", "b", 4, 1))   # its StatefulSet made it again, where there was room


def on_the_victims_read(kube: FakeKube, then) -> None:
    """`then()` run just before the victim's read by the preemption (after the pass listed the pods)."""
    dispatch, pending_ = kube.dispatch, [then]

    def hooked(method: str, path: str, content_type, body):
        if method == "GET" and path.endswith("/pods/db-0"):
            while pending_:
                pending_.pop()()
        return dispatch(method, path, content_type, body)

    kube.dispatch = hooked


def test_a_victim_made_again_on_another_node_before_its_read_is_not_evicted(kube: FakeKube, api, clock):
    one_victim(kube)
    on_the_victims_read(kube, lambda: remade_on_b(kube))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert not kube.calls("POST", r"/eviction$")
    assert kube.get("pods", "db-0", "default")["spec"]["nodeName"] == "b"


def test_a_victim_made_again_between_its_read_and_its_eviction_is_not_evicted(kube: FakeKube, api, clock):
    one_victim(kube)
    honour_uid_preconditions(kube, lambda: remade_on_b(kube))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert kube.get("pods", "db-0", "default")["spec"]["nodeName"] == "b"   # the fresh replica runs on
    assert sched.preempted == []
    assert "default/urgent" not in reservations(kube, "a")                 # nothing evicted: the node given back
