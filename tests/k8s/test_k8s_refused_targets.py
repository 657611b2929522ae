"""The Kubernetes actuator's own refusals of a migration's target are told from every other failure
(`balancer.actuation_refusals.refused_target`), by the real actuator's results: the planner then moves the workload
to another node next cycle instead of offering the refused target again, or not moving it at all. A rewording of the
actuator's refusals fails here rather than silently turning the memory off."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube
from test_k8s_actuator import SNAP, actuator, cluster, migrate  # noqa: F401  (fixtures)

from balancer.actuate.base import Outcome
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION
from balancer.actuation_refusals import refused_target


def spread_over_racks(kube: FakeKube) -> None:
    """A hard topology spread over a rack label n2 does not have: kube-scheduler would refuse the replacement there."""
    kube.mutate("pods", "web-1", "default", {"spec": {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}}]}})


def held_for_others(kube: FakeKube) -> None:
    """n2's two GPUs held by the secondary scheduler for a pod that preempted there."""
    theirs = {"pod": "default/urgent", "count": 2, "expires": "2099-01-01T00:00:00Z"}
    kube.mutate("nodes", "n2", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {"default/urgent": theirs})}}})


def node_selector(kube: FakeKube) -> None:
    """The pod's node selector, as read now, does not select n2."""
    kube.mutate("pods", "web-1", "default", {"spec": {"nodeSelector": {"pool": "blue"}}})


def budget_spent(kube: FakeKube) -> None:
    kube.mutate("poddisruptionbudgets", "web", "default", {"status": {"disruptionsAllowed": 0}})


def pinned(kube: FakeKube) -> None:
    kube.mutate("pods", "web-1", "default", {"metadata": {"annotations": {"gputide.io/movable": "false"}}})


def terminating(kube: FakeKube) -> None:
    kube.mutate("pods", "web-1", "default", {"metadata": {"deletionTimestamp": "2026-12-05T09:00:00Z"}})


def api_unavailable(kube: FakeKube) -> None:
    kube.inject("POST", r"/eviction$", 503, count=10)


def target_gone(kube: FakeKube) -> None:
    kube.inject("GET", r"/api/v1/nodes/n2$", 404)


@pytest.mark.parametrize(("setup", "outcome", "about_target"), [
    pytest.param(spread_over_racks, Outcome.FAILED, True, id="its topology spread constraint refuses the target"),
    pytest.param(held_for_others, Outcome.RETRY, True, id="the target's GPUs are held for another pod"),
    pytest.param(node_selector, Outcome.FAILED, True, id="its node selector refuses the target"),
    pytest.param(budget_spent, Outcome.RETRY, False, id="a PodDisruptionBudget: about the pod, not the target"),
    pytest.param(pinned, Outcome.FAILED, False, id="pinned since the snapshot: about the pod"),
    pytest.param(terminating, Outcome.FAILED, False, id="being deleted already: about the pod"),
    pytest.param(api_unavailable, Outcome.RETRY, False, id="the API answers 503: transient"),
    pytest.param(target_gone, Outcome.FAILED, False, id="the target node reads 404: an API answer, not a refusal"),
])
def test_only_the_actuators_refusals_of_the_target_are_remembered_as_such(cluster: FakeKube, actuator,  # noqa: F811
                                                                          setup, outcome, about_target) -> None:
    setup(cluster)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is outcome, result.detail
    assert refused_target(result) is about_target, result.detail
    if about_target:   # refused before anything changed: nothing to undo, another node may take it
        assert not cluster.calls("POST", r"/eviction$") and cluster.get("pods", "web-1", "default") is not None
