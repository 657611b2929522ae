"""Which pods gputide moves, by the controller that owns them: one known to run an evicted pod again elsewhere
(ReplicaSet, StatefulSet, Job, ReplicationController), or any other controller's only when the pod's
`gputide.io/movable: "true"` vouches for it. Any controlling owner counted: a pod of a PyTorchJob or an Argo
Workflow step with restartPolicy Never, evicted, can fail its whole job; a DaemonSet's is run again on the same
node, so moving it frees nothing."""

from __future__ import annotations

import pytest
from fakeapi import pod

from balancer.actuate.k8s_pods import workload_from_pod


@pytest.mark.parametrize(("kind", "vouched", "movable"), [
    ("ReplicaSet", False, True), ("StatefulSet", False, True), ("Job", False, True),
    ("ReplicationController", False, True),
    ("PyTorchJob", False, False), ("Workflow", False, False), ("PyTorchJob", True, True),
    ("DaemonSet", False, False), ("DaemonSet", True, False), ("Node", True, False),
])
def test_a_pod_moves_only_when_its_owner_runs_it_again_elsewhere_or_its_annotation_vouches(kind, vouched, movable):
    p = pod("p-0", owner=(kind, "owner"), node_name="n1")
    if vouched:
        p["metadata"]["annotations"] = {"gputide.io/movable": "true"}
    assert workload_from_pod(p).movable is movable


def test_a_bare_pod_never_moves():
    p = pod("bare", node_name="n1")
    p["metadata"]["annotations"] = {"gputide.io/movable": "true"}
    assert workload_from_pod(p).movable is False
