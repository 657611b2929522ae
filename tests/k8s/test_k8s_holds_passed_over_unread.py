"""A pod that fits nowhere has its victims passed over said (`Preemptor.passed_over_said`) only where it may preempt:
the bound pods are grouped per node for it (`Holds._bound_by_node`) only then. Since the pass-over was said, they were
grouped for every pod fitting nowhere, with preemption off or the pod's `preemptionPolicy` Never too, though no
victim is passed over for it: a walk over every bound pod (20,000 in a large cluster) in passes that need none.
Against the fake API server."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def grouped(kube: FakeKube, api, clock, held_by: int, policy: str = "PreemptLowerPriority", **kwargs) -> int:
    """a full (p, of priority `held_by`), urgent (50, `policy`) pending: how often one pass grouped the bound pods."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, held_by))
    kube.add(pending("urgent", 4, 50, preemptionPolicy=policy))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, **kwargs)
    calls, real = [], sched.holds._bound_by_node
    sched.holds._bound_by_node = lambda: calls.append(True) or real()
    sched.schedule_once()
    assert "Insufficient nvidia.com/gpu" in sched.reasons["default/urgent"]
    return len(calls)


@pytest.mark.parametrize("kwargs", [{"preemption": False}, {"policy": "Never"}])
def test_the_bound_pods_are_not_grouped_for_a_pod_that_may_not_preempt(kube: FakeKube, api, clock, kwargs):
    assert grouped(kube, api, clock, 1, **kwargs) == 0


def test_they_are_grouped_for_a_pod_that_may(kube: FakeKube, api, clock):
    assert grouped(kube, api, clock, 100) > 0                         # p more important: no victim, none passed over
