"""How a migration treats the pod's life on the cluster: a pod already being deleted (an earlier eviction landed, its
replacement on its way) is neither a candidate nor evicted again, which would hold a second target for one
replacement and spend the eviction budget twice; the hold on the target (keyed by the owner) is one replica's at a
time, and a failed move takes back only its own; the hold outlasts the pod's grace period; a pod that mounts its
node's own paths (hostPath) or uses DRA ResourceClaims stays where it is; the eviction takes only the pod that was
read."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import pytest
from fakeapi import FakeKube, node, pdb, pod, status_body
from slow_api import Clock, SlowServer
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_pods import workload_from_pod
from balancer.actuate.k8s_time import parse_time
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION
from balancer.model import Workload, WorkloadClass

TERMINATING = "2026-12-05T09:00:00Z"


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """SNAP's: web-1 (Deployment web's) runs on n1; n2 and n3 are free."""
    for name in ("n1", "n2", "n3"):
        kube.add(node(name, 2))
    kube.add(pod("web-1", labels={"app": "web", "pod-template-hash": "5d8f"}, node_name="n1",
                 owner=("ReplicaSet", "web-5d8f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def reservations(kube: FakeKube, name: str) -> dict:
    raw = (kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION)
    return json.loads(raw) if raw else {}


def test_a_pod_being_deleted_is_not_evicted_again(cluster: FakeKube, actuator) -> None:
    """A terminating pod still runs (phase Running) through its grace period: planned again, it was evicted again
    (the Eviction API lets a terminating pod go whatever its budget says) and a second node reserved for its one
    replacement. Refused before anything changes."""
    cluster.mutate("pods", "web-1", "default", {"metadata": {"deletionTimestamp": TERMINATING}})
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and "being deleted already" in result.detail, result.detail
    assert not cluster.calls("POST", r"/eviction$")
    assert not [r for r in cluster.requests if r.method == "PATCH"]
    assert reservations(cluster, "n2") == {}


def test_a_pod_being_deleted_is_no_candidate() -> None:
    running = pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    assert workload_from_pod(running).movable
    running["metadata"]["deletionTimestamp"] = TERMINATING
    assert not workload_from_pod(running).movable


def test_a_siblings_hold_on_the_target_is_neither_overwritten_nor_released(cluster: FakeKube, actuator) -> None:
    """The hold is keyed by the owner, and the scheduler uses it up with the first of its pods it binds there. A
    second replica moved to the same node overwrote the first's entry (one hold for two replacements) and, its
    eviction refused by the budget, released it: the first replacement, its pod already evicted, lost its place.
    The second move is tried again later instead, and the first's hold stays."""
    cluster.add(pod("web-2", labels={"app": "web", "pod-template-hash": "5d8f"}, node_name="n1",
                    owner=("ReplicaSet", "web-5d8f")))
    snap = replace(SNAP, workloads=(*SNAP.workloads, Workload(name="default/web-2",
                                                               workload_class=WorkloadClass.INFERENCE, owner="web")),
                   placements={**SNAP.placements, "default/web-2": (1,)})
    assert actuator.apply(migrate(), snap).outcome is Outcome.APPLIED
    first = reservations(cluster, "n2")
    assert first["default/web"]["pod"] == "default/web-1"
    result = actuator.apply(migrate(workload="default/web-2", source=(1,), target=(3,)), snap)
    assert result.outcome is Outcome.RETRY and "held for default/web already" in result.detail, result.detail
    assert reservations(cluster, "n2") == first
    assert cluster.get("pods", "web-2", "default") is not None


def test_a_failed_move_releases_only_its_own_hold(cluster: FakeKube, actuator) -> None:
    """Between the hold and the refused eviction another writer (a new leader's move of a sibling, its own hold
    expired) put its entry under the key: the release leaves it."""
    cluster.mutate("poddisruptionbudgets", "web", "default", {"status": {"disruptionsAllowed": 0}})
    theirs = {"pod": "default/web-9", "gpus": [1], "count": 1, "expires": "2099-01-01T00:00:00Z"}
    cluster.before("POST", r"/eviction$", lambda: cluster.mutate("nodes", "n2", "", {"metadata": {"annotations": {
        RESERVATION_ANNOTATION: json.dumps({"default/web": theirs})}}}))
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.RETRY and result.code == "429", result.detail
    assert reservations(cluster, "n2") == {"default/web": theirs}


@pytest.mark.parametrize(("grace", "held_s"), [(None, 300), (30, 300), (1800, 1860)])
def test_the_hold_outlasts_the_pods_grace_period(cluster: FakeKube, actuator, clock, grace, held_s) -> None:
    """A StatefulSet's pod is created again (same name, its disk in one zone) only once the evicted one is gone: a
    training pod given 30 minutes to save its checkpoint outlived the 5-minute hold, and its target's GPUs were
    free for anyone before its replacement existed. The hold lasts the grace period and a minute more."""
    cluster.add(pod("db-0", node_name="n1", owner=("StatefulSet", "db")))
    if grace is not None:
        cluster.mutate("pods", "db-0", "default", {"spec": {"terminationGracePeriodSeconds": grace}})
    snap = replace(SNAP, workloads=(*SNAP.workloads, Workload(name="default/db-0", owner="db",
                                                               workload_class=WorkloadClass.BATCH)),
                   placements={**SNAP.placements, "default/db-0": (1,)})
    result = actuator.apply(migrate(workload="default/db-0", source=(1,), target=(2,)), snap)
    assert result.outcome is Outcome.APPLIED, result.detail
    expires = parse_time(reservations(cluster, "n2")["default/db"]["expires"])
    assert expires == pytest.approx(clock() + held_s, abs=1)


@pytest.mark.parametrize(("volume", "said", "movable"), [
    ({"hostPath": {"path": "/mnt/models", "type": "Directory"}}, None, False),   # only on its node
    ({"hostPath": {"path": "/mnt/models"}}, "true", True),                        # the operator vouches for it
    ({"emptyDir": {"medium": "Memory"}}, None, True),                             # scratch, made afresh anywhere
], ids=["hostPath", "hostPath-vouched", "emptyDir"])
def test_a_pod_reading_its_nodes_own_paths_stays_put(volume, said, movable) -> None:
    """A hostPath volume is the node's own directory: moved, the replacement found the path empty elsewhere or, of
    a type that must exist, never started (ContainerCreating), its pod already evicted. Pinned as a `local` or
    `hostPath` PersistentVolume pins it, unless `gputide.io/movable: "true"` says the path is on every node."""
    p = pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    p["spec"]["volumes"] = [{"name": "data", **volume}]
    if said:
        p["metadata"]["annotations"] = {"gputide.io/movable": said}
    assert workload_from_pod(p).movable is movable


@pytest.mark.parametrize(("held", "moved"), [(2, False), (1, True)])
def test_gpus_held_for_others_are_not_a_target(cluster: FakeKube, actuator, held, moved) -> None:
    """The planner does not see the holds on a node: n2's two free GPUs held for a pod that preempted there were a
    target all the same, the pod evicted, and its replacement found them promised to the preemptor (gputide's
    scheduler keeps it off; kube-scheduler would put it there and take the preemptor's place). A hold that leaves
    the move its GPU does not stop it."""
    theirs = {"pod": "default/urgent", "count": held, "cpu_milli": 1000, "memory_mib": 1024,
              "expires": "2099-01-01T00:00:00Z"}
    cluster.mutate("nodes", "n2", "", {"metadata": {"annotations": {
        RESERVATION_ANNOTATION: json.dumps({"default/urgent": theirs})}}})
    result = actuator.apply(migrate(), SNAP)
    assert (result.outcome is Outcome.APPLIED) is moved, result.detail
    assert (cluster.get("pods", "web-1", "default") is None) is moved
    if not moved:
        assert result.outcome is Outcome.RETRY and "promised to others" in result.detail
        assert reservations(cluster, "n2") == {"default/urgent": theirs} and not cluster.calls("POST", r"/eviction$")


def test_a_hold_written_without_an_answer_is_taken_back(cluster: FakeKube, api, clock) -> None:
    """The target's hold got no answer (the API server slow: a 504, though it wrote it) and no time was left to try
    again: the move failed before any eviction, but the hold stayed on the node, for as long as the pod's grace
    period, keeping its GPUs from everyone. It is released on the deadline's reserve."""
    mono = Clock()
    actuator = KubernetesActuator(api, clock=clock, sleep=mono.advance, deadline_clock=mono, max_retries=0)
    SlowServer(cluster, actuator.api, mono, 1.0, {("PATCH", r"/nodes/n2$"): 60.0})
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.RETRY and "504" in result.detail, result.detail
    assert not cluster.calls("POST", r"/eviction$")
    assert len(cluster.calls("PATCH", r"/nodes/n2$")) == 2 and reservations(cluster, "n2") == {}


@pytest.mark.parametrize(("claim", "said", "movable"), [
    ({"name": "gpu", "resourceClaimName": "shared-gpus"}, None, False),          # allocated on its node already
    ({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, None, False),      # the target's devices unknown
    ({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}, "true", True),     # the operator vouches for it
], ids=["named-claim", "template", "template-vouched"])
def test_a_pod_using_dra_claims_stays_put(claim, said, movable) -> None:
    """A DRA ResourceClaim the pod names is allocated to its node's devices (`status.allocation.nodeSelector`): its
    replacement could run nowhere else, yet the pod was moved (evicted, its replacement Pending for ever). One
    from a template is allocated afresh from the DRA driver's ResourceSlices, which gputide does not read."""
    p = pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    p["spec"]["resourceClaims"] = [claim]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if said:
        p["metadata"]["annotations"] = {"gputide.io/movable": said}
    assert workload_from_pod(p).movable is movable


def honour_uid_preconditions(kube: FakeKube, before_eviction: Callable[[], object]) -> None:
    """The fake API server's evictions made to check `deleteOptions.preconditions.uid`, as a real one does (409),
    `before_eviction()` run just before the first."""
    dispatch, pending = kube.dispatch, [before_eviction]

    def checked(method: str, path: str, content_type, body):
        if method == "POST" and path.endswith("/eviction"):
            while pending:
                pending.pop()()
            want = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            ns, name = path.split("/namespaces/")[1].split("/")[0], path.split("/pods/")[1].split("/")[0]
            if want and (kube.get("pods", name, ns) or {}).get("metadata", {}).get("uid") not in (None, want):
                return 409, status_body(409, "Conflict", "Precondition failed: UID in precondition")
        return dispatch(method, path, content_type, body)

    kube.dispatch = checked


def test_a_pod_of_its_name_created_since_it_was_read_is_not_evicted(cluster: FakeKube, actuator) -> None:
    """A StatefulSet's pod that died after it was read is created again under its name, elsewhere: the eviction,
    by name alone, took that fresh replica instead, which the plan never meant to move. It names the uid it read."""
    cluster.add(pod("db-0", node_name="n1", owner=("StatefulSet", "db")))
    snap = replace(SNAP, workloads=(*SNAP.workloads, Workload(name="default/db-0", owner="db",
                                                               workload_class=WorkloadClass.BATCH)),
                   placements={**SNAP.placements, "default/db-0": (1,)})

    def recreated_elsewhere() -> None:
        cluster.delete("pods", "db-0", "default")
        cluster.add(pod("db-0", node_name="n3", owner=("StatefulSet", "db")))

    honour_uid_preconditions(cluster, recreated_elsewhere)
    result = actuator.apply(migrate(workload="default/db-0", source=(1,), target=(2,)), snap)
    assert result.outcome is Outcome.APPLIED and "replaced" in result.detail, result.detail
    assert cluster.get("pods", "db-0", "default")["spec"]["nodeName"] == "n3"


def test_a_409_on_the_eviction_of_the_pod_still_there_is_no_move(cluster: FakeKube, actuator) -> None:
    """The Eviction API also answers 409 when the budget's update kept conflicting: the pod read still runs, so
    nothing moved (RETRY, the hold released), unlike a pod replaced under its name."""
    cluster.inject("POST", r"/eviction$", 409)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.RETRY and result.code == "409", result.detail
    assert cluster.get("pods", "web-1", "default") is not None and reservations(cluster, "n2") == {}
