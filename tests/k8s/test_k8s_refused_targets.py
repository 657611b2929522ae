"""The Kubernetes actuator's own refusals of a migration say what they refuse by the error they raise
(`balancer.actuate.base.refusal`: `Refused.TARGET` for the target alone, `Refused.WORKLOAD` for the pod itself), never
by their words: the planner then moves the workload to another node next cycle instead of offering the refused target
again, or does not move it at all. Into the result (`refused`, code `refused` whatever the outcome: a target held
for others was counted as a transport error) by `refused_result`, as `KubernetesActuator.apply` makes it of
`_failed`'s. Every other failure (a budget, the API's answers) is no refusal."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube
from test_k8s_actuator import SNAP, actuator, cluster, migrate  # noqa: F401  (fixtures)

from balancer.actuate.base import Outcome, Refused, refusal, refused_result
from balancer.actuate.k8s_actuator import _failed
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION
from balancer.actuation_codes import error_code
from balancer.errors import ActuationError


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
    kube.inject("GET", r"/api/v1/nodes/n2$", 404, count=2)


TARGET, WORKLOAD = Refused.TARGET, Refused.WORKLOAD


@pytest.mark.parametrize(("setup", "outcome", "refused", "code"), [
    pytest.param(spread_over_racks, Outcome.FAILED, TARGET, "refused",
                 id="its topology spread constraint refuses the target"),
    pytest.param(held_for_others, Outcome.RETRY, TARGET, "refused", id="the target's GPUs are held for another pod"),
    pytest.param(node_selector, Outcome.FAILED, TARGET, "refused", id="its node selector refuses the target"),
    pytest.param(budget_spent, Outcome.RETRY, None, "429", id="a PodDisruptionBudget: about the pod, not the target"),
    pytest.param(pinned, Outcome.FAILED, WORKLOAD, "refused", id="pinned since the snapshot: about the pod"),
    pytest.param(terminating, Outcome.FAILED, WORKLOAD, "refused", id="being deleted already: about the pod"),
    pytest.param(api_unavailable, Outcome.RETRY, None, "503", id="the API answers 503: transient"),
    pytest.param(target_gone, Outcome.FAILED, None, "404",
                 id="the target node reads 404: an API answer, not a refusal"),
])
def test_the_actuators_refusals_say_what_they_refuse(cluster: FakeKube, actuator,  # noqa: F811
                                                    setup, outcome, refused, code) -> None:
    setup(cluster)
    applied = actuator.apply(migrate(), SNAP)   # what the loop is told
    assert (applied.outcome, applied.refused, applied.code) == (outcome, refused, code), applied
    with (actuator.api.deadline(actuator.action_deadline_s), actuator.api.writes() as unknown,
          pytest.raises(ActuationError) as raised):   # as `apply` calls it
        actuator.migrations.migrate(migrate(), SNAP)
    err = raised.value
    assert refusal(err) is refused, err
    result = refused_result(_failed(migrate(), outcome, err, unknown), err)
    assert (result.refused, result.code, error_code(str(outcome), result.code)) == (refused, code, code), err
    if refused is TARGET:   # refused before anything changed: nothing to undo, another node may take it
        assert not cluster.calls("POST", r"/eviction$") and cluster.get("pods", "web-1", "default") is not None
