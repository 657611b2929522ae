"""Gang scheduling in the secondary scheduler, against the fake API server: a pod group's members are bound all
together or none is, so two half-placed jobs never hold each other's GPUs."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_gang import GROUP_LABEL, MIN_ANNOTATION, group_of
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def member(name: str, group: str, gpus: int = 4, least: int | None = None, priority: int = 0, **kw) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: group}, **kw)
    if least is not None:
        p["metadata"]["annotations"] = {MIN_ANNOTATION: str(least)}
    p["spec"]["priority"] = priority
    return p


def lone(name: str, gpus: int, priority: int = 0) -> dict:
    p = pod(name, gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["priority"] = priority
    return p


@pytest.fixture
def two(kube: FakeKube) -> FakeKube:
    kube.add(node("a", 4))
    kube.add(node("b", 4))
    return kube


def nodes_of(kube: FakeKube, *names: str) -> list[str | None]:
    return [kube.get("pods", n, "default")["spec"].get("nodeName") for n in names]


def test_a_group_that_cannot_all_fit_binds_none_and_leaves_the_room_to_others(two, api, clock):
    for k in range(3):
        two.add(member(f"w{k}", "train", least=3, priority=10))
    two.add(lone("solo", 4))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, preemption=False)
    results = sched.schedule_once()
    assert nodes_of(two, "w0", "w1", "w2") == [None, None, None]    # not two of three holding 8 GPUs
    assert results["default/solo"] in ("a", "b")
    assert "member default/w2 fits nowhere with the others" in sched.reasons["default/w0"]
    assert sched.reasons["default/w0"] == sched.reasons["default/w1"]   # every member is told the same


def test_a_group_that_fits_is_bound_whole_across_nodes(two, api, clock):
    two.add(member("w0", "train", least=2))
    two.add(member("w1", "train", least=2))
    results = SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert sorted(results.values()) == ["a", "b"]


def test_two_groups_that_each_need_the_whole_cluster_never_split_it(two, api, clock):
    """Placed pod by pod, each job would take one node and wait for ever for the other."""
    for job, priority in (("first", 5), ("second", 1)):
        for k in range(2):
            two.add(member(f"{job}-{k}", job, least=2, priority=priority))
    SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()
    assert sorted(nodes_of(two, "first-0", "first-1")) == ["a", "b"]
    assert nodes_of(two, "second-0", "second-1") == [None, None]


def test_a_group_waits_for_its_missing_members_and_a_running_one_takes_more_one_by_one(two, api, clock):
    two.add(member("w0", "train", gpus=2, least=3))
    two.add(member("w1", "train", gpus=2, least=3))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    assert "waits for its members: 2 pending and 0 bound of the 3" in sched.reasons["default/w0"]
    two.add(member("w2", "train", gpus=2, least=3))
    assert all(sched.schedule_once().values())                        # three together
    two.add(member("w3", "train", gpus=2, least=3))                  # the gang runs: a fourth joins alone
    assert sched.schedule_once()["default/w3"] in ("a", "b")


def test_a_pods_group_comes_from_the_coscheduling_label_and_a_bad_minimum_is_none():
    assert group_of({"namespace": "ml", "labels": {GROUP_LABEL: "g"}, "annotations": {MIN_ANNOTATION: "4"}}) == (
        "ml/g", 4)
    assert group_of({"namespace": "ml", "labels": {GROUP_LABEL: "g"}, "annotations": {MIN_ANNOTATION: "x"}}) == (
        "ml/g", 0)
    assert group_of({"namespace": "ml", "labels": {}}) == (None, 0)


def test_a_member_is_not_bound_where_the_placement_answer_does_not_fit(kube: FakeKube, api, clock):
    """As a single pod's (test_the_placement_answer_is_checked): a 4-GPU member was bound to a 2-GPU node."""
    kube.add(node("big", 8))
    kube.add(node("small", 2))
    kube.add(member("w0", "g"))
    sched = SecondaryScheduler(api, "gputide", lambda req, nodes: "small", clock=clock)
    assert sched.schedule_once() == {"default/w0": None}
    assert nodes_of(kube, "w0") == [None]
    assert "member default/w0 fits nowhere with the others" in sched.reasons["default/w0"]
