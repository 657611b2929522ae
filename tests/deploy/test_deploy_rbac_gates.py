"""The rights behind a flag (tests/deploy/api_calls.py FLAG_GATED) are used only with it, so an overlay without the
flag must not grant them: the base ClusterRole granted every controller `patch` on every HPA, every Deployment's
scale and every ClusterQueue in the cluster, though only capacity shifting (--services, components/capacity) ever
resizes an inference service and only --kueue-queues (components/kueue) moves quota. Proved from the code: the only
requests to HPAs and scales are made by `k8s_inference.InferenceScaling`, which only the actuator holds, through
`KubernetesActuator._scale_inference` (applying ScaleInference alone) and `restore_floors`, and the list of HPAs
`k8s_hpa_reads.KubernetesHpaWants` makes for the capacity planner, built by `_run_parts.hpa_source` only with
--services;
ScaleInference is built only by the capacity planner's pools; and `gputide run` builds the capacity planner only with
--services (capacity.enabled and --services must agree). And against the fake API server: an actuator without Kueue
queues resizes a queued Job and keeps house without touching a ClusterQueue, one with them does."""

from __future__ import annotations

import ast
import dataclasses
import sys

import numpy as np
import pytest
from api_calls import FLAG_GATED, ROOT, _client_method, definitions, endpoint, modules, requests_of, to_rbac
from kubernetes import client as k8s_client

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.cli import build_parser
from balancer.cmd._run_parts import capacity_parts, hpa_source
from balancer.config import BalancerPolicy
from balancer.errors import InputError
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

ACTUATOR = "balancer.actuate.k8s_actuator.KubernetesActuator"
INFERENCE = "balancer.actuate.k8s_inference.InferenceScaling"   # the actuator's `inference`
HPA_READER = "balancer.actuate.k8s_hpa_reads.KubernetesHpaWants"   # what each HPA keeps, for the capacity planner
GATED = {resource for resource, flag in FLAG_GATED["run"].items() if flag == "services"}
# `gputide hand-over-floors` renames the writer of HPA floors and gputide-replicas entries: an operator's command, run
# with their rights between deleting one controller and applying another, never by a deployed container
HAND_OVER = "balancer.cmd.hand_over_floors"


def methods_calling(cls: str, method: str) -> set[str]:
    """The methods of class `cls` that call `method` (from nested code too)."""
    return {f.name for f in definitions()[cls].body if isinstance(f, ast.FunctionDef)
            and any(isinstance(n, ast.Attribute) and n.attr == method for n in ast.walk(f))}


def test_only_the_actuators_scale_inference_makes_the_requests_behind_services():
    makers = {key for key in definitions() if {r[:2] for r in requests_of(key)} & GATED}
    assert {m for m in makers if m.startswith(f"{HAND_OVER}.")} == {
        f"{HAND_OVER}.{f}" for f in ("_hand_over", "_hand_floors", "_hand_entries")}
    assert not [p for p in (ROOT / "deploy").rglob("*.yaml") if any(   # no manifest runs it (comments may say so)
        "hand-over-floors" in line and not line.lstrip().startswith("#") for line in p.read_text().splitlines())]
    assert {m for m in makers if not m.startswith(f"{HAND_OVER}.")} == {INFERENCE, HPA_READER}
    # the HPAs' own metrics, read for the capacity planner's loans: one list of HPAs, built by `hpa_source` alone
    # (test_gputide_run_reads_no_hpas_without_services)
    assert requests_of(HPA_READER) == {("autoscaling", "horizontalpodautoscalers", "list")}
    builders = {mod for mod, tree in modules().items() for n in ast.walk(tree)
                if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "KubernetesHpaWants"}
    assert builders == {"balancer.cmd._run_parts"}
    methods = {}
    for node in definitions()[INFERENCE].body:
        if isinstance(node, ast.FunctionDef):
            made = {to_rbac(*endpoint(*found), {})[:2] for n in ast.walk(node) if (found := _client_method(n))}
            if made & GATED:
                methods[node.name] = made & GATED
    # and the give-back of its HPA floors (`restore_floors`): HPAs only, handed to the policy reloader by gputide run
    # for a namespace a reload protects (whose capacity planner exists only with --services), and, once per term, for
    # the floors of services it no longer manages (one cluster-wide list: without --services a controller holds no
    # HPA rights unless components/capacity stays bound, and a refused list is logged once per term, nothing written)
    hpas = {("autoscaling", "horizontalpodautoscalers")}
    # a Deployment no HPA scales is read and scaled by `_scale_deployment`, called from `scale` alone, its
    # scale written by `_patch_scale`, the operator's count recorded in the controller's own ConfigMap before
    # (`_keep_record`; `_forget_record` once back at it) and given back with the floors (`_restore_deployments`)
    deps, scale, records = {("apps", "deployments")}, {("apps", "deployments/scale")}, {("", "configmaps")}
    assert hpas | deps | scale | records == GATED
    assert methods == {"scale": hpas, "_scale_deployment": deps, "_patch_scale": scale,
                       "_read_record": records, "_write_record": records, "_give_back_deployment": deps,
                       "_restore_namespace": hpas, "restore_floors": hpas}

    def callers(method: str) -> set[str]:
        return methods_calling(INFERENCE, method)

    assert callers("_scale_deployment") == {"scale"}
    assert callers("_keep_record") == callers("_forget_record") == {"_scale_deployment"}
    assert callers("_patch_scale") == {"_scale_deployment", "_give_back_deployment"}
    assert callers("_write_record") == {"_keep_record", "_forget_record", "_restore_deployments"}
    assert callers("_read_record") == callers("_give_back_deployment") == {"_restore_deployments"}
    assert callers("_restore_deployments") == {"restore_floors"}
    callers = {mod for mod, tree in modules().items() for n in ast.walk(tree)
               if isinstance(n, ast.Attribute) and n.attr == "restore_floors"}
    assert callers <= {"balancer.actuate.k8s_actuator", "balancer.cmd.run"}
    dispatch = [n for n in ast.walk(definitions()[ACTUATOR]) if isinstance(n, ast.Attribute)
                and n.attr == "_scale_inference"]
    assert len(dispatch) == 1   # called from one place: the dispatch on ScaleInference (k8s_actuator.apply)
    # InferenceScaling is built by the actuator alone, which calls it from these two only: `scale` on ScaleInference
    # and the give-back `restore_floors`
    builders = {mod for mod, tree in modules().items() for n in ast.walk(tree)
                if isinstance(n, ast.Call)
                and getattr(n.func, "id", getattr(n.func, "attr", None)) == "InferenceScaling"}
    assert builders == {"balancer.actuate.k8s_actuator"}
    assert methods_calling(ACTUATOR, "inference") == {"__init__", "_scale_inference", "restore_floors"}
    called = {(f.name, n.attr) for f in definitions()[ACTUATOR].body if isinstance(f, ast.FunctionDef)
              for n in ast.walk(f) if isinstance(n, ast.Attribute) and getattr(n.value, "attr", None) == "inference"}
    assert called == {("_scale_inference", "scale"), ("restore_floors", "restore_floors")}


def test_scale_inference_is_built_by_the_capacity_planner_alone():
    builders = {mod for mod, tree in modules().items() for n in ast.walk(tree)
                if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == "ScaleInference"}
    assert builders == {"balancer.plan.capacity_pools"}


def test_gputide_run_reads_no_hpas_without_services():
    # `hpa_source`, the only builder of the HPA reader (above), builds none without --services' profiles
    assert hpa_source(object(), None, 30.0) is None and hpa_source(object(), {}, 30.0) is None
    assert hpa_source(None, {"chat": object()}, 30.0) is None
    reader = hpa_source(k8s_client.ApiClient(), {"chat": object()}, 30.0)
    assert type(reader).__name__ == "KubernetesHpaWants" and reader.ttl_s == 15.0


def test_gputide_run_builds_no_capacity_planner_without_services():
    args = build_parser().parse_args(["run", "--dry-run", "--prometheus=http://prometheus:9090"])
    assert capacity_parts(args, BalancerPolicy(), source=None, interval=30.0) == (None, None)
    # a policy file turning it on without --services is refused, at start and on reload
    policy = dataclasses.replace(BalancerPolicy(), capacity=dataclasses.replace(BalancerPolicy().capacity,
                                                                                enabled=True))
    with pytest.raises(InputError):
        capacity_parts(args, policy, source=None, interval=30.0)


@pytest.fixture
def fake_kube():
    sys.path.insert(0, str(ROOT / "tests" / "k8s"))
    try:
        from fakeapi import FakeKube, job, multi_flavor_clusterqueue, workload
    finally:
        sys.path.remove(str(ROOT / "tests" / "k8s"))
    with FakeKube() as kube:
        kube.add(multi_flavor_clusterqueue("inference", "tide", {"h100": 16}))
        kube.add(multi_flavor_clusterqueue("training", "tide", {"h100": 8}))
        kube.add(workload(kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq")), "h100"))
        yield kube


@pytest.mark.parametrize("queues", [None, ("inference", "training")])
def test_clusterqueues_are_read_and_patched_only_with_kueue_queues(fake_kube, queues):
    client = fake_kube.client()
    actuator = KubernetesActuator(client, sleep=lambda _s: None, kueue_queues=queues)
    snapshot = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
    actuator.recover()
    for workers, previous in ((6, 4), (2, 6), (0, 2)):   # grow, shrink, stop a Job queued through Kueue
        actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                       snapshot)
        actuator.housekeeping()
    client.close()
    touched = {r for r in fake_kube.rbac_requests() if r[1] == "clusterqueues"}
    assert touched == ({("kueue.x-k8s.io", "clusterqueues", "get"), ("kueue.x-k8s.io", "clusterqueues", "patch")}
                       if queues else set())
