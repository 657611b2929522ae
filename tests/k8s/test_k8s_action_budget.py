"""How many API calls one action can make, walked rather than counted by hand: the Kubernetes actuator applies each
action against the fake API server with every combination of up to three failed calls (a 500, so each refusal
takes the action down its undo path), one try per call, and the most requests any path made is what
`balancer.app.health.ACTION_API_CALLS` says. The controller's grace period and its liveness limit are derived from
those counts (tests/deploy/test_deploy_grace_period.py, tests/cli/test_cli_health.py), so an action that gains a
call on some path fails here before the kubelet can kill a controller in the middle of it."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from fakeapi import (
    FakeKube,
    Request,
    clusterqueue,
    deployment,
    hpa,
    job,
    node,
    pdb,
    pod,
    status_body,
    workload,
)
from test_k8s_actuator import SNAP, migrate, power

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.kubernetes import SUSPENDED_LABEL
from balancer.app.health import ACTION_API_CALLS
from balancer.model import Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode

FAILURES = 3   # failed calls combined on one path (the longest path known needs two)


def the_longest_path(kube: FakeKube, apply: Callable[[], object]) -> int:
    """The most requests `apply()` makes on any path with up to FAILURES failed requests, the cluster as it is now
    before each try: a depth-first walk that fails, in turn, each request after the last one it failed."""
    objects, evicted, dispatch = copy.deepcopy(kube.objects), copy.deepcopy(kube._kueue_evicted), kube.dispatch

    def requests_with(failing: frozenset[int]) -> int:
        kube.objects, kube._kueue_evicted = copy.deepcopy(objects), copy.deepcopy(evicted)
        kube.requests.clear()

        def failing_dispatch(method: str, path: str, content_type: str | None, body):
            if len(kube.requests) + 1 in failing:
                kube.requests.append(Request(method, path.partition("?")[0], path.partition("?")[2], content_type,
                                             body))
                return 500, status_body(500, "InternalError", "injected fault")
            return dispatch(method, path, content_type, body)

        kube.dispatch = failing_dispatch
        try:
            apply()
        finally:
            kube.dispatch = dispatch
        return len(kube.requests)

    longest, walk = 0, [(frozenset(), 0)]
    while walk:
        failing, last = walk.pop()
        made = requests_with(failing)
        longest = max(longest, made)
        if len(failing) < FAILURES:
            walk += [(failing | {k}, k) for k in range(last + 1, made + 1)]
    return longest


def migrate_setup(kube: FakeKube) -> Migrate:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return migrate()


def queues(kube: FakeKube) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))


def resume_a_stopped_queued_job(kube: FakeKube) -> ScaleTraining:
    """A queued Job gputide stopped (labelled, its Workload inactive, found by owner: no job-uid label), resumed
    with more workers than before: quota lent first, the Workload reactivated after the Job's new size."""
    queues(kube)
    spec = job("train", "ml", parallelism=4, gpus=2, queue="training-lq", suspend=True)
    spec["metadata"]["labels"][SUSPENDED_LABEL] = "true"
    stored = kube.add(spec)
    stopped = workload(stored, label=False)
    stopped["spec"]["active"] = False
    kube.add(stopped)
    return ScaleTraining(reason="tide", job="ml/train", workers=6, previous_workers=0)


def shrink_an_admitted_queued_job(kube: FakeKube) -> ScaleTraining:
    queues(kube)
    kube.add(workload(kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq")), "h100"))
    return ScaleTraining(reason="tide", job="ml/train", workers=2, previous_workers=4)


def stop_an_admitted_queued_job(kube: FakeKube) -> ScaleTraining:
    queues(kube)
    kube.add(workload(kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq")), "h100"))
    return ScaleTraining(reason="tide", job="ml/train", workers=0, previous_workers=4)


def grow_a_plain_job(kube: FakeKube) -> ScaleTraining:
    kube.add(job("train", "ml", parallelism=4, gpus=2))
    return ScaleTraining(reason="tide", job="ml/train", workers=6, previous_workers=4)


def scale_an_hpa_floor(kube: FakeKube) -> ScaleInference:
    kube.add(deployment("web"))
    kube.add(hpa("web", "web"))
    return ScaleInference(reason="tide", service="web", replicas=4, previous_replicas=2)


def scale_a_deployment(kube: FakeKube) -> ScaleInference:
    kube.add(deployment("web"))
    return ScaleInference(reason="tide", service="web", replicas=4, previous_replicas=2)


def cap_power(kube: FakeKube) -> SetPowerLimit:
    kube.add(node("n1", 2))
    return power()


def taint(kube: FakeKube) -> TaintNode:
    kube.add(node("n1", 2))
    return TaintNode(reason="hot", node="n1")


SCENARIOS = {
    "migrate": [migrate_setup],
    "scale_training": [resume_a_stopped_queued_job, shrink_an_admitted_queued_job, stop_an_admitted_queued_job,
                       grow_a_plain_job],
    "scale_inference": [scale_an_hpa_floor, scale_a_deployment],
    "power_limit": [cap_power],
    "taint_node": [taint],
}


def test_every_action_kind_has_its_count_walked():
    assert set(SCENARIOS) == set(ACTION_API_CALLS)


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_the_longest_path_of_each_action_makes_as_many_calls_as_counted(kind: str, clock) -> None:
    longest = []
    for setup in SCENARIOS[kind]:
        with FakeKube() as kube:
            action = setup(kube)
            assert action.kind == kind
            actuator = KubernetesActuator(kube.client(), sleep=lambda _s: None, clock=clock, max_retries=0,
                                          kueue_queues=("inference", "training"))
            longest.append(the_longest_path(kube, lambda a=action, k=actuator: k.apply(a, SNAP)))
    assert max(longest) == ACTION_API_CALLS[kind], dict(zip([s.__name__ for s in SCENARIOS[kind]], longest))
