"""What a starving pod asking no GPU (nor MIG instance) is told its hold reserves: the CPU and memory it asks, which
it waits for (`closest_to_fitting` ranks the nodes by those). It was told "0 GPUs reserved ... as GPUs free up
there", alone or as a member of a starving group. Against the fake API server, then `_reserved_said` itself."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from test_k8s_starvation import most_free
from test_k8s_starvation_cpu import starving_cpu_job, using

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_holds import Holds
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def test_a_starving_cpu_only_pod_is_told_the_cpu_and_memory_reserved(kube: FakeKube, api, clock):
    """cpu-job (no GPU, 4 CPUs, 8 GiB) fits nowhere: b, 1 CPU short, is held for it."""
    for obj in (node("a", 8, cpu="8"), using("hog-a", "a", 0, "8"), node("b", 8, cpu="8"),
                using("hog-b", "b", 0, "5")):
        kube.add(obj)
    starving_cpu_job(kube, clock)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/cpu-job": None}
    why = sched.reasons["default/cpu-job"]
    assert "GPUs" not in why.split("Waiting")[-1]   # it waits for no GPU
    assert "Waiting 11 min: holding b (4000m CPU, 8192 MiB memory reserved) as they free up there." in why


def cpu_member(name: str, clock) -> dict:
    """A member of group "train" asking no GPU and 4 CPUs, pending 11 min."""
    p = pod(name, gpus=0, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: "train"})
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - 11 * 60)
    return p


def test_a_starving_group_of_cpu_only_members_is_told_the_cpu_and_memory_reserved_for_each(kube: FakeKube, api,
                                                                                           clock):
    """a and b: 8 CPUs, 5 taken each; w0 and w1, a group asking no GPU and 4 CPUs each, fit nowhere: after 11 min
    each holds a node, reserving its CPU and memory there."""
    for obj in (node("a", 8, cpu="8"), using("hog-a", "a", 0, "5"), node("b", 8, cpu="8"),
                using("hog-b", "b", 0, "5"), cpu_member("w0", clock), cpu_member("w1", clock)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    holding = dict(sched.starving)
    assert sorted(holding.items()) in ([("default/w0", "a"), ("default/w1", "b")],
                                       [("default/w0", "b"), ("default/w1", "a")])
    said = "; ".join(f"{m} on {holding[m]}, 4000m CPU, 8192 MiB memory reserved" for m in sorted(holding))
    why = sched.reasons["default/w0"].split("Waiting")[-1]
    assert "GPUs" not in why   # they wait for no GPU
    assert f" 11 min: holding nodes for the group's members ({said}) as what each waits for frees up there." in why


def test_the_reserved_said_names_only_what_the_pod_asks():
    def said(gpus: int = 0, cpu: int = 0, memory: int = 0, extended: dict | None = None) -> str:
        return Holds._reserved_said({"num_gpu": gpus, "cpu_milli": cpu, "memory_mib": memory,
                                     "extended": extended or {"pods": 1.0}})
    assert said(gpus=2, cpu=4000, memory=8192) == "2 GPUs"
    assert said(cpu=8000, memory=16384) == "8000m CPU, 16384 MiB memory"
    assert said(cpu=500) == "500m CPU"
    assert said(memory=512) == "512 MiB memory"
    assert said() == "no GPU, CPU, memory or extended resource"   # the pod slot alone is not said
    # a pod asking only an RDMA device: its hold reserves the device (it was "no GPU, CPU or memory")
    assert said(extended={"rdma/hca": 1.0, "pods": 1.0}) == "1 rdma/hca"
    assert said(extended={"rdma/hca": 2.0, "example.com/fpga": 1.0, "pods": 1.0}) == "1 example.com/fpga, 2 rdma/hca"
    assert said(cpu=500, extended={"rdma/hca": 1.0, "pods": 1.0}) == "500m CPU"   # it waits for the CPU
    assert said(cpu=500, extended={"nvidia.com/mig-1g.10gb": 2.0}) == "2 nvidia.com/mig-1g.10gb"
