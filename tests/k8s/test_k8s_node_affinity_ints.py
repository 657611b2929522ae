"""`Gt` and `Lt` in node affinity (and label selectors) read numbers as Kubernetes does, with Go's
`strconv.ParseInt(s, 10, 64)`: an optional sign and ASCII digits, within 64 bits. They were read with Python's
`int`, which also takes "1_0", " 10 ", other scripts' digits and integers past 64 bits: a node whose label is
"1_0" was offered a pod asking `gen Gt 5`, which kube-scheduler never places there
(balancer/noderules.py: `parse_int`)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.noderules import NodeRules, Requirement


@pytest.mark.parametrize(("text", "expected"), [
    ("10", 10), ("+5", 5), ("-3", -3), ("007", 7), ("9223372036854775807", 2**63 - 1),
    ("-9223372036854775808", -(2**63)),
    ("1_0", None), (" 10", None), ("10 ", None), ("10\n", None), ("\u0661\u0660", None), ("", None), ("+", None),
    ("1e3", None), ("0x10", None), ("9223372036854775808", None), (None, None)])
def test_numbers_are_read_as_go_parseint_reads_them(text, expected):
    from balancer.noderules import parse_int  # here: on the old code the other tests still run, and fail

    assert parse_int(text) == expected


@pytest.mark.parametrize(("label", "operator", "value", "expected"), [
    ("10", "Gt", "5", True), ("10", "Gt", "+5", True), ("1_0", "Gt", "5", False), (" 10 ", "Gt", "5", False),
    ("3", "Lt", "1_0", False), ("3", "Lt", " 10", False), ("3", "Lt", "10", True),
    ("10", "Gt", "99999999999999999999", False)])
def test_gt_and_lt_hold_only_for_numbers_kubernetes_reads(label, operator, value, expected):
    assert Requirement("gen", operator, (value,)).holds({"gen": label}) is expected


def test_gt_with_more_than_one_value_holds_nowhere():
    """The API server refuses it; kube-scheduler's selector cannot be built from it and matches no node."""
    assert Requirement("gen", "Gt", ("5", "1")).holds({"gen": "10"}) is False


def test_the_scheduler_keeps_a_pod_off_a_node_whose_label_go_cannot_read(kube: FakeKube, api, clock):
    odd = node("odd", 8)
    odd["metadata"]["labels"]["gen"] = "1_0"
    plain = node("plain", 2)
    plain["metadata"]["labels"]["gen"] = "10"
    kube.add(odd)
    kube.add(plain)
    p = pod("p", gpus=1, scheduler="gputide", phase="Pending")
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["5"]}]}]}}}
    kube.add(p)
    assert NodeRules.from_pod_spec(p["spec"]).affinity_allows("odd", {"gen": "1_0"}) is False
    assert SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once() == {"default/p": "plain"}
