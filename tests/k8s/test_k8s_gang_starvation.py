"""Anti-starvation for pod groups, against the fake API server: a group that cannot be placed whole and has waited
too long holds a node for each member, so the GPUs freed there go to the group and not to single pods that keep
arriving; once every member fits, the group is bound together and the holds are used up."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def pending(name: str, gpus: int, age_s: float, clock, group: str | None = None) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: group} if group else None)
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - age_s)
    return p


def held(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


def half_busy(kube: FakeKube) -> None:
    """Two 4-GPU nodes with 2 GPUs taken on each: a group of two 4-GPU members fits nowhere."""
    for name in ("a", "b"):
        kube.add(node(name, 4))
        kube.add(pod(f"busy-{name}", gpus=2, node_name=name))


def test_a_starving_group_holds_a_node_per_member_and_is_bound_whole_once_they_free_up(kube, api, clock) -> None:
    half_busy(kube)
    for k in range(2):
        kube.add(pending(f"w{k}", 4, 11 * 60, clock, group="train"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    holding = dict(sched.starving)
    assert sorted(holding) == ["default/w0", "default/w1"] and sorted(holding.values()) == ["a", "b"]   # one each
    assert all(held(kube, n)[member]["count"] == 4 for member, n in holding.items())
    assert "holding nodes for the group's members" in sched.reasons["default/w0"]
    kube.add(pending("small", 2, 0, clock))                   # would take either node's 2 free GPUs
    assert sched.schedule_once()["default/small"] is None
    assert "reserved for other pods" in sched.reasons["default/small"]
    kube.delete("pods", "busy-a", "default")                   # half the room: the group still waits, holding
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None, "default/small": None}
    kube.delete("pods", "busy-b", "default")
    results = sched.schedule_once()
    assert {m: results[m] for m in holding} == holding and results["default/small"] is None
    assert held(kube, "a") == {} and held(kube, "b") == {}


def test_without_the_hold_single_pods_take_the_room_the_group_waits_for(kube, api, clock) -> None:
    half_busy(kube)
    for k in range(2):
        kube.add(pending(f"w{k}", 4, 60, clock, group="train"))   # has not waited long: holds nothing
    kube.add(pending("small", 2, 0, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    results = sched.schedule_once()
    assert results["default/small"] in ("a", "b") and sched.starving == []
    assert held(kube, "a") == {} and held(kube, "b") == {}


def test_a_group_still_missing_members_holds_nothing(kube, api, clock) -> None:
    half_busy(kube)
    p = pending("w0", 4, 11 * 60, clock, group="train")
    p["metadata"]["annotations"] = {"gputide.io/pod-group-min": "2"}
    kube.add(p)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.starving == [] and "waits for its members" in sched.reasons["default/w0"]
