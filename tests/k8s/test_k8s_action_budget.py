"""How many API calls one action can make, walked rather than counted by hand: the Kubernetes actuator applies each
action against the fake API server with every combination of up to three failed calls (a 500, so each refusal
takes the action down its undo path; on a write also a 504, no answer, so a write that may have landed is confirmed
or fenced), one try per call, and the most requests any path made, and the most it made
on the reserve of its deadline (undoing, completing, its Event), are what `balancer.actuate.k8s_budget`'s
`ACTION_API_CALLS` and `RESERVE_API_CALLS` say. The action deadline must let those paths end on a slow but healthy
API server (`least_action_deadline_s`, which `gputide run --action-deadline` enforces), so an action that gains a
call on some path fails here before a deadline can cut its healthy path short."""

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
from balancer.actuate.k8s_budget import (
    ACTION_API_CALLS,
    ACTION_DEADLINE_S,
    RESERVE_API_CALLS,
    RESERVE_SHARE,
    SLOW_CALL_S,
    least_action_deadline_s,
)
from balancer.actuate.kubernetes import SUSPENDED_LABEL
from balancer.model import Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode

FAILURES = 3   # failed calls combined on one path (the longest path known needs two: a Workload's write refused,
#                then the borrower's give-back unanswered)


def the_longest_path(kube: FakeKube, actuator: KubernetesActuator, apply: Callable[[], object]) -> tuple[int, int]:
    """The most requests `apply()` makes on any path with up to FAILURES failed requests, the cluster as it is now
    before each try (a depth-first walk that fails, in turn, each request after the last one it failed), and the
    most of them any path makes on the reserve of its deadline (`_Api.reserve`)."""
    objects, evicted, dispatch = copy.deepcopy(kube.objects), copy.deepcopy(kube._kueue_evicted), kube.dispatch
    on_reserve: list[bool] = []   # per try, in the client's thread: whether it ran on the reserve
    try_timeout = actuator.api._try_timeout
    actuator.api._try_timeout = lambda what: on_reserve.append(actuator.api.reserving) or try_timeout(what)
    most_on_reserve = 0

    def requests_with(failing: dict[int, int]) -> int:
        nonlocal most_on_reserve
        kube.objects, kube._kueue_evicted = copy.deepcopy(objects), copy.deepcopy(evicted)
        kube.requests.clear()
        on_reserve.clear()

        def failing_dispatch(method: str, path: str, content_type: str | None, body):
            code = failing.get(len(kube.requests) + 1)
            if code is not None:
                kube.requests.append(Request(method, path.partition("?")[0], path.partition("?")[2], content_type,
                                             body))
                return code, status_body(code, "InternalError" if code == 500 else "Timeout", "injected fault")
            return dispatch(method, path, content_type, body)

        kube.dispatch = failing_dispatch
        try:
            apply()
        finally:
            kube.dispatch = dispatch
        assert len(on_reserve) == len(kube.requests)   # one try per request
        most_on_reserve = max(most_on_reserve, sum(on_reserve))
        return len(kube.requests)

    longest, walk = 0, [({}, 0)]
    while walk:
        failing, last = walk.pop()
        made = requests_with(failing)
        longest = max(longest, made)
        if len(failing) < FAILURES:
            walk += [({**failing, k: code}, k) for k in range(last + 1, made + 1)
                     for code in ((500, 504) if kube.requests[k - 1].method != "GET" else (500,))]
    return longest, most_on_reserve


def migrate_setup(kube: FakeKube) -> Migrate:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return migrate()


def migrate_a_jobs_pod(kube: FakeKube) -> Migrate:
    """A Job's pod: its Job is read too, before anything changes, whether the eviction could fail it."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(job("train", parallelism=1))
    kube.add(pod("train-x", node_name="n1", owner=("Job", "train")))
    return migrate(workload="default/train-x", source=(1,), target=(2,), node_name="n2")


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
    "migrate": [migrate_setup, migrate_a_jobs_pod],
    "scale_training": [resume_a_stopped_queued_job, shrink_an_admitted_queued_job, stop_an_admitted_queued_job,
                       grow_a_plain_job],
    "scale_inference": [scale_an_hpa_floor, scale_a_deployment],
    "power_limit": [cap_power],
    "taint_node": [taint],
}


def test_every_action_kind_has_its_count_walked():
    assert set(SCENARIOS) == set(ACTION_API_CALLS)


def test_every_action_kind_has_its_reserve_counted():
    assert set(RESERVE_API_CALLS) == set(ACTION_API_CALLS)


@pytest.mark.parametrize("kind", sorted(SCENARIOS))
def test_the_longest_path_of_each_action_makes_as_many_calls_as_counted(kind: str, clock) -> None:
    longest = []
    for setup in SCENARIOS[kind]:
        with FakeKube() as kube:
            action = setup(kube)
            assert action.kind == kind
            actuator = KubernetesActuator(kube.client(), sleep=lambda _s: None, clock=clock, max_retries=0,
                                          kueue_queues=("inference", "training"))
            longest.append(the_longest_path(kube, actuator, lambda a=action, k=actuator: k.apply(a, SNAP)))
    paths = dict(zip([s.__name__ for s in SCENARIOS[kind]], longest))
    assert max(n for n, _ in longest) == ACTION_API_CALLS[kind], paths
    assert max(r for _, r in longest) == RESERVE_API_CALLS[kind], paths


def test_the_default_deadline_lets_the_longest_action_end_on_a_slow_but_healthy_api_server():
    """Every call of the longest path at the API latency SLO's 5 s fits in the action's own two thirds of the
    deadline, and the most calls any path makes on the reserve fit in its last third: 24 x 5 s = 120 s <= 120 s,
    11 x 5 s = 55 s <= 60 s. An action that gains a call on its longest path needs a longer deadline."""
    assert (max(ACTION_API_CALLS.values()), max(RESERVE_API_CALLS.values()), SLOW_CALL_S) == (24, 11, 5.0)
    assert least_action_deadline_s() == 180.0 <= ACTION_DEADLINE_S == 180.0
    assert 24 * SLOW_CALL_S <= ACTION_DEADLINE_S * (1 - RESERVE_SHARE) and 11 * SLOW_CALL_S <= ACTION_DEADLINE_S / 3
