"""A pod pinned since the snapshot is not moved: the actuator re-read the pod before the move and checked that it
was not being deleted, that a controller recreates it and that its Job can lose it, but not what the planner had
checked on the snapshot's copy (`k8s_pods.may_move`): a `gputide.io/movable: "false"` written since, or a
hostPath volume or DRA claims (a pod replaced under its name), was evicted all the same."""

from __future__ import annotations

import pytest
import test_k8s_actuator as base
from fakeapi import FakeKube
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome

cluster, actuator = base.cluster, base.actuator   # the actuator tests' fixtures


@pytest.mark.parametrize("change", [
    {"metadata": {"annotations": {"gputide.io/movable": "false"}}},
    {"spec": {"volumes": [{"name": "scratch", "hostPath": {"path": "/data"}}]}},
    {"spec": {"resourceClaims": [{"name": "gpu", "source": {"resourceClaimName": "gpu-claim"}}]}},
], ids=["pinned by its annotation", "a hostPath volume", "DRA claims"])
def test_a_pod_its_own_object_keeps_in_place_now_is_not_evicted(cluster: FakeKube, actuator, change) -> None:
    cluster.mutate("pods", "web-1", "default", change)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and "keeps it in place" in result.detail, result
    assert cluster.get("pods", "web-1", "default") is not None
    assert not [r for r in cluster.requests if r.method == "PATCH"]   # nothing reserved or tainted either
