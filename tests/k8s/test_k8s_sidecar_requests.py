"""A pod's effective request with sidecar containers (KEP-753: init containers with `restartPolicy: Always`), as
the kubelet and kube-scheduler count it: max(what its init phase holds at most, its containers and sidecars
summed), where a one-shot init container runs alongside the sidecars started *before* it. Counting such an init
container alone under-counted the pod, and the scheduler bound it to a node it could not start on (its init phase
needs more GPUs, CPU or memory than the node had left)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free

from balancer.actuate.k8s_reads import scheduling_request
from balancer.actuate.k8s_requests import effective_requests
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def container(name: str, cpu: str, memory: str, gpus: int = 0, sidecar: bool = False) -> dict:
    c = {"name": name, "image": "registry.example/app:1",
         "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"nvidia.com/gpu": str(gpus)}}}
    return {**c, "restartPolicy": "Always"} if sidecar else c


def with_containers(p: dict, containers: list[dict], inits: list[dict]) -> dict:
    p["spec"]["containers"], p["spec"]["initContainers"] = containers, inits
    return p


def counted(containers: list[dict], inits: list[dict]) -> tuple[int, int, int]:
    req = scheduling_request(with_containers(pod("p", scheduler="gputide", phase="Pending"), containers, inits))
    return req["num_gpu"], req["cpu_milli"], req["memory_mib"]


def test_a_one_shot_init_container_runs_alongside_the_sidecars_started_before_it():
    # init phase: the sidecar (1 GPU, 1 CPU, 1Gi) and the init container (2 GPUs, 4 CPU, 8Gi) at once: 3 GPUs,
    # 5 CPU, 9Gi; running: the sidecar and the main container, 2 GPUs, 3 CPU, 3Gi
    assert counted([container("main", "2", "2Gi", 1)],
                   [container("proxy", "1", "1Gi", 1, sidecar=True), container("setup", "4", "8Gi", 2)]
                   ) == (3, 5000, 9 * 1024)


def test_a_one_shot_init_container_before_the_sidecars_runs_alone():
    # the init container ends before the sidecar starts: max(4 CPU, 1 + 2 CPU)
    assert counted([container("main", "2", "2Gi", 1)],
                   [container("setup", "4", "8Gi", 2), container("proxy", "1", "1Gi", 1, sidecar=True)]
                   ) == (2, 4000, 8 * 1024)


def test_only_the_sidecars_started_before_an_init_container_count_with_it():
    # s1, then init (with s1: 4 + 1 CPU), then s2: the running pod holds s1 + s2 + main = 1 + 2 + 1 CPU
    inits = [container("s1", "1", "1Gi", sidecar=True), container("setup", "4", "1Gi"),
             container("s2", "2", "6Gi", sidecar=True)]
    assert counted([container("main", "1", "1Gi")], inits) == (0, 5000, 8 * 1024)


@pytest.mark.parametrize("resource", ["cpu", "memory", "nvidia.com/gpu"])
def test_every_resource_takes_the_larger_of_the_init_phase_and_the_running_pod(resource: str):
    spec = {"spec": {"containers": [{"resources": {"requests": {resource: "2"}}}],
                     "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {resource: "3"}}},
                                        {"resources": {"requests": {resource: "4"}}}]}}
    assert effective_requests(spec)[resource] == 7.0   # init phase 3 + 4 against running 2 + 3


def test_the_scheduler_does_not_bind_a_pod_whose_init_phase_the_node_cannot_hold(kube: FakeKube, api, clock):
    kube.add(node("a", 2))
    kube.add(with_containers(pod("p", scheduler="gputide", phase="Pending"), [container("main", "2", "2Gi", 1)],
                             [container("proxy", "1", "1Gi", 1, sidecar=True), container("setup", "4", "8Gi", 2)]))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/p": None}                 # 3 GPUs during its init phase
    assert "Insufficient nvidia.com/gpu" in sched.reasons["default/p"]
