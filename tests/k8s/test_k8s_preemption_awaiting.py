"""A pod terminating already is no victim of the live scheduler's preemption, and its room counts as coming
(`Running.terminating`, `Preemption.awaiting`, as kube-scheduler's PodEligibleToPreemptOthers does not preempt
again while a pod terminates on the preemptor's node): a node where that room suffices is held for the pending pod,
which is nominated there, evicts nothing and is bound once the pod is gone. Before, the scheduler passed terminating
pods to the planner as running ones: one of lower priority was weighed as a victim (reprieved as the more important,
so a running pod beside it was evicted in its place), and one of higher priority was not counted at all (the pod
preempted elsewhere, or nowhere). Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_emergency_stop import Switch
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_preempt import UNANSWERED_ASKS
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def going(kube: FakeKube, name: str, node_name: str, gpus: int, priority: int, now: float) -> None:
    """A bound pod being deleted (its owner's deletion, or an earlier eviction): still there while its grace runs."""
    p = bound(name, node_name, gpus, priority)
    p["metadata"]["deletionTimestamp"] = rfc3339(now + 30)
    kube.add(p)


def evictions(kube: FakeKube) -> list[str]:
    return [r.path for r in kube.calls("POST", r"/eviction$")]


def waits(kube: FakeKube, api, clock, awaited: list[str], **kwargs) -> SecondaryScheduler:
    """urgent (4 GPUs, priority 100) pending, one pass: it evicts nothing, holds a waiting for `awaited` (written as
    victims found terminating are, `evicted`) and is nominated there. The scheduler."""
    kube.add(pending("urgent", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, **kwargs)
    assert sched.schedule_once() == {"default/urgent": None}
    assert evictions(kube) == [] and sched.preempted == []
    held = reservations(kube, "a")["default/urgent"]
    assert held["evicted"] == awaited and "victims" not in held and held["count"] == 4
    assert kube.get("pods", "urgent", "default")["status"]["nominatedNodeName"] == "a"
    return sched


def test_a_pod_whose_room_a_terminating_pod_frees_evicts_nothing_and_is_bound_once_it_is_gone(kube, api, clock):
    """a: `going` (priority 50, terminating) and `low` (priority 10), 4 GPUs each. Before, `going` was weighed as a
    victim, reprieved as the more important, and `low` evicted for room that `going` was freeing anyway."""
    kube.add(node("a", 8))
    going(kube, "going", "a", 4, 50, clock.now)
    kube.add(bound("low", "a", 4, 10))
    sched = waits(kube, api, clock, ["default/going"])
    assert not events(kube, "low")
    clock.advance(10)
    kube.add(pending("filler", 4, 0))                                  # would take the room as it frees
    assert sched.schedule_once() == {"default/filler": None, "default/urgent": None}   # still terminating: held
    assert evictions(kube) == [] and "default/urgent" in reservations(kube, "a")
    kube.delete("pods", "going", "default")                            # its grace ran out
    clock.advance(20)
    assert sched.schedule_once() == {"default/filler": None, "default/urgent": "a"}
    assert evictions(kube) == [] and kube.get("pods", "low", "default") is not None
    assert reservations(kube, "a") == {}                               # used up by the binding


def test_the_pod_is_told_for_which_terminating_pods_it_waits_on_which_node(kube, api, clock):
    """Two terminating pods free the room: it was told "preempting 1 pod(s) of lower priority on a: default/low"
    (`low` evicted); had no pod of lower priority run there, "nothing to preempt on a", though it waits for them."""
    kube.add(node("a", 8))
    going(kube, "going-1", "a", 2, 50, clock.now)
    going(kube, "going-2", "a", 2, 60, clock.now)
    kube.add(bound("low", "a", 4, 10))
    sched = waits(kube, api, clock, ["default/going-1", "default/going-2"])
    held, why = reservations(kube, "a")["default/urgent"], sched.reasons["default/urgent"]
    assert (f"preemption: waiting for default/going-1, default/going-2, terminating already, to free room on a: a "
            f"held for it until {held['expires']}.") in why
    assert "nothing to preempt" not in why and "preempting" not in why


def test_a_terminating_pod_of_higher_priority_frees_its_room_too(kube, api, clock):
    """a: `vip` (priority 200) terminating; b: `low` (priority 1). Before, `vip`'s room was not counted (no pod of
    lower priority on a), and `low` was evicted on b."""
    kube.add(node("a", 4))
    kube.add(node("b", 4))
    going(kube, "vip", "a", 4, 200, clock.now)
    kube.add(bound("low", "b", 4, 1))
    sched = waits(kube, api, clock, ["default/vip"])
    assert kube.get("pods", "low", "default") is not None and "default/urgent" not in reservations(kube, "b")
    assert "waiting for default/vip, terminating already, to free room on a" in sched.reasons["default/urgent"]
    kube.delete("pods", "vip", "default")
    clock.advance(30)
    assert sched.schedule_once() == {"default/urgent": "a"}
    assert evictions(kube) == []


def test_waiting_for_a_terminating_pod_holds_the_node_under_the_emergency_stop(kube, api, clock):
    """Waiting evicts nothing, so the cluster-wide stop does not refuse it, as it does not refuse a starving pod's
    hold. Before, `vip`'s room was not counted; counted, the stop was raised over a choice with no victim ("held:
    ..., so  on a is not evicted")."""
    kube.add(node("a", 4))
    going(kube, "vip", "a", 4, 200, clock.now)
    sched = waits(kube, api, clock, ["default/vip"], emergency_stop=Switch("the emergency stop file exists"))
    assert "waiting for default/vip, terminating already, to free room on a" in sched.reasons["default/urgent"]


def test_a_victim_passed_over_that_its_owner_deletes_is_waited_for(kube, api, clock):
    """`p`'s evictions went unanswered `UNANSWERED_ASKS` times: the node was given back and `p` passed over for
    `reserve_s` (`Preemptor.resume`). Its owner then deletes it: its room is coming whether or not it is passed
    over. Before, passed over, it was no one's room: the pod neither held nor was nominated on a while `p` left."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "p", lambda: None)                       # p runs on: no eviction lands
    for _ in range(UNANSWERED_ASKS + 1):
        sched.schedule_once()
        clock.advance(5)
    assert reservations(kube, "a") == {} and "the node is given back" in sched.reasons["default/urgent"]
    kube.mutate("pods", "p", "default", {"metadata": {"deletionTimestamp": rfc3339(clock.now + 30)}})
    asked = len(tries)
    assert sched.schedule_once() == {"default/urgent": None}
    assert reservations(kube, "a")["default/urgent"]["evicted"] == ["default/p"] and len(tries) == asked
    assert "waiting for default/p, terminating already, to free room on a" in sched.reasons["default/urgent"]
    assert kube.get("pods", "urgent", "default")["status"]["nominatedNodeName"] == "a"
    kube.delete("pods", "p", "default")
    clock.advance(30)
    assert sched.schedule_once() == {"default/urgent": "a"}
