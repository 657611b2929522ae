"""A Migrate checks the target's room as it is now, not as the snapshot saw it. The default scheduler does not read
gputide's reservations, so a pod it bound to the target after the snapshot took the GPUs the move counted on: the
actuator still reserved, tainted the source hot and evicted the pod, whose replacement then had nowhere to run. Now
the pods bound to the target are listed (one list per move, after the target's rules allowed the pod) and a target
whose allocatable nvidia.com/gpu they leave too few of is refused for now (RETRY, `Refused.TARGET`), before anything
changes."""

from __future__ import annotations

import json

import test_k8s_actuator as base
from fakeapi import FakeKube, pod
from test_k8s_actuator import SNAP, annotations, migrate, taints

from balancer.actuate.base import Outcome, Refused
from balancer.actuate.k8s_time import rfc3339
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION

cluster, actuator = base.cluster, base.actuator   # the actuator tests' fixtures


def untouched(cluster: FakeKube) -> bool:
    return (cluster.get("pods", "web-1", "default") is not None and not taints(cluster, "n1")
            and RESERVATION_ANNOTATION not in annotations(cluster, "n2")
            and not [r for r in cluster.requests if r.method != "GET"])


def test_a_target_filled_since_the_snapshot_is_refused_before_anything_changes(cluster: FakeKube, actuator) -> None:
    cluster.add(pod("batch-big", "batch", gpus=2, node_name="n2", owner=("ReplicaSet", "big-1")))   # 2 of 2 taken
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.RETRY and result.refused is Refused.TARGET and result.code == "refused"
    assert "n2 has no room for its replacement now: 2 GPU(s) allocatable, 2 asked" in result.detail
    assert untouched(cluster)


def test_the_move_goes_ahead_once_the_pods_there_leave_it_room(cluster: FakeKube, actuator) -> None:
    cluster.add(pod("batch-big", "batch", gpus=2, node_name="n2", owner=("ReplicaSet", "big-1")))
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.RETRY
    # the big pod ended (Succeeded and Failed pods hold nothing); a 1-GPU pod runs there now: one GPU left
    cluster.mutate("pods", "batch-big", "batch", {"status": {"phase": "Succeeded"}})
    cluster.add(pod("crashed", "batch", gpus=2, node_name="n2", phase="Failed", owner=("ReplicaSet", "c-1")))
    cluster.add(pod("other", "batch", gpus=1, node_name="n2", owner=("ReplicaSet", "other-1")))
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert cluster.get("pods", "web-1", "default") is None


def test_holds_of_others_count_against_the_room_left_now(cluster: FakeKube, actuator, clock) -> None:
    # the snapshot sees n2 empty (room for another's hold of 1 besides the move's GPU); a pod bound since takes one
    cluster.add(pod("other", "batch", gpus=1, node_name="n2", owner=("ReplicaSet", "other-1")))
    cluster.mutate("nodes", "n2", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {"batch/queued": {"pod": "batch/queued-0", "count": 1, "expires": rfc3339(clock() + 600)}})}}})
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.RETRY and result.refused is Refused.TARGET, result.detail
    assert "promised to others" in result.detail
    assert cluster.get("pods", "web-1", "default") is not None


def test_one_list_of_the_targets_pods_per_move(cluster: FakeKube, actuator) -> None:
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    [listed] = [r for r in cluster.requests if r.method == "GET" and r.path == "/api/v1/pods"]
    assert "spec.nodeName%3Dn2" in listed.query or "spec.nodeName=n2" in listed.query
