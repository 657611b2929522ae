"""A PodDisruptionBudget one preemption used up is used up for the next one too, though the budgets are listed at
most once per `budgets_ttl_s`: otherwise a second preemption planned on the stale count evicted its first victim,
was refused the next (429) and gave the node back, and that first pod was killed for no one."""

from __future__ import annotations

from fakeapi import FakeKube, node, pdb, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def bound(name: str, node_name: str, gpus: int, priority: int, labels=None) -> dict:
    p = pod(name, gpus=gpus, node_name=node_name, labels=labels)
    p["spec"]["priority"] = priority
    p["status"]["startTime"] = "2024-01-01T00:00:00Z"
    return p


def pending(name: str, gpus: int, priority: int) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["priority"] = priority
    return p


def test_a_budget_one_preemption_used_up_is_not_counted_on_by_the_next(kube: FakeKube, api, clock):
    kube.add(pdb("batch", "default", {"tier": "batch"}, 1))               # one disruption allowed, for both
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1, {"tier": "batch"}))
    kube.add(node("b", 8))
    kube.add(bound("q1", "b", 4, 2))
    kube.add(bound("q2", "b", 4, 1, {"tier": "batch"}))
    kube.add(pending("urgent-1", 4, 50))                                  # evicts p on a: the budget is spent
    kube.add(pending("urgent-2", 8, 40))                                  # would need q1 and q2
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/p", "a")]
    assert kube.get("pods", "q1", "default") is not None                 # not killed for a preemption that fails
    assert kube.get("pods", "q2", "default") is not None
    assert not kube.calls("POST", r"/q1/eviction")                        # not even tried


def test_a_victim_its_budget_allows_is_evicted_though_a_more_important_pod_shares_the_budget(kube: FakeKube, api,
                                                                                              clock):
    """The budget allows one disruption; `cpu` (more important, no GPUs) would use it if it were a victim, but only
    `gpu` needs to go: evicting it breaks no budget, and the node is a candidate."""
    kube.add(pdb("batch", "default", {"tier": "batch"}, 1))
    kube.add(node("a", 4))
    kube.add(bound("cpu", "a", 0, 5, {"tier": "batch"}))
    kube.add(bound("gpu", "a", 4, 1, {"tier": "batch"}))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/gpu", "a")]
    assert kube.get("pods", "cpu", "default") is not None


def test_a_budget_spent_meanwhile_refuses_the_preemption_before_an_unguarded_victim_dies(kube: FakeKube, api,
                                                                                          clock):
    """A preemption whose eviction is refused (the budget spent meanwhile by a drain or another eviction: 429)
    gives the node back; the victims a budget covers are evicted first, so that the refusal comes before a victim
    without one is killed for a preemption that does not happen."""
    kube.add(pdb("batch", "default", {"tier": "batch"}, 1))
    kube.add(node("b", 8))
    kube.add(bound("plain", "b", 4, 2))
    kube.add(bound("guarded", "b", 4, 1, {"tier": "batch"}))
    kube.add(pending("urgent", 8, 50))
    kube.before("POST", r"/eviction$", lambda: kube.mutate(   # a drain elsewhere spends the budget meanwhile
        "poddisruptionbudgets", "batch", "default", {"status": {"disruptionsAllowed": 0}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert "preemption failed" in sched.reasons["default/urgent"]
    assert kube.get("pods", "plain", "default") is not None       # not killed for a preemption that failed
    assert kube.get("pods", "guarded", "default") is not None
