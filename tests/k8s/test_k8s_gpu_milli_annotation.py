"""A pod whose `gputide.io/gpu-milli` annotation is not a whole number of thousandths of a GPU ("0.5", "half") is
left pending and told why; the pass goes on for the other pods (it used to raise ValueError, which is no
ActuationError, and end `gputide schedule`). (The controller reads an unreadable one as a whole GPU,
`k8s_pods.as_int`.)"""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import events_of, most_free, scheduled_condition

from balancer.actuate.k8s_reads import scheduling_request
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def pending(name: str, milli: str | None = None, group: str | None = None) -> dict:
    p = pod(name, gpus=1, scheduler="gputide", phase="Pending", labels={"scheduling.x-k8s.io/pod-group": group}
            if group else None)
    if milli is not None:
        p["metadata"]["annotations"] = {"gputide.io/gpu-milli": milli}
    return p


@pytest.mark.parametrize("watch", [False, True])
@pytest.mark.parametrize("milli", ["0.5", "half", "500m"])
def test_a_pod_with_an_unreadable_gpu_milli_waits_told_why_and_the_pass_goes_on(kube: FakeKube, api, clock,
                                                                               milli: str, watch: bool):
    kube.add(node("a", 2))
    kube.add(pending("bad", milli))
    kube.add(pending("good", "500"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, watch=watch, watch_s=1.0)
    try:
        if watch:
            sched.start()
        assert sched.schedule_once() == {"default/bad": None, "default/good": "a"}
    finally:
        sched.close()
    why = (f'0/1 nodes are available: annotation gputide.io/gpu-milli is "{milli}", not a whole number of '
           "thousandths of a GPU (1 to 1000).")
    assert sched.reasons == {"default/bad": why}
    assert events_of(kube, "bad") == [("Warning", "FailedScheduling", why)]
    condition = scheduled_condition(kube, "bad")
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", why)


def test_a_pod_group_with_a_member_whose_gpu_milli_is_unreadable_waits_whole(kube: FakeKube, api, clock):
    kube.add(node("a", 2))
    kube.add(pending("w-0", "0.5", group="g"))
    kube.add(pending("w-1", group="g"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w-0": None, "default/w-1": None}
    assert 'member default/w-0: 0/1 nodes are available: annotation gputide.io/gpu-milli is "0.5"' in (
        sched.reasons["default/w-1"])


def test_a_readable_gpu_milli_still_counts_and_a_pod_without_gpus_ignores_it():
    assert scheduling_request(pending("p", " 250 "))["gpu_milli"] == 250
    assert "volumes" not in scheduling_request(pending("p", "250"))
    cpu_only = pending("c", "0.5")
    cpu_only["spec"]["containers"][0]["resources"]["limits"] = {}
    assert scheduling_request(cpu_only)["gpu_milli"] == 0 and "volumes" not in scheduling_request(cpu_only)

