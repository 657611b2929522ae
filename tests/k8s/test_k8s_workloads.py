"""Pod metadata from the Kubernetes API (the fake API server): owners, classes, priorities, elastic bounds."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest
from fakeapi import FakeKube, job, pod

from balancer.actuate.k8s_workloads import KubernetesWorkloads, workload_from_pod
from balancer.model import SuspendedJob, WorkloadClass


def with_meta(p, *, labels=None, annotations=None, priority=None, node_selector=None):
    p["metadata"].setdefault("labels", {}).update(labels or {})
    p["metadata"]["annotations"] = annotations or {}
    if priority is not None:
        p["spec"]["priority"] = priority
    if node_selector:
        p["spec"]["nodeSelector"] = node_selector
    return p


def test_a_deployment_pod_is_inference_owned_by_its_deployment():
    p = with_meta(pod("chat-7d9f8-abcde", "serving", gpus=1, owner=("ReplicaSet", "chat-7d9f8")),
                  labels={"pod-template-hash": "7d9f8"}, priority=1000)
    w = workload_from_pod(p)
    assert (w.name, w.owner, w.workload_class, w.priority) == ("serving/chat-7d9f8-abcde", "chat",
                                                                 WorkloadClass.INFERENCE, 1000)
    assert (w.gpus, w.gpu_milli, w.cpu_milli, w.memory_mib) == (1, 1000, 2000, 8192)


def test_an_elastic_job_pod_is_training_with_its_bounds_and_constraints():
    p = with_meta(pod("train-0", "ml", gpus=2, owner=("Job", "llama-ft")),
                  annotations={"gputide.io/elastic-min": "2", "gputide.io/elastic-max": "8",
                               "gputide.io/gpu-spec": "A100-SXM4-80GB|H100-SXM", "gputide.io/movable": "false"})
    w = workload_from_pod(p)
    assert (w.owner, w.workload_class, w.elastic_min, w.elastic_max) == ("llama-ft", WorkloadClass.TRAINING, 2, 8)
    assert w.allowed_models == frozenset({"A100-SXM4-80GB", "H100-SXM"}) and w.movable is False


@pytest.mark.parametrize(("labels", "annotations", "owner", "expected"), [
    ({"gputide.io/workload-class": "inference", "gputide.io/service": "embed"}, {}, ("StatefulSet", "embed-sts"),
     ("embed", WorkloadClass.INFERENCE)),
    ({}, {}, ("Job", "nightly"), ("nightly", WorkloadClass.BATCH)),
    ({}, {"gputide.io/elastic-max": "not-a-number"}, ("Job", "odd"), ("odd", WorkloadClass.BATCH)),
    ({}, {}, None, ("", WorkloadClass.BATCH)),
], ids=["labels-win", "inelastic-job-is-batch", "bad-annotation-ignored", "bare-pod"])
def test_labels_override_and_odd_pods_fall_back_to_batch(labels, annotations, owner, expected):
    w = workload_from_pod(with_meta(pod("p", gpus=1, owner=owner), labels=labels, annotations=annotations))
    assert (w.owner, w.workload_class) == expected


def test_pods_without_gpus_are_not_workloads():
    assert workload_from_pod(pod("web", gpus=0)) is None


def test_the_provider_lists_running_gpu_pods_once_per_ttl_and_keeps_the_last_answer_when_the_api_fails(
        kube: FakeKube, api, clock):
    kube.add(pod("chat-1", "serving", gpus=1, owner=("Job", "x")))
    kube.add(pod("web", "serving", gpus=0))
    kube.add(pod("done", "serving", gpus=1, phase="Succeeded"))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    assert set(provider()) == {"serving/chat-1"}
    kube.add(pod("chat-2", "serving", gpus=1))
    assert set(provider()) == {"serving/chat-1"}            # within the TTL: no second list
    clock.advance(61)
    assert set(provider()) == {"serving/chat-1", "serving/chat-2"}
    down = kube.inject("GET", r"/pods(\?|$)", 503, count=5)
    kube.add(pod("chat-3", "serving", gpus=1))
    clock.advance(61)
    assert set(provider()) == {"serving/chat-1", "serving/chat-2"}  # API down: the last answer stands
    assert down.remaining == 3                                      # the list and its one retry did fail


def gputide_suspended(name, namespace, annotations, *, label=True, priority=None, gpus=2):
    j = job(name, namespace, parallelism=4, gpus=gpus, suspend=True)
    if label:
        j["metadata"]["labels"]["gputide.io/suspended"] = "true"
    if priority is not None:
        j["metadata"]["annotations"] = {"gputide.io/priority": str(priority)}
    j["spec"]["template"]["metadata"] = {"annotations": annotations}
    return j


def test_only_the_elastic_jobs_gputide_suspended_are_listed_and_the_api_is_asked_once_per_ttl(
        kube: FakeKube, api, clock):
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    kube.inject("GET", r"/jobs", 503, count=2)  # the first try and its one retry
    assert provider.suspended_jobs() is None  # never answered: the planner must not suspend anything
    clock.advance(61)
    elastic = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8", "gputide.io/gpu-spec": "H100-SXM"}
    kube.add(gputide_suspended("llama-ft", "ml", elastic, priority=50))
    kube.add(gputide_suspended("paused-by-a-person", "ml", elastic, label=False))
    kube.add(gputide_suspended("inelastic", "ml", {}))
    assert provider.suspended_jobs() == (SuspendedJob(name="llama-ft", namespace="ml", elastic_min=1, elastic_max=8,
                                                      gpus_per_worker=2, priority=50,
                                                      allowed_models=frozenset({"H100-SXM"})),)
    kube.add(gputide_suspended("later", "ml", elastic))
    assert [j.name for j in provider.suspended_jobs()] == ["llama-ft"]  # within the TTL: no second list
    kube.inject("GET", r"/jobs", 503, count=2)  # the first try and its one retry
    clock.advance(61)
    assert [j.name for j in provider.suspended_jobs()] == ["llama-ft"]  # API down: the last answer stands
    lists = [r for r in kube.requests if r.path.endswith("/jobs")]
    assert len(lists) == 5  # 2 failed tries, 1 answer, none within the TTL, 2 failed tries
    assert all(parse_qs(r.query)["labelSelector"] == ["gputide.io/suspended=true"] for r in lists)


def test_an_owner_name_used_in_two_namespaces_is_qualified_for_every_pod_and_suspended_job(kube: FakeKube, api, clock,
                                                                                           caplog):
    elastic = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}
    hash_ = {"pod-template-hash": "7d9f8"}
    for ns in ("team-a", "team-b"):
        kube.add(with_meta(pod(f"vllm-7d9f8-{ns}", ns, gpus=1, owner=("ReplicaSet", "vllm-7d9f8")), labels=hash_))
    kube.add(with_meta(pod("chat-7d9f8-x", "team-a", gpus=1, owner=("ReplicaSet", "chat-7d9f8")), labels=hash_))
    kube.add(with_meta(pod("train-0", "ml", gpus=1, owner=("Job", "train")), annotations=elastic))
    kube.add(gputide_suspended("train", "research", elastic))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    assert provider.suspended_jobs()[0].name == "train"  # no pods listed yet: nothing to clash with
    owners = {k: w.owner for k, w in provider().items()}
    assert owners == {"team-a/vllm-7d9f8-team-a": "team-a/vllm", "team-b/vllm-7d9f8-team-b": "team-b/vllm",
                      "team-a/chat-7d9f8-x": "chat", "ml/train-0": "ml/train"}
    assert [j.name for j in provider.suspended_jobs()] == ["research/train"]
    clock.advance(61)
    kube.add(with_meta(pod("vllm-7d9f8-extra", "team-a", gpus=1, owner=("ReplicaSet", "vllm-7d9f8")), labels=hash_))
    assert provider()["team-a/vllm-7d9f8-extra"].owner == "team-a/vllm"
    warned = [r for r in caplog.records if "several namespaces" in r.getMessage()]
    assert len(warned) == 1, warned   # said once while the same names clash, not at every new answer
    # the clash ends when one side goes: bare names again
    kube.mutate("pods", "train-0", "ml", {"status": {"phase": "Succeeded"}})
    clock.advance(61)
    assert provider()["team-a/chat-7d9f8-x"].owner == "chat" and "ml/train-0" not in provider()
    assert [j.name for j in provider.suspended_jobs()] == ["train"]


def test_a_node_selector_on_gpu_feature_discoverys_product_label_names_the_catalogue_model():
    """`nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3` is what GPU feature discovery puts on nodes; as a raw name it
    matched no GPU of the fleet, so the planner could place the pod nowhere."""
    p = with_meta(pod("train-0", "ml", gpus=1, owner=("Job", "t")),
                  node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    assert workload_from_pod(p).allowed_models == frozenset({"H100-SXM"})
    odd = with_meta(pod("x", gpus=1), annotations={"gputide.io/gpu-spec": "H100-SXM|Mystery-GPU"})
    assert workload_from_pod(odd).allowed_models == frozenset({"H100-SXM", "Mystery-GPU"})


def _affinity(*terms: list[dict]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": list(t)} for t in terms]}}}


PRODUCT_IN = {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}


@pytest.mark.parametrize(("spec", "models", "movable"), [
    ({"affinity": _affinity([PRODUCT_IN])}, {"H100-SXM"}, True),
    ({"affinity": _affinity([PRODUCT_IN], [{**PRODUCT_IN, "values": ["NVIDIA-A100-SXM4-80GB"]}])},
     {"H100-SXM", "A100-SXM4-80GB"}, True),                                     # terms are ORed: either model
    ({"affinity": _affinity([PRODUCT_IN], [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}])},
     None, True),                                                               # one term allows any model
    ({"nodeSelector": {"kubernetes.io/os": "linux"}}, None, True),             # every node has it
    ({"nodeSelector": {"cloud.google.com/gke-nodepool": "a100-spot"}}, None, True),   # checked against labels
    ({"affinity": _affinity([{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}])},
     None, True),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}}, None, True),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaceSelector": {"matchLabels": {"team": "a"}}}]}}}, None, False),
], ids=["product-affinity", "products-ored", "any-model-term", "os-selector", "pool-selector", "zone-affinity",
        "pod-anti-affinity", "namespace-selector"])
def test_required_placement_rules_give_models_and_only_unreadable_pod_affinity_makes_a_pod_unmovable(
        spec, models, movable):
    """GPU models come from the product label; other labels the planner checks against the nodes' own
    (`node_rules`), pod affinity against where the other pods run (`pod_affinity`). A term that names namespaces
    by their labels cannot be checked (gputide does not read namespaces): such a pod is not movable."""
    p = pod("p", gpus=1, owner=("ReplicaSet", "p-6f7d"))   # a controller recreates it: movable by its rules
    p["spec"].update(spec)
    w = workload_from_pod(p)
    assert w.allowed_models == (frozenset(models) if models else None) and w.movable is movable


def test_disruption_budgets_are_listed_once_per_ttl_and_pods_carry_the_labels_they_select(kube: FakeKube, api,
                                                                                          clock):
    from fakeapi import pdb

    kube.add(pdb("web", "serving", {"app": "web"}, 1))
    kube.add(with_meta(pod("web-1", "serving", gpus=1), labels={"app": "web"}))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    (budget,) = provider.disruption_budgets()
    w = provider()["serving/web-1"]
    assert (budget.name, budget.namespace, budget.disruptions_allowed) == ("web", "serving", 1) and budget.covers(w)
    kube.mutate("poddisruptionbudgets", "web", "serving", {"status": {"disruptionsAllowed": 0}})
    assert provider.disruption_budgets()[0].disruptions_allowed == 1     # within the TTL: no second list
    clock.advance(61)
    assert provider.disruption_budgets()[0].disruptions_allowed == 0
    down = kube.inject("GET", r"/poddisruptionbudgets(\?|$)", 503, count=2)
    clock.advance(61)
    assert provider.disruption_budgets()[0].disruptions_allowed == 0     # API down: the last answer stands
    assert down.remaining == 0


def test_pods_of_a_job_get_its_worker_limit_and_whether_kueue_restarts_it_to_resize(kube: FakeKube, api, clock):
    elastic = {"gputide.io/elastic-min": "2", "gputide.io/elastic-max": "8"}
    finite = job("finite", "ml", parallelism=4, completions=6)   # NonIndexed: completions cannot grow
    finite["status"] = {"succeeded": 3}
    queued = job("queued", "ml", queue="training")
    sliced = job("sliced", "ml", queue="training")
    sliced["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    for j in (finite, queued, sliced, job("plain", "ml")):
        kube.add(j)
        kube.add(with_meta(pod(f"{j['metadata']['name']}-0", "ml", gpus=1, owner=("Job", j["metadata"]["name"])),
                           annotations=elastic))
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    bounds = {w.owner: (w.elastic_min, w.elastic_max, w.restarts_on_resize) for w in got.values()}
    assert bounds == {"finite": (2, 3, False),   # 6 completions, 3 succeeded: at most 3 workers, never 8
                      "queued": (2, 8, True),    # queued through Kueue, not elastic there: a resize restarts it
                      "sliced": (2, 8, False),   # Kueue's elastic-job annotation: resized in place
                      "plain": (2, 8, False)}


@pytest.mark.parametrize(("owner", "movable"), [
    (("ReplicaSet", "web-5c9f"), True), (("Job", "train"), True), (None, False), (("Node", "n1"), False),
], ids=["deployment's", "job's", "bare pod", "static pod"])
def test_only_a_pod_a_controller_recreates_is_movable(owner, movable):
    """Evicting a bare pod (or the mirror of a static pod, which only its kubelet runs) leaves it nowhere to run:
    such a pod is never a migration's candidate, whatever its annotations say."""
    assert workload_from_pod(pod("p", gpus=1, owner=owner)).movable is movable


@pytest.mark.parametrize(("volume", "said", "movable"), [
    ({"name": "cache", "emptyDir": {}}, None, True),
    ({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, None, False),
    ({"name": "data", "persistentVolumeClaim": {"claimName": "data"}}, "true", True),
    ({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}, None, False),
    ({"name": "cache", "emptyDir": {}}, "false", False),
], ids=["emptydir", "claim", "claim-said-movable", "generic-ephemeral", "said-not-movable"])
def test_a_pod_with_a_claim_stays_in_place_unless_it_says_it_may_move(volume, said, movable):
    """A claim may be bound to one zone or node (a zonal disk, a local volume): moved, the replacement would wait for
    a node its disk cannot reach. `workload_from_pod` reads the pod alone, so such a pod is not movable by it;
    `KubernetesWorkloads` reads its claims and the node affinity of the volumes they are bound to and lets it move
    within the nodes they attach to (`with_volumes`, tests/k8s/test_k8s_pvc_migration.py). Its owner may settle it
    either way: `gputide.io/movable: "true"` (network volumes any node mounts) or "false"."""
    p = pod("p", gpus=1, owner=("ReplicaSet", "p-6f7d"))
    p["spec"]["volumes"] = [volume]
    if said is not None:
        p["metadata"]["annotations"] = {"gputide.io/movable": said}
    assert workload_from_pod(p).movable is movable


def test_a_budget_without_a_selector_guards_no_pod_and_an_empty_one_every_pod(kube: FakeKube, api, clock):
    """policy/v1: a null selector selects no pod, `{}` every pod of its namespace. A null one read as `{}` left a
    namespace with no disruption allowed, so the safety guard refused every migration there (the scheduler's
    preemption had the same fault, 7ea7e93)."""
    from fakeapi import pdb

    nothing = pdb("nothing", "serving", {}, 0)
    del nothing["spec"]["selector"]
    kube.add(nothing)
    kube.add(pdb("everything", "serving", {}, 1))
    kube.add(with_meta(pod("web-1", "serving", gpus=1), labels={"app": "web"}))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    (budget,) = provider.disruption_budgets()
    assert budget.name == "everything" and budget.covers(provider()["serving/web-1"])
