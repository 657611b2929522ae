"""What cc7d549 (holds keep their host ports and extended resources) left open (audit s33a5):

* a preemption's hold written by the previous gputide names no host port or extended resource, and carried on by
  this one (`k8s_preempt.resume`) it never did, while it can be kept up to the hour: after an upgrade a pod the
  hold counts against took the preemptor's port or RDMA device on the node its victims left. The write that
  carries it on now names them (`k8s_preempt.filled`), as it writes the priority (`ranked`);
* a starving pod that asks an extended resource held the node with the most GPUs free even where that node has
  none of it (`closest_to_fitting` weighed GPUs, CPU and memory only): a hold it could never use;
* an amount of a hold's `extended` map that is no finite number, not negative, not a bool, read as one: NaN made
  the others' total NaN (no comparison refused: their holds erased), Infinity held all of it, `true` and "1" one,
  an integer past any float stopped the pass. Such an amount now holds nothing;
* a preemptor whose port a more important pod took or held on its node was told the node no longer admits it for
  "its pod affinity or GPU model": it is now told the port."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, pending, reservations
from test_k8s_preemption_grace import terminating
from test_k8s_sched_hold_ports_extended import aged, cluster, first, preempted, with_rdma
from test_k8s_sched_parity import with_port

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION

RDMA = "example.com/rdma"


def annotate(kube: FakeKube, name: str, held: dict) -> None:
    kube.mutate("nodes", name, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(held)}}})


def test_an_older_gputides_preemption_hold_names_the_port_and_device_once_carried_on(kube: FakeKube, api, clock):
    cluster(kube, rdma=True)
    preempted(kube, api, clock, with_rdma(with_port(pending("urgent", 4, 50), 29500)))
    held = reservations(kube, "a")
    for entry in held.values():   # as the previous gputide wrote it
        entry.pop("hostPorts"), entry.pop("extended")
    annotate(kube, "a", held)
    terminating(kube, "low-1", "a", 4, 1, clock() + 600)   # its victim checkpoints still
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)   # the upgraded leader
    assert sched.schedule_once() == {"default/urgent": None}   # carried on: the hold now names what it keeps
    entry = reservations(kube, "a")["default/urgent"]
    kube.delete("pods", "low-1", "default")
    for name in ("thief-port", "thief-rdma"):   # as important, older, needing no GPU: a's port, a's device
        p = pending(name, 0, 50)
        kube.add(aged(with_port(p, 29500) if name == "thief-port" else with_rdma(p), "2024-01-01T00:00:00Z"))
    clock.advance(5)
    assert sched.schedule_once() == {"default/thief-port": "b", "default/thief-rdma": None, "default/urgent": "a"}
    assert entry.get("hostPorts") == [["TCP", "0.0.0.0", 29500]] and entry.get("extended") == {RDMA: 1.0, "pods": 1.0}


def test_a_starving_pod_holds_no_node_without_the_extended_resource_it_asks(kube: FakeKube, api, clock):
    """b has the most GPUs free but no RDMA device: s could never run there; a has one."""
    a = node("a", 8)
    a["status"]["allocatable"][RDMA] = a["status"]["capacity"][RDMA] = "1"
    for obj in (a, bound("busy-a", "a", 6, 0), node("b", 8), bound("busy-b", "b", 4, 0),
                aged(with_rdma(pending("s", 6, 0)), "2023-01-01T00:00:00Z")):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/s": None}
    assert sched.starving == [("default/s", "a")] and reservations(kube, "b") == {}


def test_a_starving_pod_holds_no_node_whose_extended_resource_others_hold(kube: FakeKube, api, clock):
    """a's only RDMA device is held for a more important pod: s could not have it there either."""
    a = node("a", 8)
    a["status"]["allocatable"][RDMA] = a["status"]["capacity"][RDMA] = "1"
    b = node("b", 8)
    b["status"]["allocatable"][RDMA] = b["status"]["capacity"][RDMA] = "1"
    for obj in (a, bound("busy-a", "a", 4, 0), b, bound("busy-b", "b", 6, 0),
                aged(with_rdma(pending("s", 6, 0)), "2023-01-01T00:00:00Z")):
        kube.add(obj)
    annotate(kube, "a", {"x/vip": {"pod": "x/vip", "count": 0, "priority": 100, "expires": "2999-01-01T00:00:00Z",
                                   "extended": {RDMA: 1}}})
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/s": None}
    assert sched.starving == [("default/s", "b")]


def ghost(amount) -> dict:
    return {"pod": "x/ghost", "count": 0, "priority": 100, "expires": "2999-01-01T00:00:00Z",
            "extended": {RDMA: amount}}


@pytest.mark.parametrize("amount", [float("inf"), True, "1", 10**400, float("nan")],
                         ids=["Infinity", "true", "string", "past-float", "NaN"])
def test_an_odd_extended_amount_holds_nothing(kube: FakeKube, api, clock, amount):
    """a has 2 RDMA devices; real holds 1 of them (2 where the ghost says NaN: then none is left for p, while NaN in
    the total let p have one)."""
    a = node("a", 8)
    a["status"]["allocatable"][RDMA] = a["status"]["capacity"][RDMA] = "2"
    nan = amount != amount
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({"x/ghost": ghost(amount), "x/real": {
        **ghost(2 if nan else 1), "pod": "x/real"}})}
    kube.add(a)
    kube.add(with_rdma(pending("p", 1, 0)))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/p": None if nan else "a"}
    if nan:
        assert f"1 node(s) had {RDMA} reserved for other pods" in sched.reasons["default/p"]


def half_preempted(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """test_k8s_preemption_room_taken's, mid asking host port 29500: on a, low-1 is evicted for it, low-2 (using a's
    RDMA device) left to evict at the next pass."""
    a = node("a", 8)
    a["status"]["allocatable"][RDMA] = a["status"]["capacity"][RDMA] = "1"
    for obj in (pdb("guard", "default", {"tier": "batch"}, 1), a,
                bound("low-1", "a", 4, 1, labels={"tier": "batch"}), with_rdma(bound("low-2", "a", 4, 2)),
                node("b", 8), bound("low-3", "b", 8, 3), with_port(pending("mid", 8, 10), 29500)):
        kube.add(obj)
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=1)
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/mid"]["victims"] == ["default/low-2"]
    clock.advance(5)
    return sched


def test_a_preemptor_whose_port_a_more_important_starving_pod_holds_is_told_so(kube: FakeKube, api, clock):
    """vip (60, no preemption) asks the port and a's RDMA device, which low-2 uses: it fits nowhere, starves and
    holds a (mid's hold is not held against it), its port included. mid's victims would still make room on a, but
    the port is vip's: a is given back, mid told why (it was told "its pod affinity or GPU model")."""
    sched = half_preempted(kube, api, clock)
    kube.add(aged(with_rdma(with_port(pending("vip", 0, 60, preemptionPolicy="Never"), 29500)),
                  "2023-01-01T00:00:00Z"))
    assert sched.schedule_once() == {"default/vip": None, "default/mid": None}
    assert sched.starving == [("default/vip", "a")] and "default/mid" not in reservations(kube, "a")
    said = sched.reasons["default/mid"]
    assert "a no longer admits it (node(s) had the requested pod ports reserved for other pods)" in said, said
    assert kube.get("pods", "low-2", "default") is not None   # not evicted for room mid will not get


def test_a_preemptor_whose_port_a_more_important_pod_took_is_told_so(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    kube.add(with_port(pending("vip", 0, 60), 29500))
    assert sched.schedule_once() == {"default/vip": "a", "default/mid": None}
    said = sched.reasons["default/mid"]
    assert "a no longer admits it (node(s) didn't have free ports for the requested pod ports)" in said, said
