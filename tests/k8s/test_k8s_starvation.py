"""Anti-starvation in the secondary scheduler, against the fake API server: a pod that has waited too long and fits
nowhere holds the node closest to fitting it, so that GPUs freed there go to it and not to smaller pods that keep
arriving."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def pending(name: str, gpus: int, age_s: float, clock) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age_s)
    return p


def held(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


def cluster(kube: FakeKube) -> None:
    kube.add(node("a", 8))
    kube.add(node("b", 2))
    kube.add(pod("busy", gpus=6, node_name="a"))     # a has 2 GPUs free, b 1: the 4-GPU pod fits nowhere
    kube.add(pod("other", gpus=1, node_name="b"))


def test_a_starving_pod_holds_the_node_closest_to_fitting_and_gets_it_when_gpus_free_up(kube: FakeKube, api, clock):
    cluster(kube)
    kube.add(pending("big", 4, 11 * 60, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/big": None}
    assert sched.starving == [("default/big", "a")] and held(kube, "a")["default/big"]["count"] == 4
    assert "Waiting 11 min: holding a (4 GPUs reserved)" in sched.reasons["default/big"]
    kube.add(pending("small", 2, 0, clock))
    assert sched.schedule_once()["default/small"] is None     # a's 2 free GPUs are held for big
    kube.delete("pods", "busy", "default")
    assert sched.schedule_once() == {"default/big": "a", "default/small": "a"}
    assert held(kube, "a") == {}                                # released on binding


def test_a_pod_that_has_not_waited_long_holds_nothing(kube: FakeKube, api, clock):
    cluster(kube)
    kube.add(pending("big", 4, 60, clock))
    kube.add(pending("small", 2, 0, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    results = sched.schedule_once()
    assert results["default/big"] is None and results["default/small"] == "a"
    assert sched.starving == [] and held(kube, "a") == {}


def test_the_command_reads_how_long_a_pod_may_wait_and_refuses_a_bad_duration(kube: FakeKube, kubeconfig, capsys):
    from balancer.cli import main

    assert main(["schedule", "--kubeconfig", kubeconfig, "--once", "--starving-after", "30m"]) == 0
    assert main(["schedule", "--kubeconfig", kubeconfig, "--once", "--starving-after", "soon"]) == 2
    assert "--starving-after" in capsys.readouterr().err


def test_a_pod_bound_elsewhere_gives_back_the_node_it_held_at_once(kube: FakeKube, api, clock):
    cluster(kube)
    kube.add(pending("big", 4, 11 * 60, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert "default/big" in held(kube, "a")
    kube.add(node("c", 8))                                     # room appears elsewhere first
    assert sched.schedule_once() == {"default/big": "c"}
    assert held(kube, "a") == {}                               # a's GPUs are free for others again
    kube.add(pending("small", 2, 0, clock))
    assert sched.schedule_once()["default/small"] in ("a", "c")
