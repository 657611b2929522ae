"""A pod of a profiled inference service (one --services names) is inference whatever controller runs it.

Without a `gputide.io/workload-class` label a pod's class was its owner's kind alone: a Deployment's pod inference,
anything else but an elastic Job's batch. A service served by a StatefulSet (or a LeaderWorkerSet, an operator) had
no inference pod, so the capacity planner never held for it once its series went missing (`unseen_services` asks for
an inference pod placed) and lent its GPUs away while its demand was unknown. Now `KubernetesWorkloads(services=...)`
makes such a pod inference where its owner, as qualified (`namespace/name` for a name in two namespaces), is a
profile's name, as the planner matches them. A label still wins (a labelled batch pod stays batch), a Job's pod is
the service's batch work (never a replica), and without profiles nothing changes."""

from __future__ import annotations

import argparse

import pytest
import yaml
from fakeapi import FakeKube, pod

from balancer.actuate import kubernetes as kube_mod
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.cmd import run as run_cmd
from balancer.metrics import ControllerMetrics
from balancer.model import ScaleTraining, WorkloadClass
from balancer.plan.capacity_loop import NO_SERIES
from tests.loop.test_capacity_hold_no_series import PROFILED, idle_two, plan

BATCH, INF = WorkloadClass.BATCH, WorkloadClass.INFERENCE


def stateful(name: str, namespace: str, owner: str, labels: dict[str, str] | None = None) -> dict:
    return pod(name, namespace, gpus=1, owner=("StatefulSet", owner), labels=labels)


def classes(api, services=()) -> dict[str, tuple[str, WorkloadClass]]:
    return {k: (w.owner, w.workload_class) for k, w in KubernetesWorkloads(api, services=services)().items()}


def test_a_profiled_statefulsets_pod_is_inference_and_an_unprofiled_ones_stays_batch(kube: FakeKube, api):
    kube.add(stateful("chat-0", "serving", "chat"))
    kube.add(stateful("cache-0", "serving", "cache"))
    assert classes(api, ("chat",)) == {"serving/chat-0": ("chat", INF), "serving/cache-0": ("cache", BATCH)}
    # no profiles (`gputide run` without --services): as the pod's own object says, as before
    assert classes(api) == {"serving/chat-0": ("chat", BATCH), "serving/cache-0": ("cache", BATCH)}


def operators(name: str, namespace: str, kind: str, owner: str) -> dict:
    made = pod(name, namespace, gpus=1, owner=(kind, owner))
    if kind == "InferenceService":
        made["metadata"]["ownerReferences"][0]["apiVersion"] = "serving.kserve.io/v1beta1"
    return made


@pytest.mark.parametrize("kind", ["InferenceService", "ReplicaSet"], ids=["an-operators", "a-bare-replicaset"])
def test_a_profiled_services_pod_of_any_other_controller_is_inference_too(kube: FakeKube, api, kind):
    """Not StatefulSets alone: a pod an operator's resource controls (a KServe InferenceService run in raw mode), or
    a ReplicaSet no Deployment made (no `pod-template-hash`: its own name is the owner), is its profiled service's
    replica; unprofiled, batch as before."""
    kube.add(operators("chat-0", "serving", kind, "chat"))
    kube.add(operators("cache-0", "serving", kind, "cache"))
    assert classes(api, ("chat",)) == {"serving/chat-0": ("chat", INF), "serving/cache-0": ("cache", BATCH)}
    assert classes(api) == {"serving/chat-0": ("chat", BATCH), "serving/cache-0": ("cache", BATCH)}


@pytest.mark.parametrize(("made", "expected"), [
    (lambda: stateful("chat-batch-0", "serving", "chat", {"gputide.io/workload-class": "batch"}), BATCH),
    (lambda: stateful("chat-train-0", "serving", "chat", {"gputide.io/workload-class": "training"}),
     WorkloadClass.TRAINING),
    (lambda: pod("chat-eval-0", "serving", gpus=1, owner=("Job", "chat")), BATCH),
    (lambda: pod("eval-0", "serving", gpus=1, owner=("Job", "eval"), labels={"gputide.io/job": "chat"}), BATCH),
    (lambda: stateful("chat-odd-0", "serving", "chat", {"gputide.io/workload-class": "serving"}), INF),
], ids=["labelled-batch", "labelled-training", "its-job", "job-labelled-its-name", "a-label-no-class-has"])
def test_a_label_wins_and_a_job_of_the_services_name_stays_batch(kube: FakeKube, api, made, expected):
    kube.add(made())
    assert list(classes(api, ("chat",)).values()) == [("chat", expected)]


def test_profiles_match_the_owners_as_qualified(kube: FakeKube, api):
    """Two StatefulSets `chat` (teams a and b) are owners `team-a/chat` and `team-b/chat`: a profile of the bare name
    names neither (the planner's `unseen_services` matches it against the qualified owners too)."""
    kube.add(stateful("chat-0", "team-a", "chat"))
    kube.add(stateful("chat-0", "team-b", "chat"))
    assert classes(api, ("team-a/chat",)) == {"team-a/chat-0": ("team-a/chat", INF),
                                                "team-b/chat-0": ("team-b/chat", BATCH)}
    assert {c for _, c in classes(api, ("chat",)).values()} == {BATCH}


def test_a_profiled_statefulset_service_with_no_series_holds_the_tide(kube: FakeKube, api):
    """From the API to the plan: chat served by a StatefulSet, its series gone; its idle GPUs are not lent."""
    snap = idle_two().replace(services={}, demand_unknown={})
    chat = [w for w in snap.workloads if w.owner == "chat"]
    for w in chat:
        kube.add(stateful(w.name.split("/")[1], w.namespace, "chat"))
    read = KubernetesWorkloads(api, services=PROFILED)()
    snap = snap.replace(workloads=tuple(read.get(w.name, w) for w in snap.workloads))
    p, state = plan(snap)
    assert state.demand_held == {"chat": NO_SERIES}, p.notes
    assert not [a for a in p.actions if isinstance(a, ScaleTraining)], [a.describe() for a in p.actions]


def test_gputide_run_reads_the_services_profiles_into_the_pods_classes(kube: FakeKube, api, monkeypatch, tmp_path):
    monkeypatch.setattr(kube_mod, "build_api_client", lambda kubeconfig=None: api)
    kube.add(stateful("chat-0", "serving", "chat"))
    kube.add(stateful("cache-0", "serving", "cache"))
    (tmp_path / "services.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles",
        "services": [{"name": "chat", "rpsPerReplica": 10}]}))
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "spec": {"capacity": {"enabled": True}}}))
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    rec = run_cmd.build_reconciler(parser.parse_args([
        "run", "--prometheus", "http://127.0.0.1:9", "--once", "--services", str(tmp_path / "services.yaml"),
        "--policy", str(tmp_path / "policy.yaml")]), ControllerMetrics())
    got = {k: w.workload_class for k, w in rec.source.workload_overrides().items()}
    assert got == {"serving/chat-0": INF, "serving/cache-0": BATCH}
