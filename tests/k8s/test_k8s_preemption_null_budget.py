"""A PodDisruptionBudget whose selector is null selects no pod (policy/v1: "A null selector selects no objects"),
while an empty selector ({}) selects every pod of its namespace. gputide read a null selector as an empty one: one
such budget (disruptionsAllowed 0, since it covers nothing) made every pod of its namespace look guarded, and no
preemption happened there. A null-selector budget is now skipped; an empty one still guards the whole namespace."""

from __future__ import annotations

from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, most_free, pending

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def budget(selector: dict | None) -> dict:
    """A budget of `default` that allows no disruption, with `selector` (None: no selector at all, null)."""
    b = pdb("guard", "default", {}, 0)
    b["spec"]["selector"] = selector
    if selector is None:
        del b["spec"]["selector"]
    b["status"].update(expectedPods=0, currentHealthy=0, desiredHealthy=0)
    return b


def one_full_node(kube: FakeKube) -> None:
    """a: 4 GPUs taken by `low` (priority 1); `urgent` (priority 100) needs them."""
    kube.add(node("a", 4))
    kube.add(bound("low", "a", 4, 1))
    kube.add(pending("urgent", 4, 100))


def test_a_budget_without_a_selector_guards_no_pod(kube: FakeKube, api, clock):
    one_full_node(kube)
    kube.add(budget(None))   # the fake API server's Eviction, as the real one, lets it through
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low", "a")] and kube.get("pods", "low", "default") is None


def test_an_empty_selector_guards_every_pod_of_its_namespace(kube: FakeKube, api, clock):
    one_full_node(kube)
    kube.add(budget({}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    assert not kube.calls("POST", r"/eviction$")                      # not even tried
