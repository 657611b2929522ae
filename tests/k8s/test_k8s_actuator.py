"""KubernetesActuator end to end against the fake API server: each action type, PDBs, conflicts, 5xx, Kueue."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, deployment, hpa, job, node, pdb, pod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from balancer.actuate.base import Actuator, Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S, NodeAnnotationCaps
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    HOT_UNTIL_ANNOTATION,
    POWER_CAP_ANNOTATION,
    RESERVATION_ANNOTATION,
    build_api_client,
    read_power_caps,
)
from balancer.model import (
    Action,
    ClusterSnapshot,
    Gpu,
    Migrate,
    Node,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
    Workload,
    WorkloadClass,
)
from exporters.power_caps import Expiring

ARRAYS = [f.name for f in fields(ClusterSnapshot) if f.type == "np.ndarray"]   # the per-GPU telemetry


def make_snapshot() -> ClusterSnapshot:
    """Two nodes (n1, n2) of two GPUs each; web-1 (owned by Deployment web) runs on n1's GPU 0."""
    gpus = tuple(Gpu(index=i, uuid=f"GPU-{i}", node=f"n{i // 2 + 1}", slot=i % 2, model="H100") for i in range(4))
    nodes = tuple(Node(name=f"n{k}", gpu_model="H100", gpu_count=2) for k in (1, 2))
    workloads = (Workload(name="default/web-1", workload_class=WorkloadClass.INFERENCE, owner="web"),
                 Workload(name="default/solo", workload_class=WorkloadClass.BATCH))
    return ClusterSnapshot(time=0.0, nodes=nodes, gpus=gpus, workloads=workloads,
                           placements={"default/web-1": (0,), "default/solo": (1,)},
                           **{name: np.zeros(4) for name in ARRAYS})


SNAP = make_snapshot()


def migrate(workload: str = "default/web-1", source: tuple[int, ...] = (0,), target: tuple[int, ...] = (2,),
            node_name: str = "n2") -> Migrate:
    return Migrate(reason="n1 GPU 0 near slowdown", expected_gain=3.0, workload=workload, source_gpus=source,
                   target_gpus=target, target_node=node_name)


def power(uuid: str = "GPU-0", watts: float = 450.0, node_name: str = "n1") -> SetPowerLimit:
    return SetPowerLimit(reason="hot", gpu=0, uuid=uuid, node=node_name, watts=watts, previous_watts=700.0)


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    kube.add(pod("solo", node_name="n1", owner=("ReplicaSet", "solo-6d4f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return kube


@pytest.fixture
def actuator(api: k8s.ApiClient, clock, sleeps: list[float]) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def annotations(kube: FakeKube, name: str) -> dict[str, str]:
    return kube.get("nodes", name)["metadata"].get("annotations") or {}


def taints(kube: FakeKube, name: str) -> list[dict]:
    return kube.get("nodes", name)["spec"].get("taints") or []


def test_the_actuator_satisfies_the_protocol(actuator: KubernetesActuator) -> None:
    assert isinstance(actuator, Actuator)
    assert actuator.name == "kubernetes"


# ---- Migrate ---------------------------------------------------------------------------------------------------


def test_migrate_reserves_the_target_taints_the_source_and_evicts(cluster: FakeKube, actuator, clock) -> None:
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert cluster.get("pods", "web-1", "default") is None
    reservation = json.loads(annotations(cluster, "n2")[RESERVATION_ANNOTATION])
    assert reservation["default/web"]["pod"] == "default/web-1"
    assert reservation["default/web"]["gpus"] == [0] and reservation["default/web"]["count"] == 1
    assert [t["key"] for t in taints(cluster, "n1")] == [HOT_TAINT_KEY]
    assert taints(cluster, "n1")[0]["effect"] == "NoSchedule"
    assert HOT_UNTIL_ANNOTATION in annotations(cluster, "n1")
    assert cluster.get("poddisruptionbudgets", "web", "default")["status"]["disruptionsAllowed"] == 0
    order = [(r.method, r.path.rsplit("/", 1)[-1]) for r in cluster.requests if r.method != "GET"]
    # reserve before evict; then the Event saying so
    assert order == [("PATCH", "n2"), ("PATCH", "n1"), ("POST", "eviction"), ("POST", "events")]


def test_pdb_429_gives_retry_releases_the_reservation_then_succeeds_once_allowed(cluster: FakeKube,
                                                                                   actuator) -> None:
    cluster.mutate("poddisruptionbudgets", "web", "default", {"status": {"disruptionsAllowed": 0}})
    blocked = actuator.apply(migrate(), SNAP)
    assert blocked.outcome is Outcome.RETRY and blocked.code == "429"
    assert "PodDisruptionBudget" in blocked.detail
    assert cluster.get("pods", "web-1", "default") is not None
    assert RESERVATION_ANNOTATION not in annotations(cluster, "n2")
    cluster.mutate("poddisruptionbudgets", "web", "default", {"status": {"disruptionsAllowed": 1}})
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert cluster.get("pods", "web-1", "default") is None


@pytest.mark.parametrize(
    ("faults", "outcome", "sleeps_expected", "pod_left"),
    [
        pytest.param(2, Outcome.APPLIED, [0.5, 1.0], False, id="two 500s on the eviction are retried"),
        pytest.param(4, Outcome.RETRY, [0.5, 1.0, 2.0], True, id="500s beyond max_retries give up with RETRY"),
    ],
)
def test_eviction_server_errors_are_retried_with_backoff(cluster: FakeKube, actuator, sleeps, faults, outcome,
                                                         sleeps_expected, pod_left) -> None:
    cluster.inject("POST", r"/eviction$", 500, count=faults)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is outcome, result.detail
    assert sleeps == sleeps_expected
    assert (cluster.get("pods", "web-1", "default") is not None) is pod_left
    assert (RESERVATION_ANNOTATION in annotations(cluster, "n2")) is not pod_left


@pytest.mark.parametrize(
    ("action", "outcome", "source_tainted"),
    [
        pytest.param(migrate(workload="default/ghost"), Outcome.FAILED, False, id="unknown pod is a permanent 404"),
        pytest.param(migrate(workload="default/solo", source=(2,)), Outcome.FAILED, False,
                     id="a pod no longer on the source node means the plan is stale"),
        pytest.param(migrate(node_name="n9"), Outcome.FAILED, False, id="unknown target node fails before touching"),
        pytest.param(migrate(workload="default/solo", source=(1,), target=(0,), node_name="n1"), Outcome.APPLIED,
                     False, id="a move within one node does not taint it"),
        pytest.param(migrate(target=(7,)), Outcome.FAILED, False, id="a GPU index outside the snapshot fails"),
    ],
)
def test_migrate_edge_cases(cluster: FakeKube, actuator, action, outcome, source_tainted) -> None:
    result = actuator.apply(action, SNAP)
    assert result.outcome is outcome, result.detail
    assert bool(taints(cluster, "n1")) is source_tainted
    assert RESERVATION_ANNOTATION not in annotations(cluster, "n2")


def test_a_pod_gone_between_read_and_eviction_counts_as_moved(cluster: FakeKube, actuator) -> None:
    cluster.inject("POST", r"/eviction$", 404)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED and "already gone" in result.detail
    assert RESERVATION_ANNOTATION in annotations(cluster, "n2")


def test_reservation_of_a_pod_the_snapshot_names_no_owner_for_is_keyed_by_the_pod(cluster: FakeKube,
                                                                                   actuator) -> None:
    cluster.add(node("n3", 2))
    action = migrate(workload="default/solo", source=(1,), target=(2, 3), node_name="n2")
    assert actuator.apply(action, SNAP).outcome is Outcome.APPLIED
    reservation = json.loads(annotations(cluster, "n2")[RESERVATION_ANNOTATION])
    assert list(reservation) == ["default/solo"] and reservation["default/solo"]["gpus"] == [0, 1]


def test_a_pod_no_controller_recreates_is_not_moved(cluster: FakeKube, actuator) -> None:
    """A bare pod (no controlling ownerReference) evicted is gone for good: the migration is refused before anything
    is reserved, tainted or evicted. So is a static pod (its mirror's owner is the Node: only that kubelet runs it)."""
    for name, owner in (("bare", None), ("static", ("Node", "n1"))):
        cluster.add(pod(name, node_name="n1", owner=owner))
        result = actuator.apply(migrate(workload=f"default/{name}", source=(1,), target=(2,), node_name="n2"), SNAP)
        assert result.outcome is Outcome.FAILED and "no controller recreates it" in result.detail
    assert not cluster.calls("POST", r"/eviction$") and not [r for r in cluster.requests if r.method == "PATCH"]


@pytest.mark.parametrize(("spec", "failed", "moved"), [
    ({}, 0, True),                                          # backoffLimit 6 by default: failures to spare
    ({"backoffLimit": 0}, 0, False),                        # the eviction alone would fail the Job
    ({"backoffLimit": 3}, 2, False),                        # would leave no failure for a real one
    ({"backoffLimit": 0, "podFailurePolicy": {"rules": [   # evictions are not failures for it
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}}, 0, True),
    ({"backoffLimitPerIndex": 1}, 0, False),                # counted per index, which gputide does not see
], ids=["default-limit", "limit-0", "last-spare-failure", "disruptions-ignored", "per-index"])
def test_a_jobs_pod_is_moved_only_when_its_eviction_cannot_fail_the_job(cluster: FakeKube, actuator, spec, failed,
                                                                       moved) -> None:
    """An evicted pod fails, and a Job counts it against backoffLimit unless a podFailurePolicy ignores
    DisruptionTarget: moving a worker of a Job at its limit failed the whole Job. Read before anything changes."""
    train = job("train", parallelism=1)
    train["spec"].update(spec)
    cluster.add(train)
    if failed:
        cluster.mutate("jobs", "train", "default", {"status": {"failed": failed}})
    cluster.add(pod("train-x", node_name="n1", owner=("Job", "train")))
    result = actuator.apply(migrate(workload="default/train-x", source=(1,), target=(2,), node_name="n2"), SNAP)
    assert (result.outcome is Outcome.APPLIED) is moved, result.detail
    assert bool(cluster.calls("POST", r"/train-x/eviction$")) is moved
    if not moved:
        assert "job default/train" in result.detail and not [r for r in cluster.requests if r.method == "PATCH"]


def test_the_reservation_of_a_qualified_owner_is_keyed_once_by_its_namespace(cluster: FakeKube, actuator) -> None:
    from dataclasses import replace

    web = replace(SNAP.workload_by_name["default/web-1"], owner="default/web")  # as KubernetesWorkloads qualifies
    snap = replace(SNAP, workloads=tuple(web if w.name == web.name else w for w in SNAP.workloads))
    assert actuator.apply(migrate(), snap).outcome is Outcome.APPLIED
    assert list(json.loads(annotations(cluster, "n2")[RESERVATION_ANNOTATION])) == ["default/web"]


# ---- power caps, taints, conflicts --------------------------------------------------------------------------


def test_power_limit_merges_into_the_existing_annotation(cluster: FakeKube, actuator) -> None:
    cluster.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-1": 300}'}}})
    result = actuator.apply(power(), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert read_power_caps(cluster.get("nodes", "n1")) == {"GPU-0": 450.0, "GPU-1": 300.0}
    assert actuator.power_caps("n1") == {"GPU-0": 450.0, "GPU-1": 300.0}


def test_a_conflicting_writer_is_not_overwritten(cluster: FakeKube, actuator) -> None:
    # another writer changes n1 between our read and our patch: the 409 makes us re-read and keep its entry
    cluster.before("PATCH", r"/nodes/n1$", lambda: cluster.mutate(
        "nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-1": 280}'}}}))
    result = actuator.apply(power(), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert len(cluster.calls("PATCH", r"/nodes/n1$")) == 2
    assert read_power_caps(cluster.get("nodes", "n1")) == {"GPU-0": 450.0, "GPU-1": 280.0}


@pytest.mark.parametrize(
    ("code", "count", "outcome"),
    [
        pytest.param(409, 1, Outcome.APPLIED, id="one 409 is retried after a re-read"),
        pytest.param(409, 4, Outcome.RETRY, id="409 on every try gives RETRY"),
        pytest.param(500, 3, Outcome.APPLIED, id="three 500s are within max_retries"),
        pytest.param(503, 4, Outcome.RETRY, id="four 503s give RETRY"),
        pytest.param(429, 1, Outcome.APPLIED, id="API throttling 429 is retried"),
        pytest.param(403, 1, Outcome.FAILED, id="403 is permanent"),
    ],
)
def test_node_writes_map_errors_to_outcomes(cluster: FakeKube, actuator, code, count, outcome) -> None:
    cluster.inject("PATCH", r"/nodes/n1$", code, count=count)
    result = actuator.apply(power(), SNAP)
    assert result.outcome is outcome, result.detail
    # the code labels gputide_actuation_errors_total: the HTTP status of the failure, none on success
    assert result.code == ("" if outcome is Outcome.APPLIED else str(code))
    assert (read_power_caps(cluster.get("nodes", "n1")) == {"GPU-0": 450.0}) is (outcome is Outcome.APPLIED)


def test_power_limit_on_an_unknown_node_fails(cluster: FakeKube, actuator) -> None:
    assert actuator.apply(power(node_name="n9"), SNAP).outcome is Outcome.FAILED


@pytest.mark.parametrize(
    ("actions", "taint_count", "hot_until"),
    [
        pytest.param([TaintNode(reason="hot", node="n1")], 1, True, id="taint adds the hot taint with expiry"),
        pytest.param([TaintNode(reason="hot", node="n1")] * 2, 1, True, id="tainting twice keeps one taint"),
        pytest.param([TaintNode(reason="hot", node="n1"), TaintNode(reason="cool", node="n1", remove=True)], 0,
                     False, id="remove takes taint and expiry away"),
        pytest.param([TaintNode(reason="cool", node="n1", remove=True)], 0, False, id="removing nothing is fine"),
    ],
)
def test_taint_node(cluster: FakeKube, actuator, actions, taint_count, hot_until) -> None:
    for action in actions:
        assert actuator.apply(action, SNAP).outcome is Outcome.APPLIED
    assert len([t for t in taints(cluster, "n1") if t["key"] == HOT_TAINT_KEY]) == taint_count
    assert (HOT_UNTIL_ANNOTATION in annotations(cluster, "n1")) is hot_until


def test_release_expired_removes_old_taints_and_reservations_only(cluster: FakeKube, actuator, clock) -> None:
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert actuator.release_expired() == []
    clock.advance(actuator.reservation_ttl_s + 1)
    notes = actuator.release_expired()
    assert notes == ["n2: reservations expired: ['default/web']"]
    assert taints(cluster, "n1")
    clock.advance(actuator.hot_taint_ttl_s)
    assert actuator.release_expired() == ["n1: hot taint expired"]
    assert not taints(cluster, "n1") and HOT_UNTIL_ANNOTATION not in annotations(cluster, "n1")


def test_an_entry_not_gputides_in_the_reservations_is_cleaned_and_stops_nothing(cluster: FakeKube, actuator,
                                                                                 clock) -> None:
    """A reservation entry that is not {"expires": ...} (hand-edited, an older writer) raised out of the cleanup:
    no node after it was cleaned, so an expired hot taint there stayed. It is removed as expired now."""
    cluster.mutate("nodes", "n1", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(
        {"default/odd": "soon"})}}})
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED   # taints n1, reserves on n2
    clock.advance(actuator.hot_taint_ttl_s + 1)
    notes = actuator.release_expired()
    assert "n1: reservations expired: ['default/odd']" in notes and "n1: hot taint expired" in notes
    assert "n2: reservations expired: ['default/web']" in notes


def test_a_source_node_gone_is_a_failed_migration_not_a_pod_already_gone(cluster: FakeKube, actuator) -> None:
    """The 404 of tainting a deleted source node was read as the pod's: APPLIED, "already gone", the target held
    and the move counted, while the pod was never evicted. Only the eviction's own 404 means the pod is gone."""
    cluster.inject("GET", r"/api/v1/nodes/n1$", 404)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and "already gone" not in result.detail
    assert not cluster.calls("POST", r"/eviction$")
    assert RESERVATION_ANNOTATION not in annotations(cluster, "n2") or json.loads(
        annotations(cluster, "n2")[RESERVATION_ANNOTATION]) == {}


def give_back(uuid: str = "GPU-0", catalogue_w: float = 700.0) -> SetPowerLimit:
    return SetPowerLimit(reason="GPU cooled", gpu=int(uuid[-1]), uuid=uuid, node="n1", watts=catalogue_w,
                         previous_watts=450.0, give_back=True)


def caps_annotation(cluster: FakeKube) -> dict:
    raw = annotations(cluster, "n1").get(POWER_CAP_ANNOTATION)
    return json.loads(raw) if raw else {}


def limited(**watts: float):
    """SNAP with the power limits its GPUs report (700 W unless given)."""
    return SNAP.replace(power_limit_w=np.array([watts.get(f"GPU_{i}", 700.0) for i in range(4)]))


def test_a_give_back_leaves_a_restore_entry_not_the_catalogue_tdp(cluster: FakeKube, actuator) -> None:
    actuator.apply(power("GPU-0", 450.0), SNAP)
    actuator.apply(power("GPU-1", 300.0), SNAP)
    result = actuator.apply(give_back("GPU-0", catalogue_w=400.0), limited(GPU_0=450.0, GPU_1=300.0))
    assert result.outcome is Outcome.APPLIED and "given back" in result.detail
    assert caps_annotation(cluster) == {"GPU-0": {"restore": 450.0}, "GPU-1": 300.0}
    assert actuator.power_caps("n1") == {"GPU-1": 300.0}   # what gputide still holds: GPU-1 only


def test_a_give_back_of_a_gpu_gputide_does_not_cap_changes_nothing(cluster: FakeKube, actuator) -> None:
    result = actuator.apply(give_back("GPU-0"), limited(GPU_0=300.0))   # capped, but not by gputide
    assert result.outcome is Outcome.APPLIED and "no gputide cap" in result.detail
    assert caps_annotation(cluster) == {} and not cluster.calls("PATCH", r"/nodes/n1$")


def test_the_write_drops_replaced_gpus_and_carried_out_give_backs(cluster: FakeKube, actuator) -> None:
    cluster.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: json.dumps({
        "GPU-9": 300, "GPU-8": {"restore": 300},       # GPUs replaced since: not on n1 in the snapshot
        "GPU-1": {"restore": 400}})}}})                # carried out: GPU-1 runs at 700 W again
    result = actuator.apply(power("GPU-0", 450.0), limited())
    assert caps_annotation(cluster) == {"GPU-0": 450.0}
    assert "dropped GPU-1, GPU-8, GPU-9" in result.detail
    # a give-back the agent has not carried out yet (GPU-1 still at its 400 W cap) stays for it
    cluster.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: json.dumps({
        "GPU-0": 450.0, "GPU-1": {"restore": 400}})}}})
    actuator.apply(power("GPU-0", 400.0), limited(GPU_0=450.0, GPU_1=400.0))
    assert caps_annotation(cluster) == {"GPU-0": 400.0, "GPU-1": {"restore": 400}}
    # a give-back is written whatever the snapshot says of the GPU: at its default there, either no agent applied
    # the cap (the agent then finds nothing to restore) or the snapshot is older than the cap (dropped now, the
    # cap would stay on for good); a later write drops it once the GPU's limit has left the cap
    actuator.apply(give_back("GPU-0"), limited(GPU_1=400.0))
    assert caps_annotation(cluster) == {"GPU-0": {"restore": 400.0}, "GPU-1": {"restore": 400}}
    actuator.apply(power("GPU-1", 380.0), limited(GPU_1=400.0))
    assert caps_annotation(cluster) == {"GPU-1": 380.0}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["GPU-0", "GPU-1"]), st.integers(100, 700)), min_size=1,
                max_size=5))
def test_power_caps_annotation_holds_the_last_write_per_gpu(writes: list[tuple[str, int]]) -> None:
    with FakeKube() as kube:
        kube.add(node("n1", 2))
        api = kube.client()
        actuator = KubernetesActuator(api, sleep=lambda s: None)
        for uuid, watts in writes:
            assert actuator.apply(power(uuid, watts), SNAP).outcome is Outcome.APPLIED
        assert read_power_caps(kube.get("nodes", "n1")) == {u: float(w) for u, w in dict(writes).items()}
        api.close()


@pytest.mark.parametrize(
    ("node_obj", "expected"),
    [
        pytest.param({"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"a": 300, "b": 250.5}'}}},
                     {"a": 300.0, "b": 250.5}, id="a JSON map of watts"),
        pytest.param({"metadata": {"annotations": {POWER_CAP_ANNOTATION: "not json"}}}, {}, id="junk is ignored"),
        pytest.param({"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"a": -1, "b": "x", "c": true}'}}}, {},
                     id="non-positive and non-numeric entries are skipped"),
        pytest.param({"metadata": {}}, {}, id="no annotation"),
        pytest.param(k8s.V1Node(metadata=k8s.V1ObjectMeta(annotations={POWER_CAP_ANNOTATION: '{"a": 200}'})),
                     {"a": 200.0}, id="a V1Node model works too"),
    ],
)
def test_read_power_caps(node_obj, expected) -> None:
    assert read_power_caps(node_obj) == expected


def test_the_power_cap_agent_source_reads_what_the_actuator_wrote(cluster: FakeKube, api, actuator, clock) -> None:
    source = NodeAnnotationCaps(api, "n1", sleep=lambda s: None)
    assert source.read() == {}
    actuator.apply(power("GPU-1", 333.0), SNAP)
    assert source.read() == {"GPU-1": Expiring(333.0, clock() + POWER_CAP_TTL_S)}   # the cap and its expiry
    cluster.inject("GET", r"/nodes/n1$", 500, count=2)
    assert source.read() is None   # unreadable, not "no caps": the agent keeps what it applied


# ---- inference scaling ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("with_hpa", "replicas", "min_replicas", "deploy_replicas", "clamped"),
    [
        pytest.param(True, 4, 4, 2, False, id="an HPA gets the floor as minReplicas"),
        pytest.param(True, 12, 10, 2, True, id="the floor is clamped to the HPA's maxReplicas"),
        pytest.param(True, 0, 2, 2, True, id="minReplicas never goes below the operator's own"),
        pytest.param(False, 5, None, 5, False, id="without an HPA the Deployment scale is set"),
    ],
)
def test_scale_inference(kube: FakeKube, actuator, with_hpa, replicas, min_replicas, deploy_replicas,
                         clamped) -> None:
    kube.add(deployment("web", "serve"))
    kube.add(deployment("other", "serve"))
    if with_hpa:
        kube.add(hpa("web-other", "other", "serve"))
        kube.add(hpa("web", "web", "serve", lo=2, hi=10))
    action = ScaleInference(reason="tide rising", service="serve/web", replicas=replicas, previous_replicas=2)
    result = actuator.apply(action, SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert ("clamped" in result.detail) is clamped
    assert kube.get("deployments", "web", "serve")["spec"]["replicas"] == deploy_replicas
    if with_hpa:
        assert kube.get("horizontalpodautoscalers", "web", "serve")["spec"]["minReplicas"] == min_replicas
        assert kube.get("horizontalpodautoscalers", "web-other", "serve")["spec"]["minReplicas"] == 1


def test_a_service_none_of_whose_pods_runs_is_scaled_in_the_namespace_its_series_name(kube: FakeKube, actuator) -> None:
    # every replica pending (or none yet): no pod says where the Deployment lives; its serving series do
    from dataclasses import replace

    from balancer.model import ServiceStatus

    kube.add(deployment("llm-chat", "ml", replicas=1))
    status = ServiceStatus(name="llm-chat", demand_rps=0.0, p99_latency_s=0.0, slo_latency_s=0.5, replicas=1,
                           namespace="ml")
    snap = replace(SNAP, services={"llm-chat": status})
    action = ScaleInference(reason="reclaim ahead of the rise", service="llm-chat", replicas=4, previous_replicas=1)
    result = actuator.apply(action, snap)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("deployments", "llm-chat", "ml")["spec"]["replicas"] == 4


def test_scale_inference_of_an_unknown_deployment_fails(kube: FakeKube, actuator) -> None:
    action = ScaleInference(reason="x", service="serve/ghost", replicas=3, previous_replicas=1)
    assert actuator.apply(action, SNAP).outcome is Outcome.FAILED


# ---- training scaling and Kueue ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start_suspended", "workers", "parallelism", "suspended"),
    [
        pytest.param(False, 0, 4, True, id="zero workers suspends the job and keeps its parallelism"),
        pytest.param(False, 2, 2, False, id="shrinking sets parallelism"),
        pytest.param(True, 6, 6, False, id="growing a job gputide suspended resumes it"),
    ],
)
def test_scale_training_job(kube: FakeKube, actuator, start_suspended, workers, parallelism, suspended) -> None:
    stored = job("train", "ml", parallelism=4, suspend=start_suspended)
    if start_suspended:   # by gputide (its label): a Job its owner suspended is refused (test_k8s_foreign_suspend)
        stored["metadata"]["labels"]["gputide.io/suspended"] = "true"
    kube.add(stored)
    action = ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=4)
    assert actuator.apply(action, SNAP).outcome is Outcome.APPLIED
    spec = kube.get("jobs", "train", "ml")["spec"]
    assert (spec["parallelism"], spec["suspend"]) == (parallelism, suspended)


def test_a_suspended_job_is_labelled_for_gputide_to_find_and_unlabelled_when_resumed(kube: FakeKube, actuator):
    from dataclasses import replace

    from balancer.actuate.kubernetes import PRIORITY_ANNOTATION, SUSPENDED_LABEL
    from balancer.model import SuspendedJob

    kube.add(job("train", "ml", parallelism=4))
    worker = Workload(name="ml/train-0", workload_class=WorkloadClass.TRAINING, namespace="ml", owner="train",
                      priority=50, elastic_min=1, elastic_max=8)
    running = replace(SNAP, workloads=(*SNAP.workloads, worker), placements={**SNAP.placements, worker.name: (3,)})
    # a bare job name: the namespace comes from its pods in the snapshot, not the actuator's default
    suspend = ScaleTraining(reason="burst", job="train", workers=0, previous_workers=4)
    assert actuator.apply(suspend, running).outcome is Outcome.APPLIED
    meta = kube.get("jobs", "train", "ml")["metadata"]
    assert meta["labels"][SUSPENDED_LABEL] == "true" and meta["annotations"][PRIORITY_ANNOTATION] == "50"
    # no pods now: the namespace comes from the snapshot's suspended jobs
    suspended = replace(SNAP, suspended_jobs=(SuspendedJob(name="train", namespace="ml", elastic_max=8),))
    resume = ScaleTraining(reason="idle GPUs", job="train", workers=3, previous_workers=0)
    assert actuator.apply(resume, suspended).outcome is Outcome.APPLIED
    got = kube.get("jobs", "train", "ml")
    assert SUSPENDED_LABEL not in (got["metadata"].get("labels") or {})
    assert (got["spec"]["parallelism"], got["spec"]["suspend"]) == (3, False)


def test_a_bare_name_that_spans_two_namespaces_is_refused_and_a_qualified_one_scales_only_its_own(
        kube: FakeKube, actuator):
    from dataclasses import replace

    kube.add(job("train", "ml", parallelism=4))
    kube.add(job("train", "research", parallelism=4))
    pods = tuple(Workload(name=f"{ns}/train-0", workload_class=WorkloadClass.TRAINING, namespace=ns, owner=owner,
                          elastic_min=1, elastic_max=8) for ns, owner in (("ml", "train"), ("research", "train")))
    snap = replace(SNAP, workloads=(*SNAP.workloads, *pods))
    result = actuator.apply(ScaleTraining(reason="tide", job="train", workers=2, previous_workers=4), snap)
    assert result.outcome is Outcome.FAILED and "ml, research" in result.detail
    assert [kube.get("jobs", "train", ns)["spec"]["parallelism"] for ns in ("ml", "research")] == [4, 4]
    # the workload provider names them research/train and ml/train: each action reaches only its own Job
    qualified = replace(SNAP, workloads=(*SNAP.workloads, *(replace(w, owner=f"{w.namespace}/train") for w in pods)))
    action = ScaleTraining(reason="tide", job="research/train", workers=2, previous_workers=4)
    assert actuator.apply(action, qualified).outcome is Outcome.APPLIED
    assert [kube.get("jobs", "train", ns)["spec"]["parallelism"] for ns in ("ml", "research")] == [4, 2]


def quota(kube: FakeKube, name: str) -> dict:
    return kube.get("clusterqueues", name)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]


@pytest.mark.parametrize(
    ("workers", "inference", "training", "lending"),
    [
        pytest.param(6, 12, 12, 12, id="growing 4 -> 6 workers of 2 GPUs loans 4 GPUs of quota to training"),
        pytest.param(2, 20, 4, 16, id="shrinking 4 -> 2 gives 4 GPUs back to inference"),
    ],
)
def test_scale_training_shifts_kueue_quota(kube: FakeKube, actuator, workers, inference, training,
                                           lending) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=16))
    kube.add(clusterqueue("training", "tide", 8))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    action = ScaleTraining(reason="night", job="ml/train", workers=workers, previous_workers=4)
    result = actuator.apply(action, SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert "kueue quota 4" in result.detail
    assert quota(kube, "inference")["nominalQuota"] == inference
    assert quota(kube, "inference")["lendingLimit"] == lending
    assert quota(kube, "training")["nominalQuota"] == training


@pytest.mark.parametrize(
    ("training_cohort", "gpus", "message"),
    [
        pytest.param("other", 2, "not in one cohort", id="queues in different cohorts are refused"),
        pytest.param("tide", 20, "nominalQuota would be", id="a lender cannot go below zero"),
    ],
)
def test_kueue_shift_refusals_change_nothing(kube: FakeKube, actuator, training_cohort, gpus, message) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", training_cohort, 8))
    with pytest.raises(Exception, match=message):
        actuator.shift_kueue_quota("inference", "training", gpus)
    assert (quota(kube, "inference")["nominalQuota"], quota(kube, "training")["nominalQuota"]) == (16, 8)


def test_a_failed_kueue_borrower_update_restores_the_lender(kube: FakeKube, actuator) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    kube.inject("PATCH", r"/clusterqueues/training$", 403)
    with pytest.raises(Exception, match="403"):
        actuator.shift_kueue_quota("inference", "training", 4)
    assert quota(kube, "inference")["nominalQuota"] == 16


# ---- odds and ends -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Reboot(Action):
    kind: ClassVar[str] = "reboot"

    @property
    def target(self) -> str:
        return "n1"


def test_an_unknown_action_type_fails_without_raising(actuator) -> None:
    result = actuator.apply(Reboot(reason="x"), SNAP)
    assert result.outcome is Outcome.FAILED and "reboot" in result.detail


def test_a_read_timeout_is_retried(cluster: FakeKube, api, sleeps) -> None:
    """The second try must be answered within the timeout: with 20 ms, a fake API server thread that 2 loaded cores
    ran 30 ms late failed it too."""
    actuator = KubernetesActuator(api, sleep=sleeps.append, request_timeout_s=0.5)
    cluster.inject("POST", r"/eviction$", 504, delay_s=1.0)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert sleeps == [0.5]
    assert len(cluster.calls("POST", r"/eviction$")) == 2


def test_an_unreachable_api_server_gives_retry(kube: FakeKube, sleeps) -> None:
    client = build_api_client(host="http://127.0.0.1:9")   # discard port: connection refused
    actuator = KubernetesActuator(client, sleep=sleeps.append, max_retries=1)
    result = actuator.apply(power(), SNAP)
    assert result.outcome is Outcome.RETRY and result.code == "transport", result.detail
    assert sleeps == [0.5]


def test_build_api_client_reads_a_kubeconfig(cluster: FakeKube, tmp_path) -> None:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": cluster.url}}],
        "users": [{"name": "me", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    client = build_api_client(str(path))
    assert k8s.CoreV1Api(client).read_node("n2").metadata.name == "n2"
    client.close()


@pytest.mark.parametrize("hook", ["recover", "housekeeping"])
def test_recover_and_housekeeping_release_what_expired(cluster: FakeKube, actuator, clock, hook) -> None:
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert getattr(actuator, hook)() == []
    clock.advance(actuator.hot_taint_ttl_s + 1)
    assert sorted(getattr(actuator, hook)()) == ["n1: hot taint expired", "n2: reservations expired: ['default/web']"]
    assert not taints(cluster, "n1")


@pytest.mark.parametrize("hook", ["recover", "housekeeping"])
def test_recover_and_housekeeping_turn_an_api_failure_into_a_note(cluster: FakeKube, actuator, hook) -> None:
    cluster.inject("GET", r"/api/v1/nodes$", 403, count=1)
    notes = getattr(actuator, hook)()
    assert len(notes) == 1 and notes[0].startswith(f"{hook}: could not release") and "403" in notes[0]


def test_the_loop_recovers_then_housekeeps_through_the_kubernetes_actuator(cluster: FakeKube, actuator) -> None:
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics
    from balancer.model import Plan

    class Snapshots:
        def snapshot(self):
            return SNAP.replace(sample_age_s=[0.0] * SNAP.n_gpus)

    def no_plan(snapshot, forecasts, policy, state):
        return Plan(actions=()), state

    rec = Reconciler(source=Snapshots(), actuator=actuator, clock=lambda: SNAP.time, metrics=ControllerMetrics(),
                     planner=no_plan)
    before = len(cluster.calls("GET", r"/api/v1/nodes$"))
    assert rec.run_once().status == "ok"
    assert rec.run_once().status == "ok"
    # recover on the first cycle as leader, housekeeping on both planning cycles: three node listings
    assert len(cluster.calls("GET", r"/api/v1/nodes$")) - before == 3


def test_every_applied_action_leaves_an_event_on_what_it_changed(cluster: FakeKube, actuator, sleeps) -> None:
    """`kubectl describe` / `kubectl get events` say what gputide did and why: the pod it moved, the node it
    tainted or capped, the Deployment or Job it scaled. A failing Events API costs one attempt and no action."""
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert actuator.apply(TaintNode(node="n1", reason="hot"), SNAP).outcome is Outcome.APPLIED
    cluster.add(deployment("chat", "serving", 2))
    scale = ScaleInference(service="serving/chat", replicas=3, previous_replicas=2, reason="the tide rises")
    assert actuator.apply(scale, SNAP).outcome is Outcome.APPLIED
    events = [(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["metadata"]["namespace"], e["reason"])
              for (p, _, _), e in sorted(cluster.objects.items(),
                                         key=lambda kv: int(kv[1]["metadata"]["resourceVersion"])) if p == "events"]
    assert events == [("Pod", "web-1", "default", "GputideMigrated"), ("Node", "n1", "default", "GputideTainted"),
                      ("Deployment", "chat", "serving", "GputideScaledInference")]
    message = next(e["message"] for (p, _, _), e in cluster.objects.items() if p == "events" and
                   e["involvedObject"]["kind"] == "Node")
    assert message.startswith("hot: added taint gputide.io/hot on n1")
    cluster.inject("POST", r"/events$", 500, count=10)
    before = len(sleeps)
    assert actuator.apply(TaintNode(node="n1", remove=True, reason="cooled"), SNAP).outcome is Outcome.APPLIED
    assert len(sleeps) == before and len(cluster.calls("POST", r"/events$")) == 4   # one attempt, no backoff


@pytest.mark.parametrize(("target_change", "pod_change", "why"), [
    ({"spec": {"taints": [{"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}]}}, {},
     "a taint it does not tolerate (dedicated=team-b:NoSchedule)"),
    ({}, {"spec": {"nodeSelector": {"pool": "a"}}}, "labels its node selector does not match"),
    ({}, {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}},
     "labels its required node affinity does not allow"),
], ids=["untolerated-taint", "node-selector", "node-affinity"])
def test_a_migration_to_a_node_the_pod_may_not_run_on_is_refused_before_anything_changes(
        cluster: FakeKube, actuator, target_change, pod_change, why) -> None:
    """The chokepoint sees the real pod and node: a move whose replacement could not run on the target (a taint
    it does not tolerate, its node selector or required node affinity) would leave the workload without a place,
    so nothing is reserved, tainted or evicted."""
    if target_change:
        cluster.mutate("nodes", "n2", "", target_change)
    if pod_change:
        cluster.mutate("pods", "web-1", "default", pod_change)
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and why in result.detail, result.detail
    assert cluster.get("pods", "web-1", "default") is not None
    assert not [r for r in cluster.requests if r.method != "GET"]


def test_a_tolerated_taint_does_not_stop_a_migration(cluster: FakeKube, actuator) -> None:
    cluster.mutate("nodes", "n2", "", {"spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]}})
    cluster.mutate("pods", "web-1", "default", {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}})
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
