"""A Job whose training framework restarts every worker on any change of its size says so with the annotation
`gputide.io/resize-restarts: "true"` (torchrun's elastic agents restart the whole worker group from the last
checkpoint on every membership change). Its pods then read `restarts_on_resize`, so the capacity planner prices a
grow of it as it prices a Kueue restart (the loss of the work since the checkpoint), and the actuator's detail says
what the resize does. Before, only Kueue's restarts were known, and such a grow was priced as free."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, job, pod
from test_k8s_workloads import with_meta

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_kueue import RESIZE_RESTARTS_ANNOTATION
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.model import ScaleTraining
from balancer.plan.capacity import JobView
from balancer.plan.capacity_pools import grow_gain
from tests.k8s.test_k8s_shrink_record import SNAP

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}


def add_job(kube: FakeKube, name: str, note: str | None) -> None:
    j = job(name, "ml", parallelism=2)
    j["metadata"]["annotations"] = {RESIZE_RESTARTS_ANNOTATION: note} if note is not None else {}
    kube.add(j)
    for i in range(2):
        kube.add(with_meta(pod(f"{name}-{i}", "ml", owner=("Job", name)), annotations=ELASTIC))


def test_the_job_s_pods_read_restarts_on_resize_only_when_it_says_true(kube: FakeKube, api, clock):
    add_job(kube, "torchrun", "true")
    add_job(kube, "plain", None)
    add_job(kube, "other", "yes")   # only "true" counts, as for Kueue's elastic-job annotation
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    assert {w.owner: w.restarts_on_resize for w in got.values()} == {"torchrun": True, "plain": False,
                                                                    "other": False}


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def test_resizing_it_says_every_worker_restarts(kube: FakeKube, actuator):
    add_job(kube, "torchrun", "true")
    add_job(kube, "plain", None)
    said = {}
    for name in ("torchrun", "plain"):
        result = actuator.apply(ScaleTraining(reason="t", job=f"ml/{name}", workers=3, previous_workers=2), SNAP)
        assert result.outcome is Outcome.APPLIED, result.detail
        said[name] = "every worker restarts from its last checkpoint" in result.detail
    assert said == {"torchrun": True, "plain": False}


def test_a_grow_of_such_a_job_is_worth_only_what_it_adds_beyond_the_restart():
    """The planner's pricing the flag feeds: 2 workers an hour after the checkpoint, 1 more for a 2-hour loan."""
    view = dict(name="job", workers=2, elastic_min=1, elastic_max=8, priority=0, gpus_by_model={"A100-SXM4-80GB": 2},
                since_checkpoint_s=3600.0)
    free = JobView(**view)
    restarting = JobView(**view, restarts_on_resize=True)
    assert grow_gain(free, 1, 2.0) > grow_gain(restarting, 1, 2.0)
    assert grow_gain(restarting, 1, 0.5) <= 0   # a short loan does not pay for the lost hour of two workers
