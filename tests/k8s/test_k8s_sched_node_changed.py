"""A node deleted, cordoned or tainted NoExecute while a pass binds gets no more of its pods. The pass read the nodes
once, as it began, and bound p1, p2 and p3 to a although a was deleted (or cordoned, or its kubelet gone: tainted
NoExecute) as p1 was bound: p2 and p3 were bound to a node that is gone, or that refuses them (the taint manager
evicts them at once). Now each binding first looks at its node again, as the scheduler knows it freshest (the nodes
watch's cache; without watches a GET of that node), and asks its rules again: a pod it now refuses waits for the
next pass, told why, neither lost nor evicted, and the later pods of the pass keep off that node
(balancer/actuate/k8s_sched_nodes.py)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from slow_api import Clock, SlowServer
from test_k8s_sched_node_wakes import started
from test_k8s_scheduler import bound_to, most_free
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler

CHANGES = {
    "deleted": None,
    "cordoned": {"spec": {"unschedulable": True}},
    "tainted NoExecute": {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}},
}
PODS = ("p1", "p2", "p3")


def three_pending(kube: FakeKube, *nodes: dict) -> None:
    for n in nodes:
        kube.add(n)
    for name in PODS:
        kube.add(pod(name, gpus=1, scheduler="gputide", phase="Pending"))


def change(kube: FakeKube, how: str, name: str = "a") -> None:
    if CHANGES[how] is None:
        kube.delete("nodes", name)
    else:
        kube.mutate("nodes", name, "", CHANGES[how])


@pytest.mark.parametrize("how", sorted(CHANGES))
def test_a_node_changed_during_the_pass_gets_no_more_pods(kube: FakeKube, api, clock, how):
    three_pending(kube, node("a", 8))
    kube.before("POST", r"/pods/p1/binding$", lambda: change(kube, how))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/p1": "a", "default/p2": None, "default/p3": None}
    assert [bound_to(kube, p) for p in ("p2", "p3")] == [None, None]
    assert len(kube.calls("POST", r"/binding$")) == 1 and kube.calls("POST", r"/eviction$") == []
    assert all("during the pass" in sched.reasons[f"default/{p}"] for p in ("p2", "p3")), sched.reasons
    assert sched.preempted == [] and sched.starving == []
    if how != "deleted":   # still pending, bound at the next pass once a admits them again
        kube.mutate("nodes", "a", "", {"spec": {"unschedulable": False, "taints": []}})
        clock.advance(5)
        assert sched.schedule_once() == {"default/p2": "a", "default/p3": "a"}


def test_the_later_pods_of_the_pass_keep_off_a_node_found_changed(kube: FakeKube, api, clock):
    """b (fewer GPUs free) still admits them: p2 is told a changed and waits, p3 goes to b in the same pass."""
    three_pending(kube, node("a", 8), node("b", 4))
    kube.before("POST", r"/pods/p1/binding$", lambda: change(kube, "cordoned"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/p1": "a", "default/p2": None, "default/p3": "b"}
    assert "node a changed during the pass: node(s) were unschedulable" in sched.reasons["default/p2"]


def test_a_change_its_rules_allow_binds_on(kube: FakeKube, api, clock):
    """A label added, a taint the pods tolerate: nothing refuses them, all three are bound to a."""
    three_pending(kube, node("a", 8))
    kube.before("POST", r"/pods/p1/binding$", lambda: kube.mutate("nodes", "a", "", {
        "metadata": {"labels": {"team": "x"}}, "spec": {"taints": [{"key": "hot", "effect": "PreferNoSchedule"}]}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {f"default/{p}": "a" for p in PODS}


def test_a_node_that_cannot_be_read_again_is_bound_as_the_pass_read_it(kube: FakeKube, api, clock):
    three_pending(kube, node("a", 8))
    kube.inject("GET", r"/api/v1/nodes/a$", 500, count=3)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {f"default/{p}": "a" for p in PODS}


@pytest.mark.parametrize("how", ["deleted", "cordoned"])
def test_with_watches_the_nodes_cache_is_asked(kube: FakeKube, api, clock, how):
    """No GET: the nodes watch's cache as it is at each binding (the change is seen there before p2's turn)."""
    kube.add(node("a", 8))
    sched = started(SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=True, watch_s=1.0))
    try:
        three_pending(kube)
        eventually(lambda: len(sched.pending()) == 3)

        def changed_and_seen():
            change(kube, how)
            eventually(lambda: sched.watches["nodes"].generation > seen)

        seen = sched.watches["nodes"].generation
        kube.before("POST", r"/pods/p1/binding$", changed_and_seen)
        assert sched.schedule_once() == {"default/p1": "a", "default/p2": None, "default/p3": None}
        assert kube.calls("GET", r"/api/v1/nodes/a$") == []
    finally:
        sched.close()


def test_after_a_node_get_fails_the_pass_reads_no_other(kube: FakeKube, api, clock):
    """A GET of a node that stalls costs its try's timeout: once one failed, the rest of the pass binds on its view
    (as before these looks) instead of each binding waiting for it again (3 pods: 39 s, not 9 s); the next pass
    tries again."""
    three_pending(kube, node("a", 8))
    mono = Clock()
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, max_retries=10, sleep=mono.advance,
                               deadline_clock=mono)
    SlowServer(kube, sched.api, mono, 1.0, {("GET", r"/api/v1/nodes/a$"): 600.0})
    assert sched.schedule_once() == {f"default/{p}": "a" for p in PODS}
    assert len(kube.calls("GET", r"/api/v1/nodes/a$")) == 1 and mono.now < 20.0, mono.now
    kube.add(pod("p4", gpus=1, scheduler="gputide", phase="Pending"))
    clock.advance(5)
    sched.schedule_once()
    assert len(kube.calls("GET", r"/api/v1/nodes/a$")) == 2
