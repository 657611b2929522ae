"""What 6f1a3f4 (holds keep ports and extended resources through an upgrade) left open (audit s33a13):

* the members of a starving pod group that share an unbound WaitForFirstConsumer claim hold one node, weighed for
  all of them at once (`k8s_gang.together`), which summed their GPUs, CPU and memory but asked only the first
  member's extended resources: both held b, which lacks the RDMA device the second asks (or has one where each
  asks one), a hold that could never be used while a, which has them, was left to others. Now `together` asks the
  sum of each;
* a preemption's hold carried on names the host ports and extended resources its pod asks (`k8s_preempt.filled`)
  only where it named none: a pod deleted and made again under the same name asking port 29501 kept a hold naming
  29500, so a pod the hold counts against took 29501 on the node its victims left. The write that carries it on now
  names them as the pod asks them now;
* `closest_to_fitting` sums what each node holds for others in one walk over its holds (`k8s_filters.others_held`)
  and weighs the node's own amounts before any hold (`big_enough`): the same answers as summing per resource
  (pinned against that reference here; it cannot fail on the old code, which is the reference), in less time."""

from __future__ import annotations

import random

import pytest
from fakeapi import FakeKube, claim, node, pod, storage_class
from test_k8s_gang_claim_holds import held, member, most_free
from test_k8s_preemption import pending, reservations
from test_k8s_preemption_grace import terminating
from test_k8s_sched_hold_ports_extended import aged, cluster, first, preempted, with_rdma
from test_k8s_sched_parity import with_port

from balancer.actuate.k8s_filters import (
    CPU,
    GPUS,
    MEMORY,
    extended_reserved_for_others,
    others_held,
    reserved_for_others,
)
from balancer.actuate.k8s_gang import together
from balancer.actuate.k8s_preempt import big_enough, closest_to_fitting, filled
from balancer.actuate.k8s_scheduler import SecondaryScheduler

RDMA = "example.com/rdma"


def rdma_node(kube: FakeKube, name: str, devices: int, busy: int) -> None:
    n = node(name, 8)
    if devices:
        n["status"]["allocatable"][RDMA] = n["status"]["capacity"][RDMA] = str(devices)
    kube.add(n)
    kube.add(pod(f"busy-{name}", gpus=busy, node_name=name))


def claim_sharing(kube: FakeKube) -> None:
    kube.add(storage_class("wffc"))
    kube.add(claim("shared", storage_class="wffc"))


@pytest.mark.parametrize(("first_rdma", "b_devices"), [(False, 0), (True, 1)], ids=["second-asks", "each-asks-one"])
def test_members_sharing_a_claim_hold_no_node_short_of_the_extended_resources_they_ask_together(
        kube: FakeKube, api, clock, first_rdma, b_devices):
    """a: 2 RDMA devices, 4 GPUs free; b: the most GPUs free (6), but no device (or one where the two ask one each)."""
    rdma_node(kube, "a", 2, 4)
    rdma_node(kube, "b", b_devices, 2)
    claim_sharing(kube)
    w0 = member("w0", 4, clock, "shared")
    kube.add(with_rdma(w0) if first_rdma else w0)
    kube.add(with_rdma(member("w1", 4, clock, "shared")))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sorted(sched.starving) == [("default/w0", "a"), ("default/w1", "a")]
    assert held(kube, "b") == {}


def test_together_asks_the_sum_of_each_members_extended_resources():
    base = {"num_gpu": 1, "cpu_milli": 1, "memory_mib": 1, "priority": 0}
    members = [dict(base, name="d/w0", owned=frozenset({"d/w0"}), extended={"pods": 1.0}),
               dict(base, name="d/w1", owned=frozenset({"d/w1"}), extended={RDMA: 1.0, "pods": 1.0}),
               dict(base, name="d/w2", owned=frozenset({"d/w2"}), extended={RDMA: 2.0, "pods": 1.0})]
    assert together(members)["extended"] == {"pods": 3.0, RDMA: 3.0}
    assert members[0]["extended"] == {"pods": 1.0}   # the first's own request is left as it was


def test_a_preemptor_made_again_under_its_name_holds_the_port_it_asks_now(kube: FakeKube, api, clock):
    cluster(kube)
    preempted(kube, api, clock, with_port(pending("urgent", 4, 50), 29500))
    terminating(kube, "low-1", "a", 4, 1, clock() + 600)   # its victim checkpoints still
    kube.delete("pods", "urgent", "default")
    kube.add(aged(with_port(pending("urgent", 4, 50), 29501), "2024-01-01T00:10:00Z"))   # same name, another port
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}   # carried on: the hold names 29501 now
    assert reservations(kube, "a")["default/urgent"]["hostPorts"] == [["TCP", "0.0.0.0", 29501]]
    kube.add(aged(with_port(pending("thief", 0, 50), 29501), "2024-01-01T00:00:00Z"))   # as important, older
    kube.mutate("nodes", "b", "", {"spec": {"unschedulable": True}})   # a is the only node left to it
    clock.advance(5)
    assert sched.schedule_once() == {"default/thief": None, "default/urgent": None}
    assert "reserved for other pods" in sched.reasons["default/thief"]
    kube.delete("pods", "low-1", "default")
    clock.advance(5)
    assert sched.schedule_once()["default/urgent"] == "a"


def test_filled_names_what_the_pod_asks_now():
    entry = {"pod": "d/u", "count": 4, "hostPorts": [["TCP", "0.0.0.0", 29500]], "extended": {RDMA: 1, "pods": 1}}
    same = {"host_ports": frozenset({("TCP", "0.0.0.0", 29500)}), "extended": {RDMA: 1.0, "pods": 1.0}}
    assert filled(entry, same) is entry
    other = {"host_ports": frozenset({("TCP", "0.0.0.0", 29501)}), "extended": {"pods": 1.0}}
    assert filled(entry, other) == {"pod": "d/u", "count": 4, "hostPorts": [["TCP", "0.0.0.0", 29501]],
                                    "extended": {"pods": 1.0}}
    assert filled(entry, {"host_ports": frozenset(), "extended": {}}) == {"pod": "d/u", "count": 4}
    older = {"pod": "d/u", "count": 4}   # an older gputide's: named from the request, as 6f1a3f4 did
    assert filled(older, same) == {**older, "hostPorts": [["TCP", "0.0.0.0", 29500]], "extended": same["extended"]}


def _reference(req: dict, nodes: list[dict]) -> str | None:
    """`closest_to_fitting` as 6f1a3f4 wrote it, each resource's holds summed apart, with what a pod asks none of
    ruling out no node and a pod asking no GPU ranked by the CPU, then memory, it lacks, then those free."""
    def fits(n: dict) -> bool:
        if any(req[want] > 0 and n[total] - reserved_for_others(n, req, what) < req[want] for total, what, want in (
                ("gpus_total", GPUS, "num_gpu"), ("cpu_milli_total", CPU, "cpu_milli"),
                ("memory_mib_total", MEMORY, "memory_mib"))):
            return False
        have = n.get("extended_total") or {}
        return all(have.get(k, float("inf") if k == "pods" else 0.0) - extended_reserved_for_others(n, req, k) >= v
                   for k, v in req["extended"].items())

    def closeness(n: dict) -> tuple:
        if req["num_gpu"]:
            return (n["gpus_free"] - reserved_for_others(n, req),)
        cpu, memory = (n["cpu_milli_free"] - reserved_for_others(n, req, CPU),
                       n["memory_mib_free"] - reserved_for_others(n, req, MEMORY))
        return (-max(req["cpu_milli"] - cpu, 0) if req["cpu_milli"] else 0,
                -max(req["memory_mib"] - memory, 0) if req["memory_mib"] else 0, cpu, memory)
    big = [n for n in nodes if fits(n)]
    return max(big, key=lambda n: (closeness(n), n["name"]))["name"] if big else None


def _random_node(rng: random.Random, i: int) -> dict:
    holds = {}
    for j in range(rng.choice((0, 0, 1, 3))):
        key = rng.choice(("d/s", f"x/h{i}-{j}"))
        holds[key] = {"pod": key, "count": rng.randint(0, 3), CPU: rng.choice((0, 500, "x")),
                      MEMORY: rng.randint(0, 600), "priority": rng.choice((-1, 0, 5, None, True)),
                      "extended": rng.choice(({RDMA: rng.randint(0, 2), "pods": 1}, {RDMA: float("nan")}, [], None,
                                              {"other": 1}))}
    extended_total = {k: float(rng.randint(0, 3)) for k in (RDMA, "pods") if rng.random() < 0.7}
    return dict(name=f"n{i:03}", gpus_total=8, cpu_milli_total=2000, memory_mib_total=2000,
                gpus_free=rng.randint(0, 8), cpu_milli_free=rng.randint(0, 2000), memory_mib_free=rng.randint(0, 2000),
                reservations=holds, extended_total=extended_total)


def test_closest_to_fitting_answers_as_summing_each_resources_holds_apart():
    rng = random.Random(7)
    for trial in range(300):
        nodes = [_random_node(rng, i) for i in range(rng.randint(0, 8))]
        extended = rng.choice(({}, {RDMA: 1.0}, {RDMA: 2.0, "pods": 1.0}, {"pods": 2.0}))
        req = {"name": "d/s", "owned": frozenset({"d/s"}), "priority": rng.choice((0, 5, None)),
               "num_gpu": rng.randint(0, 6), "cpu_milli": rng.choice((0, 1000, 1800)), "memory_mib": 1000,
               "extended": extended}
        assert closest_to_fitting(req, nodes) == _reference(req, nodes), trial
        for n in nodes:
            gpus, cpu, memory, held_extended = others_held(n, req)
            assert (gpus, cpu, memory) == tuple(reserved_for_others(n, req, w) for w in (GPUS, CPU, MEMORY))
            for k in extended:
                assert held_extended[k] == pytest.approx(extended_reserved_for_others(n, req, k))
            assert big_enough(n, req) == big_enough(n, req, held_extended)
