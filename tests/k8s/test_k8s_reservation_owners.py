"""The reservations that are a pending pod's own are read from its controlling ownerReference (`k8s_pods.pod_owner`,
the key a migration reserves its target by), never guessed from names: a pod of Job "train-2" does not take the
GPUs reserved for the replacement of Job "train"'s pod, nor does a bare ReplicaSet "web-2"'s pod take Deployment
"web"'s."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free, reserve

from balancer.actuate.k8s_reads import scheduling_request
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def pending(name: str, kind: str, owner: str, **labels: str) -> dict:
    return pod(name, gpus=1, scheduler="gputide", phase="Pending", owner=(kind, owner), labels=labels)


def test_a_pod_of_job_train_2_leaves_the_gpus_reserved_for_job_train(kube: FakeKube, api, clock):
    kube.add(node("a", 2))
    reserve(kube, "a", "default/train", 2, clock.now + 300)
    kube.add(pending("train-2-x7k2p", "Job", "train-2"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/train-2-x7k2p": None}
    kube.add(pending("train-q9z4m", "Job", "train"))   # the replacement the reservation is for takes it
    assert sched.schedule_once() == {"default/train-2-x7k2p": None, "default/train-q9z4m": "a"}


@pytest.mark.parametrize(("kind", "owner", "labels", "mine"), [
    ("Job", "train-2", {}, {"default/p", "default/train-2"}),
    ("StatefulSet", "db-1", {}, {"default/p", "default/db-1"}),
    ("ReplicaSet", "web-2", {}, {"default/p", "default/web-2"}),   # a bare ReplicaSet, no Deployment's
    ("ReplicaSet", "web-7d9f8", {"pod-template-hash": "7d9f8"}, {"default/p", "default/web-7d9f8", "default/web"}),
    ("Job", "train-2", {"gputide.io/job": "train"}, {"default/p", "default/train-2", "default/train"}),
])
def test_a_pods_own_reservations_are_its_own_its_owners_and_its_deployments(kind, owner, labels, mine):
    assert scheduling_request(pending("p", kind, owner, **labels))["owned"] == mine
