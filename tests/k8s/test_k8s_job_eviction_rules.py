"""Whether evicting a Job's pod (a migration) could fail the Job, as the Job controller would decide it: the
podFailurePolicy rules apply in order and the first that matches the failed pod wins (JobSpec.podFailurePolicy), so
an Ignore rule for DisruptionTarget spares an evicted pod only when no earlier rule may catch it first; the exit
code of the evicted pod is not known in advance (SIGTERM's 143, SIGKILL's 137, 0, or the application's own). With
`restartPolicy: OnFailure`, the restarts of its pods' containers count against backoffLimit apart from its failed
pods, the evicted pod's still counted while it terminates."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, job, node, pod
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import eviction_refusal

IGNORE_EVICTED = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
FAIL_ON_ERROR = {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}


def a_job(rules: list[dict] | None = None, backoff: int | None = 0, restart: str = "Never") -> dict:
    spec = job("train", parallelism=1)
    spec["spec"]["template"]["spec"]["restartPolicy"] = restart
    if backoff is not None:
        spec["spec"]["backoffLimit"] = backoff
    if rules is not None:
        spec["spec"]["podFailurePolicy"] = {"rules": rules}
    return spec


@pytest.mark.parametrize(("rules", "moved"), [
    ([IGNORE_EVICTED], True),
    ([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}], True),   # status defaults to True
    ([IGNORE_EVICTED, FAIL_ON_ERROR], True),                     # ignored before the FailJob rule is reached
    ([FAIL_ON_ERROR, IGNORE_EVICTED], False),                    # the evicted pod's 143 fails the Job first
    ([{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
      IGNORE_EVICTED], True),                                    # the docs' example: 42 is the application's bug
    ([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137, 143]}}, IGNORE_EVICTED], False),
    ([{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}, IGNORE_EVICTED],
     False),
    ([{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}, IGNORE_EVICTED],
     False),                                                     # counted, and the limit is 0
    ([{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [143]}}], False),   # it may exit 0 or 137
    ([{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}], False),
    ([{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}, IGNORE_EVICTED],
     True),                                                      # never matches an evicted pod
    ([{"action": "Quarantine", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}, IGNORE_EVICTED],
     True),                                                      # an action it does not know is skipped
], ids=["ignore", "ignore-status-default", "ignore-first", "failjob-first", "failjob-on-42", "failjob-on-signals",
        "failjob-on-disruption", "count-first", "ignore-exit-code", "ignore-status-false", "failjob-status-false",
        "unknown-action"])
def test_the_first_rule_that_may_match_the_evicted_pod_decides(rules, moved) -> None:
    assert (eviction_refusal(a_job(rules)) is None) is moved, eviction_refusal(a_job(rules))


def test_a_count_rule_before_the_ignore_rule_counts_the_eviction_against_the_limit() -> None:
    rules = [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}, IGNORE_EVICTED]
    assert eviction_refusal(a_job(rules, backoff=6)) is None
    assert "backoffLimit (0 of 0 used)" in eviction_refusal(a_job(rules, backoff=0))


def restarted(times: int) -> dict:
    p = pod("train-x", node_name="n1", owner=("Job", "train"))
    p["status"]["containerStatuses"] = [{"name": "main", "restartCount": times, "ready": True,
                                     "image": "registry.example/app:1", "imageID": ""}]
    return p


@pytest.mark.parametrize(("restarts", "moved"), [(0, True), (1, True), (2, False), (3, False)])
def test_a_restarting_pod_of_an_on_failure_job_leaves_a_restart_to_spare(restarts, moved) -> None:
    """restartPolicy OnFailure: the Job fails once its Pending and Running pods' container restarts reach
    backoffLimit (3 here). The evicted pod's count until it is gone, and its replacement's add to them."""
    refusal = eviction_refusal(a_job(backoff=3, restart="OnFailure"), restarted(restarts))
    assert (refusal is None) is moved, refusal
    if not moved:
        assert "restartPolicy OnFailure" in refusal and f"{restarts} of 3" in refusal


def test_restarts_do_not_count_for_a_job_whose_pods_are_replaced() -> None:
    assert eviction_refusal(a_job(backoff=3), restarted(3)) is None   # restartPolicy Never: failed pods count


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def test_a_failjob_rule_ahead_of_the_ignore_rule_keeps_the_pod_where_it_is(cluster: FakeKube, actuator) -> None:
    """The Job's FailJob rule for any non-zero exit code comes first: the evicted pod (143 after SIGTERM) failed the
    whole Job although an Ignore rule for DisruptionTarget follows. Refused before anything changes."""
    cluster.add(a_job([FAIL_ON_ERROR, IGNORE_EVICTED]))
    cluster.add(pod("train-x", node_name="n1", owner=("Job", "train")))
    result = actuator.apply(migrate(workload="default/train-x", source=(1,), target=(2,), node_name="n2"), SNAP)
    assert result.outcome is Outcome.FAILED and "rule 0 (FailJob)" in result.detail, result.detail
    assert not cluster.calls("POST", r"/eviction$") and not [r for r in cluster.requests if r.method == "PATCH"]


def test_the_pods_restarts_are_read_with_it(cluster: FakeKube, actuator) -> None:
    cluster.add(a_job(backoff=2, restart="OnFailure"))
    cluster.add(restarted(1))
    result = actuator.apply(migrate(workload="default/train-x", source=(1,), target=(2,), node_name="n2"), SNAP)
    assert result.outcome is Outcome.FAILED and "1 of 2" in result.detail, result.detail
    assert not cluster.calls("POST", r"/eviction$")
