"""Kueue quota shifting in a heterogeneous cluster, against the fake API server: the GPU quota that moves when a
queued training Job is scaled is that of the ResourceFlavor Kueue admitted the Job under (its Workload), never
merely the first one; a Job not admitted yet needs one common flavor; every refusal changes nothing; and
`gputide run --kueue-queues` (validated) is what turns it on, as the capacity overlay shows."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from fakeapi import ApiError, FakeKube, clusterqueue, job, multi_flavor_clusterqueue, workload

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_kueue import admitted_flavor, choose_flavor
from balancer.errors import PermanentActuationError
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

ROOT = Path(__file__).resolve().parents[2]
SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
GPU = "nvidia.com/gpu"


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def gpu_quota(kube: FakeKube, queue: str) -> dict[str, int]:
    """{flavor: GPU nominalQuota} of a ClusterQueue as stored."""
    cq = kube.get("clusterqueues", queue)
    return {fl["name"]: res["nominalQuota"] for group in cq["spec"]["resourceGroups"] for fl in group["flavors"]
            for res in fl["resources"] if res["name"] == GPU}


def heterogeneous(kube: FakeKube, training: dict[str, int] | None = None) -> None:
    """Inference and training ClusterQueues of cohort `tide`, h100 listed before a100 in both."""
    kube.add(multi_flavor_clusterqueue("inference", "tide", {"h100": 16, "a100": 16}))
    kube.add(multi_flavor_clusterqueue("training", "tide", training or {"h100": 8, "a100": 8}))


def queued_job(kube: FakeKube, parallelism: int = 4, suspend: bool = False) -> dict:
    """ml/train, queued through Kueue, 2 GPUs per worker; the stored object (with its uid)."""
    return kube.add(job("train", "ml", parallelism=parallelism, gpus=2, queue="training-lq", suspend=suspend))


def scale(actuator: KubernetesActuator, workers: int, previous: int = 4):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


# ---- the admitted flavor moves, the others stay ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "inference", "training"),
    [
        pytest.param(6, {"h100": 16, "a100": 12}, {"h100": 8, "a100": 12},
                     id="growing a Job admitted under a100 lends a100 quota, h100 listed first stays"),
        pytest.param(2, {"h100": 16, "a100": 20}, {"h100": 8, "a100": 4},
                     id="shrinking it gives a100 quota back, h100 stays"),
    ],
)
def test_the_admitted_flavor_moves_and_the_other_stays(kube: FakeKube, actuator, workers, inference,
                                                        training) -> None:
    heterogeneous(kube)
    kube.add(workload(queued_job(kube), "a100"))
    result = scale(actuator, workers)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == (inference, training)
    assert "kueue quota 4 x nvidia.com/gpu (a100)" in result.detail


def test_a_workload_without_the_job_uid_label_is_found_by_its_owner_reference(kube: FakeKube, actuator) -> None:
    heterogeneous(kube)
    train = queued_job(kube)
    kube.add(workload(train, "a100", label=False))
    other = kube.add(job("other", "ml", queue="training-lq"))
    kube.add(workload(other, "h100", label=False))   # another Job's Workload in the same namespace: not this one's
    assert scale(actuator, 6).outcome is Outcome.APPLIED
    assert gpu_quota(kube, "training") == {"h100": 8, "a100": 12}


def test_an_admitted_flavor_a_queue_lacks_fails_and_changes_nothing(kube: FakeKube, actuator) -> None:
    heterogeneous(kube, training={"h100": 8})
    kube.add(workload(queued_job(kube), "a100"))
    result = scale(actuator, 2)   # a shrink would patch the Job first: the flavor is checked before that
    assert result.outcome is Outcome.FAILED
    assert "flavor a100" in result.detail and "training (h100)" in result.detail
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 16, "a100": 16}, {"h100": 8})
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 4
    assert not kube.calls("PATCH", r"/clusterqueues/")


# ---- not admitted yet: one common flavor, or a refusal ---------------------------------------------------------------


def test_a_job_not_admitted_yet_grows_in_the_one_flavor_both_queues_hold(kube: FakeKube, actuator) -> None:
    kube.add(multi_flavor_clusterqueue("inference", "tide", {"h100": 16, "a100": 16}))
    kube.add(multi_flavor_clusterqueue("training", "tide", {"a100": 8}))
    kube.add(workload(queued_job(kube, parallelism=0, suspend=True)))   # queued, no admission
    result = scale(actuator, 2, previous=0)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 16, "a100": 12}, {"a100": 12})
    spec = kube.get("jobs", "train", "ml")["spec"]
    # Kueue owns a queued Job's suspend: gputide sizes it and leaves it suspended until Kueue admits it (a
    # `suspend: false` sent now would be undone, the Workload not being admitted)
    assert (spec["parallelism"], spec["suspend"]) == (2, True)
    assert all("suspend" not in r.body["spec"] for r in kube.calls("PATCH", r"/jobs/train$"))
    admitted = workload(kube.get("jobs", "train", "ml"), "a100")
    kube.mutate("workloads", admitted["metadata"]["name"], "ml", {"status": admitted["status"]})
    assert kube.get("jobs", "train", "ml")["spec"]["suspend"] is False   # admitted: Kueue starts it


def test_a_job_not_admitted_yet_with_two_common_flavors_is_refused_and_nothing_changes(kube: FakeKube,
                                                                                       actuator) -> None:
    heterogeneous(kube)
    kube.add(workload(queued_job(kube, parallelism=0, suspend=True)))
    result = scale(actuator, 2, previous=0)
    assert result.outcome is Outcome.FAILED
    assert ("not admitted yet" in result.detail and "h100, a100" in result.detail
            and "refusing to guess" in result.detail)
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 16, "a100": 16},
                                                                           {"h100": 8, "a100": 8})
    assert kube.get("jobs", "train", "ml")["spec"]["suspend"] is True
    assert not kube.calls("PATCH", r"/(clusterqueues|jobs)/")


def test_shift_kueue_quota_without_a_flavor_refuses_to_pick_among_several(kube: FakeKube, actuator) -> None:
    heterogeneous(kube)
    with pytest.raises(PermanentActuationError, match="2 nvidia.com/gpu flavors in common"):
        actuator.shift_kueue_quota("inference", "training", 4)
    assert gpu_quota(kube, "training") == {"h100": 8, "a100": 8}


# ---- failures --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "message", "lender_patches"),
    [
        pytest.param("PATCH", r"/clusterqueues/training(\?|$)", "403", 2,
                     id="a failed borrower update restores the lender's admitted flavor (lowered, then restored)"),
        pytest.param("GET", r"/workloads(\?|$)", "workloads of job ml/train", 0,
                     id="unreadable workloads fail the action before anything changes"),
    ],
)
def test_a_failure_leaves_quota_and_job_as_they_were(kube: FakeKube, actuator, method, path, message,
                                                     lender_patches) -> None:
    heterogeneous(kube)
    kube.add(workload(queued_job(kube), "a100"))
    kube.inject(method, path, 403)
    result = scale(actuator, 6)
    assert result.outcome is Outcome.FAILED and message in result.detail
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 16, "a100": 16},
                                                                           {"h100": 8, "a100": 8})
    assert len(kube.calls("PATCH", r"/clusterqueues/inference$")) == lender_patches
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 4


def test_a_shrink_whose_quota_cannot_go_back_is_still_applied_and_says_so(kube: FakeKube, actuator) -> None:
    """The Job is smaller (its workers stopped) before the quota goes back: a failure there (RBAC drift, a webhook
    on ClusterQueues) does not undo the shrink. Reported failed, the loop's budgets never counted the stopped workers
    and the planner thought the job still ran them; it is applied, with the quota's loss in its detail."""
    heterogeneous(kube)
    kube.add(workload(queued_job(kube), "a100"))
    kube.inject("PATCH", r"/clusterqueues/", 403, count=10)
    result = scale(actuator, 2)
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 2
    assert result.outcome is Outcome.APPLIED and "quota NOT given back to inference (4 GPUs)" in result.detail
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 16, "a100": 16},
                                                                           {"h100": 8, "a100": 8})


def test_a_single_flavor_cohort_still_shifts_without_any_workload(kube: FakeKube, actuator) -> None:
    """The homogeneous setup of before: no Workload yet (Kueue has not seen the Job), one flavor each."""
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    queued_job(kube)
    assert scale(actuator, 6).outcome is Outcome.APPLIED
    assert (gpu_quota(kube, "inference"), gpu_quota(kube, "training")) == ({"h100": 12}, {"h100": 12})


def test_the_fake_validates_workloads_and_selects_them_by_the_job_uid_label(kube: FakeKube, api) -> None:
    from kubernetes import client as k8s

    train = queued_job(kube)
    broken = workload(train, "a100")
    del broken["status"]["admission"]["clusterQueue"]
    with pytest.raises(ApiError, match="Workload is invalid"):
        kube.add(broken)
    kube.add(workload(train, "a100"))
    kube.add(workload(kube.add(job("other", "ml")), "h100"))
    listed = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", "ml", "workloads",
        label_selector=f"kueue.x-k8s.io/job-uid={train['metadata']['uid']}")
    assert [w["metadata"]["ownerReferences"][0]["name"] for w in listed["items"]] == ["train"]


# ---- the decision alone ----------------------------------------------------------------------------------------------


QUEUES = {"inference": multi_flavor_clusterqueue("inference", "tide", {"h100": 1, "a100": 1}),
          "training": multi_flavor_clusterqueue("training", "tide", {"a100": 1, "l4": 1})}


@pytest.mark.parametrize(
    ("queues", "admitted", "expected"),
    [
        pytest.param(QUEUES, "a100", "a100", id="the admitted flavor, held by both"),
        pytest.param(QUEUES, None, "a100", id="not admitted: the one flavor both hold, whatever its position"),
        pytest.param(QUEUES, "h100", "clusterqueue training (a100, l4) has no", id="admitted where one queue has none"),
        pytest.param({**QUEUES, "training": QUEUES["inference"]}, None, "2 nvidia.com/gpu flavors in common",
                     id="not admitted, two in common: refused"),
        pytest.param({**QUEUES, "training": multi_flavor_clusterqueue("training", "tide", {"l4": 1})}, None,
                     "0 nvidia.com/gpu flavors in common", id="not admitted, none in common: refused"),
    ],
)
def test_choose_flavor(queues, admitted, expected) -> None:
    if expected in ("a100", "h100"):
        assert choose_flavor(queues, admitted, GPU) == expected
    else:
        with pytest.raises(PermanentActuationError, match=expected.replace("(", r"\(").replace(")", r"\)")):
            choose_flavor(queues, admitted, GPU)


def test_a_job_admitted_under_two_gpu_flavors_is_refused() -> None:
    train = {"metadata": {"name": "train", "namespace": "ml", "uid": "u1", "labels": {}},
             "spec": {"parallelism": 2, "template": {}}}
    wl = workload(train, "a100")
    wl["status"]["admission"]["podSetAssignments"].append({"name": "launcher", "flavors": {GPU: "h100"}})
    with pytest.raises(PermanentActuationError, match="flavors a100, h100"):
        admitted_flavor([wl], GPU, "ml/train")
    assert admitted_flavor([workload(train)], GPU, "ml/train") is None


# ---- gputide run --kueue-queues --------------------------------------------------------------------------------------


def run_args(*extra: str) -> list[str]:
    return ["run", "--prometheus", "http://127.0.0.1:9", "--once", "--metrics-port", "0", *extra]


def test_the_flag_reaches_the_actuator_which_shifts_the_admitted_flavor(kube: FakeKube, kubeconfig) -> None:
    from balancer.cli import build_parser
    from balancer.cmd.run import build_reconciler
    from balancer.metrics import ControllerMetrics

    args = build_parser().parse_args(run_args("--kubeconfig", kubeconfig, "--kueue-queues", "inference,training"))
    actuator = build_reconciler(args, ControllerMetrics()).actuator
    assert isinstance(actuator, KubernetesActuator) and actuator.kueue_queues == ("inference", "training")
    heterogeneous(kube)
    kube.add(workload(queued_job(kube), "a100"))
    assert scale(actuator, 6).outcome is Outcome.APPLIED
    assert gpu_quota(kube, "training") == {"h100": 8, "a100": 12}
    dry = build_reconciler(build_parser().parse_args(run_args("--dry-run", "--kueue-queues", "a,b")),
                           ControllerMetrics())
    assert type(dry.actuator).__name__ == "DryRunActuator"   # accepted; a dry run changes no quota


@pytest.mark.parametrize("value", ["inference", "inference,inference", "a,b,c", "inference,", ",training",
                                   "Inference,training", "inference training", ""])
def test_a_bad_kueue_queues_value_exits_2_naming_the_flag(value, capsys) -> None:
    from balancer.cli import main

    try:
        code = main(run_args("--kueue-queues", value))
    except SystemExit as stop:   # an empty value is refused as the command line is read (_args.given)
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err
    assert "--kueue-queues" in err and repr(value) in err and "ClusterQueue names" in err


def test_the_capacity_overlays_commented_kueue_patch_renders_and_parses(tmp_path) -> None:
    """The patch deploy/overlays/capacity shows commented out, uncommented over the overlay as a user would: it
    renders and the controller's arguments pass the real CLI, --kueue-queues included."""
    from balancer.cli import build_parser
    from balancer.cmd.run import kueue_queues

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) not on PATH")
    overlay = ROOT / "deploy" / "overlays" / "capacity"
    text = (overlay / "kustomization.yaml").read_text()
    commented = text[text.index("# patches:"):].splitlines()
    assert all(line.startswith("#") for line in commented)
    patches = yaml.safe_load("\n".join(line[2:] for line in commented))["patches"]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(overlay, tmp_path)], "patches": patches}))
    out = subprocess.run([kubectl, "kustomize", str(tmp_path)], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    controller = next(d for d in yaml.safe_load_all(out)
                      if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "gputide-controller")
    args = [a.replace("$(POD_NAMESPACE)", "gputide")
            for a in controller["spec"]["template"]["spec"]["containers"][0]["args"]]
    parsed = build_parser().parse_args(args)
    assert parsed.services and kueue_queues(parsed.kueue_queues) == ("inference", "training")


def test_resizing_a_running_queued_job_says_kueue_restarts_it_unless_it_is_elastic_for_kueue(kube: FakeKube,
                                                                                           actuator) -> None:
    heterogeneous(kube)
    kube.add(workload(queued_job(kube), "a100"))
    result = scale(actuator, 6)
    assert result.outcome is Outcome.APPLIED and "Kueue restarts the whole Job to resize it" in result.detail
    kube.mutate("jobs", "train", "ml", {"metadata": {"annotations": {"kueue.x-k8s.io/elastic-job": "true"}}})
    result = scale(actuator, 8, previous=6)
    assert result.outcome is Outcome.APPLIED and "restarts" not in result.detail, result.detail
