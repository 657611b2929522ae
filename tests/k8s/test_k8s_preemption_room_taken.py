"""A preemption whose room a more important pod took meanwhile evicts no more victims for it. mid's preemption on a
evicted low-1, low-2's eviction was refused (left for the next pass); top, more important, was bound in the room
low-1 left (mid's hold is not held against it, as kube-scheduler ignores lower-priority nominations). The next
pass evicted low-2 all the same: a pod killed for room mid would never get on a, while mid went on holding a. Now a
preemption carried on (`resume`) first asks whether its victims still make room for the pod there: when they do
not, none is evicted, the node is given back and the nomination cleared, and the pod plans afresh at the next pass.
"""

from __future__ import annotations

from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_grace import GRACE_S, terminating

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def checkpointing(name: str, node_name: str, gpus: int, priority: int, labels=None) -> dict:
    p = bound(name, node_name, gpus, priority, labels=labels)
    p["spec"]["terminationGracePeriodSeconds"] = GRACE_S
    return p


def half_preempted(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """a: low-1 (guarded by a budget: evicted first) and low-2, whose eviction is refused once; b: low-3, more
    important than both. mid (10) preempts on a: low-1 is evicted, low-2 left for the next pass."""
    for obj in (pdb("guard", "default", {"tier": "batch"}, 1), node("a", 8),
                bound("low-1", "a", 4, 1, labels={"tier": "batch"}), bound("low-2", "a", 4, 2), node("b", 8),
                bound("low-3", "b", 8, 3), pending("mid", 8, 10)):
        kube.add(obj)
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=1)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/mid"]["victims"] == ["default/low-2"]
    return sched


def test_a_preemptor_whose_room_was_taken_evicts_no_more_and_plans_afresh(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    kube.add(pending("top", 4, 50))
    clock.advance(5)
    assert sched.schedule_once() == {"default/top": "a", "default/mid": None}   # top takes low-1's room
    assert kube.get("pods", "low-2", "default") is not None and sched.preempted == []   # not killed for nothing
    assert "default/mid" not in reservations(kube, "a")                          # a given back
    assert not kube.get("pods", "mid", "default")["status"].get("nominatedNodeName")
    assert "no longer make room for it on a" in sched.reasons["default/mid"]
    clock.advance(5)
    sched.schedule_once()                                                        # mid plans afresh: b
    assert sched.preempted == [("default/low-3", "b")] and list(reservations(kube, "b")) == ["default/mid"]
    assert kube.get("pods", "low-2", "default") is not None
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1              # the refused one only


def test_a_preemptor_whose_room_is_still_there_evicts_the_rest(kube: FakeKube, api, clock):
    """top is bound elsewhere (c): mid's room on a is still there, and low-2 is evicted for it."""
    sched = half_preempted(kube, api, clock)
    kube.add(node("c", 4))
    kube.add(pending("top", 4, 50))
    clock.advance(5)
    assert sched.schedule_once() == {"default/top": "c", "default/mid": None}
    assert sched.preempted == [("default/low-2", "a")] and "victims" not in reservations(kube, "a")["default/mid"]
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": "a"}


def test_a_pod_someone_else_bound_in_the_room_makes_the_preemptor_plan_afresh(kube: FakeKube, api, clock):
    """Another scheduler, which does not honour the hold, bound `intruder` (priority 0) in low-1's room: low-2 alone
    no longer makes room for mid on a. The node is given back, and mid's next plan evicts both from a (its pods
    of lowest priority), rather than low-2 now and, once the hold expired, a plan of its own for the rest."""
    sched = half_preempted(kube, api, clock)
    kube.add(bound("intruder", "a", 4, 0))
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [] and reservations(kube, "a") == {}
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sorted(sched.preempted) == [("default/intruder", "a"), ("default/low-2", "a")]


def test_victims_another_hold_waits_for_count_as_leaving(kube: FakeKube, api, clock):
    """a (24 GPUs): mid (16) evicted x, y's eviction was refused; ally, as important, then preempted y and z there
    for its 8 (mid's hold held against it). y and z still terminate: the room mid waits for is still coming (24 -
    ally's 8), though its own victim alone (y) would not free it: the node stays mid's."""
    for obj in (pdb("guard", "default", {"tier": "batch"}, 1), node("a", 24),
                checkpointing("x", "a", 8, 1, labels={"tier": "batch"}), checkpointing("y", "a", 8, 1),
                checkpointing("z", "a", 8, 2), pending("mid", 16, 10)):
        kube.add(obj)
    kube.inject("POST", r"/pods/y/eviction$", 429, count=1)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [("default/x", "a")]
    kube.add(pending("ally", 8, 10))
    clock.advance(5)
    sched.schedule_once()
    assert sorted(sched.preempted) == [("default/y", "a"), ("default/z", "a")]
    for name, priority in (("y", 1), ("z", 2)):
        terminating(kube, name, "a", 8, priority, clock.now + GRACE_S)
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None, "default/ally": None}
    assert sorted(reservations(kube, "a")) == ["default/ally", "default/mid"]
    assert "no longer make room" not in sched.reasons["default/mid"]


def test_the_victims_said_not_evicted_are_only_those_left_to_evict(kube: FakeKube, api, clock):
    """mid evicted both its victims on a; while they terminate, another scheduler binds `intruder` there: the room
    is taken and the node given back. Its victims were evicted already: the pod was told "low-1, low-2 not
    evicted", as if it had spared them."""
    for obj in (node("a", 8), checkpointing("low-1", "a", 4, 1), checkpointing("low-2", "a", 4, 2),
                pending("mid", 8, 10)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and len(sched.preempted) == 2
    for name, priority in (("low-1", 1), ("low-2", 2)):
        terminating(kube, name, "a", 4, priority, clock.now + GRACE_S)
    kube.add(bound("intruder", "a", 4, 0))
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None} and reservations(kube, "a") == {}
    assert "no longer make room for it on a" in sched.reasons["default/mid"]
    assert "not evicted" not in sched.reasons["default/mid"], sched.reasons["default/mid"]
