"""A pod group whose node changes during the pass is not left partly bound. Nodes a, b and c (4 GPUs each), a group
of 3 (min 3, 4 GPUs each): b cordoned while the pass binds. Each member's binding looked at its node again
(234dbb2), but the one b refused did not stop the others: m1 and m3 were bound, m2 waited, and every pass after
kept them so, 8 GPUs held by a group that could not run until b was uncordoned. Now the nodes of every member are
looked at before the first binding (none is bound if one refuses: the group waits for the next pass, told why), and
a member refused at its own binding (changed after that look) stops the members after it."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_gang import lone, member, most_free, nodes_of

from balancer.actuate.k8s_scheduler import SecondaryScheduler

MEMBERS = ("m1", "m2", "m3")


def three_nodes_and_a_group(kube: FakeKube) -> None:
    for name in ("a", "b", "c"):
        kube.add(node(name, 4))
    for name in MEMBERS:
        kube.add(member(name, "g", least=3))


def cordon_b(kube: FakeKube) -> None:
    kube.mutate("nodes", "b", "", {"spec": {"unschedulable": True}})


def test_a_node_changed_before_the_groups_turn_binds_no_member(kube: FakeKube, api, clock):
    """solo (more important, no GPU) is bound first; b is cordoned as it is: the group binds none."""
    three_nodes_and_a_group(kube)
    kube.add(lone("solo", 0, priority=10))
    kube.before("POST", r"/pods/solo/binding$", lambda: cordon_b(kube))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    results = sched.schedule_once()
    assert nodes_of(kube, *MEMBERS) == [None, None, None], results
    assert len(kube.calls("POST", r"/binding$")) == 1
    said = sched.reasons["default/m1"]
    assert "node b changed during the pass: node(s) were unschedulable" in said and "no member is bound" in said
    assert all(sched.reasons[f"default/{m}"] == said for m in MEMBERS)
    kube.mutate("nodes", "b", "", {"spec": {"unschedulable": False}})
    clock.advance(5)
    assert sorted(sched.schedule_once().values()) == ["a", "b", "c"]


def test_a_member_refused_at_its_binding_stops_the_members_after_it(kube: FakeKube, api, clock):
    """b cordoned as the first member is bound (after the group's look): the member placed on b is not bound, nor
    those after it; the one bound stays (a binding is not undone)."""
    three_nodes_and_a_group(kube)
    kube.before("POST", r"/binding$", lambda: cordon_b(kube))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/m1": "c", "default/m2": None, "default/m3": None}   # m3: a, not bound
    assert nodes_of(kube, *MEMBERS) == ["c", None, None] and len(kube.calls("POST", r"/binding$")) == 1
    assert "node b changed during the pass: node(s) were unschedulable" in sched.reasons["default/m2"]
    assert "at member default/m2's binding" in sched.reasons["default/m3"], sched.reasons
