"""A consolidation's move does not taint its source node hot. Every Migrate tainted its source
`gputide.io/hot=true:NoSchedule` for the hot taint's TTL: right for a move off a hot node (nothing new lands
there while it cools), but a consolidation empties a GPU on a cool node for the next pod that needs it whole, and
the taint kept every new pod off that node for 15 minutes."""

from __future__ import annotations

from dataclasses import replace

import test_k8s_actuator as base
from fakeapi import FakeKube
from test_k8s_actuator import SNAP, annotations, migrate, taints

from balancer.actuate.base import Outcome
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION

cluster, actuator = base.cluster, base.actuator   # the actuator tests' fixtures


def test_a_consolidation_move_reserves_and_evicts_without_tainting_the_source(cluster: FakeKube, actuator) -> None:
    move = replace(migrate(), reason="consolidate", group="consolidate n1/0", taint_source=False)
    result = actuator.apply(move, SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert cluster.get("pods", "web-1", "default") is None
    assert RESERVATION_ANNOTATION in annotations(cluster, "n2")
    assert taints(cluster, "n1") == []

