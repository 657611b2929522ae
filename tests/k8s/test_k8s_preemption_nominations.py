"""A preemption clears the lower-priority holds on its node, as kube-scheduler clears the nominations of the pods
of lower priority nominated to the node it preempts on (`prepareCandidate`): their room is the preemptor's now. A
pod whose hold was cleared plans afresh (it may preempt elsewhere) instead of holding, while the victims it waited
for terminated, a node whose room a more important pod took."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_grace import GRACE_S, checkpointing, terminating

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def mid_preempted_on_a(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """a: train (priority 1, checkpointing 30 min); b: low-3 (priority 3). mid (10) preempts train on a, which
    stays terminating."""
    for obj in (node("a", 8), checkpointing("train", "a", 8, 1), node("b", 8), bound("low-3", "b", 8, 3),
                pending("mid", 8, 10)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [("default/train", "a")]
    terminating(kube, "train", "a", 8, 1, clock.now + GRACE_S)
    assert kube.get("pods", "mid", "default")["status"]["nominatedNodeName"] == "a"
    return sched


def test_a_more_important_preemption_clears_the_lower_hold_and_the_pod_plans_afresh(kube: FakeKube, api, clock):
    sched = mid_preempted_on_a(kube, api, clock)
    kube.add(pending("top", 8, 50))                     # mid's hold is not held against it: top preempts on a too
    clock.advance(60)
    assert sched.schedule_once() == {"default/top": None, "default/mid": None}
    assert ("default/train", "a") not in sched.preempted   # terminating already: not evicted again, nor counted
    assert list(reservations(kube, "a")) == ["default/top"]   # mid's hold on a cleared
    # mid plans afresh in its turn: a's room is top's, b's pod is less important than mid
    assert ("default/low-3", "b") in sched.preempted and kube.get("pods", "low-3", "default") is None
    assert list(reservations(kube, "b")) == ["default/mid"]
    assert kube.get("pods", "mid", "default")["status"]["nominatedNodeName"] == "b"
    assert len(kube.calls("POST", r"/pods/train/eviction$")) == 1


def test_a_cleared_pod_that_cannot_preempt_again_loses_its_nomination(kube: FakeKube, api, clock):
    """b's pod is more important than mid this time: mid cannot preempt anywhere, and is nominated nowhere (the
    nomination it had is cleared with its hold, as kube-scheduler clears it)."""
    sched = mid_preempted_on_a(kube, api, clock)
    kube.delete("pods", "low-3", "default")
    kube.add(bound("high", "b", 8, 100))
    kube.add(pending("top", 8, 50))
    clock.advance(60)
    assert sched.schedule_once() == {"default/top": None, "default/mid": None}
    assert list(reservations(kube, "a")) == ["default/top"] and reservations(kube, "b") == {}
    assert not kube.get("pods", "mid", "default")["status"].get("nominatedNodeName")


def hold(pod: str, gpus: int, priority: int, clock) -> dict:
    return {"pod": pod, "gpus": [], "count": gpus, "cpu_milli": 0, "memory_mib": 0, "priority": priority,
            "expires": rfc3339(clock.now + 600), "scheduler": "gputide"}


def test_only_this_schedulers_holds_of_lower_priority_are_cleared(kube: FakeKube, api, clock):
    """a holds room for a Migrate (no priority: held against every pod), for peer (as important as top) and for
    low (below top; peer and low wait for a node their selector names, which none is). top preempts low-1 on a:
    low's hold is cleared, the others stay, and top counted none of their room."""
    a = node("a", 16)
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({
        "ml/web": {"pod": "ml/web", "gpus": [], "count": 2, "expires": rfc3339(clock.now + 600)},
        "default/peer": hold("default/peer", 2, 50, clock), "default/low": hold("default/low", 2, 5, clock)})}
    for obj in (a, bound("low-1", "a", 8, 1), bound("low-2", "a", 4, 2), pending("top", 8, 50),
                pending("peer", 2, 50, nodeSelector={"zone": "x"}), pending("low", 2, 5, nodeSelector={"zone": "x"})):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/peer": None, "default/top": None, "default/low": None}
    assert sched.preempted == [("default/low-1", "a")]
    assert sorted(reservations(kube, "a")) == ["default/peer", "default/top", "ml/web"]
