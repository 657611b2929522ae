"""What a preemption that removed no pod says it did, and counts. A choice may name no victim
(`balancer.plan.preemption.choose`: the pod fits the node by what preemption weighs, though the filters refuse it
there) or only victims found gone already; the pod was told, and the log said, "preempting 0 pod(s) of lower priority
on a: ." (or that it preempted pods no one evicted), while the scheduler only held the node for it; and victims found
gone were counted in `preempted` (`gputide_scheduler_preempted_pods_total`, pods evicted), when carrying a preemption
on (`resume`) too, which said them evicted. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, full, most_free, pending, reservations  # noqa: F401 (full: a fixture)
from test_k8s_preemption_partial import two_nodes

from balancer.actuate.k8s_preempt import Preemptor
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.plan.preemption import Preemption


def test_a_preemption_with_no_victim_says_it_holds_the_node_and_preempts_no_one(kube: FakeKube, api, clock, caplog,
                                                                                monkeypatch):
    """a is full (low, priority 1, uses its 8 GPUs): the plan is made to name a and no victim, as `choose` does for a
    pod that fits there by what preemption weighs. Nothing is evicted, a is held for the pod, and it says so."""
    kube.add(node("a", 8))
    kube.add(bound("low", "a", 8, 1))
    kube.add(pending("urgent", 4, 50))
    monkeypatch.setattr(Preemptor, "plan", lambda self, req, nodes, bound: Preemption("a", (), 0))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    caplog.set_level("INFO", logger="balancer.actuate.k8s_holds")
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    assert not [r for r in kube.requests if r.path.endswith("/eviction")]
    held = reservations(kube, "a")["default/urgent"]
    why = sched.reasons["default/urgent"]
    assert "preempting" not in why and "preempting" not in caplog.text
    assert (f"preemption: nothing to preempt on a (no pod of lower priority takes the room it needs there): a held "
            f"for it until {held['expires']}.") in why
    assert "default/urgent: nothing to preempt on a" in caplog.text


def test_a_preemption_whose_victims_were_gone_already_says_no_pod_was_evicted(full: FakeKube, api, clock):  # noqa: F811
    """low-1, the victim chosen on a, is deleted before the preemption reads it: nothing is evicted, a is held."""
    full.add(pending("urgent", 4, 50))
    full.before("GET", r"/namespaces/default/pods/low-1$", lambda: full.delete("pods", "low-1", "default"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert not [r for r in full.requests if r.path.endswith("/eviction")]
    why = sched.reasons["default/urgent"]
    assert "preempting" not in why and sched.preempted == []   # nothing evicted: nothing counted
    assert (f"preemption: no pod evicted on a, its victims default/low-1 gone already: a held for it until "
            f"{reservations(full, 'a')['default/urgent']['expires']}.") in why


def test_victims_left_found_gone_when_the_preemption_carries_on_are_not_said_or_counted_evicted(kube: FakeKube, api,
                                                                                              clock, caplog):
    """urgent preempts on a: low-1 is evicted, low-2's eviction refused (left for the next pass). At the next pass
    low-2 is deleted before it is read: it is not evicted, so neither said evicted nor counted."""
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2"]
    kube.add(bound("low-1", "a", 4, 1, labels={"tier": "batch"}))   # still terminating: a stays held while it does
    kube.before("GET", r"/namespaces/default/pods/low-2$", lambda: kube.delete("pods", "low-2", "default"))
    caplog.set_level("INFO", logger="balancer.actuate.k8s_holds")
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == []   # nothing evicted: nothing counted
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1   # the refused one only
    why = sched.reasons["default/urgent"]
    assert "evicted default/low-2" not in why and "evicted default/low-2" not in caplog.text
    assert "preemption: holding a (default/low-2 gone already) while default/low-1 terminate(s)" in why
