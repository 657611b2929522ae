"""A pod that may run only on some GPU models (`gputide.io/gpu-spec`, which the placement policy enforces) neither
preempts nor holds a node of another model: its victims would die for a node it must not run on, and the
reservation would then bind it there without the policy being asked."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339
from balancer.app.scheduling import EnginePlacer


def bound(name: str, node_name: str, gpus: int, priority: int) -> dict:
    p = pod(name, gpus=gpus, node_name=node_name)
    p["spec"]["priority"] = priority
    p["status"]["startTime"] = "2024-01-01T00:00:00Z"
    return p


def pending(name: str, gpus: int, priority: int, spec: str, created: str | None = None) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["priority"] = priority
    p["metadata"]["annotations"] = {"gputide.io/gpu-spec": spec}
    if created:
        p["metadata"]["creationTimestamp"] = created
    return p


def test_a_pod_does_not_preempt_on_a_gpu_model_it_may_not_run_on(kube: FakeKube, api, clock):
    kube.add(node("a100", 4, model="NVIDIA-A100-SXM4-80GB"))
    kube.add(bound("low", "a100", 4, 1))
    kube.add(node("h100", 4, model="NVIDIA-H100-80GB-HBM3"))
    kube.add(bound("vip", "h100", 4, 100))
    kube.add(pending("urgent", 4, 50, "H100-SXM"))
    sched = SecondaryScheduler(api, "gputide", EnginePlacer("bestfit"), clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    assert sched.schedule_once() == {"default/urgent": None}               # never bound to the A100 node


def test_a_starving_pod_does_not_hold_a_node_of_a_model_it_may_not_run_on(kube: FakeKube, api, clock):
    kube.add(node("a100", 4, model="NVIDIA-A100-SXM4-80GB"))
    kube.add(bound("busy-a", "a100", 3, 0))
    kube.add(node("h100", 4, model="NVIDIA-H100-80GB-HBM3"))
    kube.add(bound("busy-h", "h100", 4, 0))
    kube.add(pending("big", 2, 0, "H100-SXM", rfc3339(clock.now - 3600)))
    sched = SecondaryScheduler(api, "gputide", EnginePlacer("bestfit"), clock=clock)
    sched.schedule_once()
    assert [node for _, node in sched.starving] in ([], ["h100"])
    kube.delete("pods", "busy-a", "default")                              # the A100 node frees up
    assert sched.schedule_once() == {"default/big": None}                   # still not its model


def test_room_on_a_model_the_pod_may_not_run_on_does_not_keep_it_from_preempting(kube: FakeKube, api, clock):
    """The pod fits the A100 node by its requests, but the policy may not put it there: it fits nowhere it may
    run, so it preempts where it may, rather than wait for ever behind pods of lower priority."""
    kube.add(node("a100", 4, model="NVIDIA-A100-SXM4-80GB"))                # empty
    kube.add(node("h100", 4, model="NVIDIA-H100-80GB-HBM3"))
    kube.add(bound("low", "h100", 4, 1))
    kube.add(pending("urgent", 4, 50, "H100-SXM"))
    sched = SecondaryScheduler(api, "gputide", EnginePlacer("bestfit"), clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low", "h100")]
    assert sched.schedule_once() == {"default/urgent": "h100"}
