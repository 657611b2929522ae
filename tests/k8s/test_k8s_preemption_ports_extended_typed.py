"""A preemption's hold whose host port or extended amount was saved in another JSON type (a port `29500.0`, an
amount `true`: written by an older or a foreign writer) holds nothing of it (`k8s_filters`: a port must be an
integer, `_amount(True)` is 0), so a pod it counts against took the port or the device the preemptor waits for.
The pass that carries the preemption on rewrites them as the pod asks them (`k8s_preempt.filled`), but compared
the hold by equality, where `29500.0 == 29500` and `True == 1.0`: the hold was taken for the one asked and never
rewritten. It now compares them as written (`k8s_nodes.same_json`, as b3762cb did for the priority). Against the
fake API server."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube
from test_k8s_preemption import pending, reservations
from test_k8s_preemption_grace import terminating
from test_k8s_sched_hold_ports_extended import aged, cluster, first, preempted, with_rdma
from test_k8s_sched_hold_ports_extended_gaps import RDMA, annotate
from test_k8s_sched_parity import with_port

from balancer.actuate.k8s_preempt import filled
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def port_as_float(entry: dict) -> None:
    entry["hostPorts"] = [["TCP", "0.0.0.0", 29500.0]]


def device_as_true(entry: dict) -> None:
    entry["extended"][RDMA] = True


@pytest.mark.parametrize(("saved_as", "thief", "where"), [(port_as_float, "thief-port", "b"),
                                                          (device_as_true, "thief-rdma", None)],
                         ids=["port-29500.0", "device-true"])
def test_a_hold_saying_its_port_or_device_in_another_type_is_rewritten_and_kept(kube: FakeKube, api, clock,
                                                                                saved_as, thief, where):
    cluster(kube, rdma=True)
    preempted(kube, api, clock, with_rdma(with_port(pending("urgent", 4, 50), 29500)))
    held = reservations(kube, "a")
    saved_as(held["default/urgent"])
    annotate(kube, "a", held)
    assert "29500.0" in json.dumps(held) or "true" in json.dumps(held)
    terminating(kube, "low-1", "a", 4, 1, clock() + 600)   # its victim checkpoints still: the pass carries it on
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    entry = reservations(kube, "a")["default/urgent"]
    port = entry["hostPorts"][0][2]
    assert entry["hostPorts"] == [["TCP", "0.0.0.0", 29500]] and type(port) is int
    assert entry["extended"] == {RDMA: 1.0, "pods": 1.0} and type(entry["extended"][RDMA]) is float
    kube.delete("pods", "low-1", "default")
    p = pending(thief, 0, 50)   # as important, older, needing no GPU: a's port, or a's device
    kube.add(aged(with_port(p, 29500) if thief == "thief-port" else with_rdma(p), "2024-01-01T00:00:00Z"))
    clock.advance(5)
    assert sched.schedule_once() == {f"default/{thief}": where, "default/urgent": "a"}


def test_filled_rewrites_a_port_or_amount_read_as_nothing_but_not_an_integer_amount():
    """`1` for `1.0` holds one device alike (`k8s_filters._amount`): no write for that."""
    req = {"host_ports": frozenset({("TCP", "", 8080)}), "extended": {"example.com/fpga": 1.0}}
    written = {"pod": "d/u", "count": 0, "hostPorts": [["TCP", "", 8080]], "extended": {"example.com/fpga": 1.0}}
    for odd in ({**written, "hostPorts": [["TCP", "", 8080.0]]}, {**written, "extended": {"example.com/fpga": True}}):
        assert filled(odd, req) == odd and json.dumps(filled(odd, req)) == json.dumps(written)
    integer = {**written, "extended": {"example.com/fpga": 1}}
    assert filled(integer, req) is integer and filled(written, req) is written
