"""The controller's watches of PersistentVolumeClaims and PersistentVolumes (where a running pod's volumes let it
move, `k8s_claims`) reach its metrics as its other watches do: `gputide_kubernetes_watch_synced` and `_failures`
with resource `persistentvolumeclaims` and `persistentvolumes`. They start with the first cycle that has a running
pod mounting a claim. The watches of finished pods (dropped from the GPU attribution) and of Jobs' failure budgets
report as `finished_pods` and `job_facts`."""

from __future__ import annotations

from fakeapi import FakeKube, claim, pod, volume

from balancer.cmd._run_parts import kubernetes_sources
from balancer.metrics import ControllerMetrics
from tests.k8s.test_k8s_watch import eventually

RESOURCES = ("persistentvolumeclaims", "persistentvolumes")


def test_the_claims_and_volumes_watches_reach_the_controller_metrics(kube: FakeKube, api):
    metrics = ControllerMetrics()

    def sample(name: str, resource: str) -> float | None:
        return metrics.registry.get_sample_value(f"gputide_kubernetes_watch_{name}", {"resource": resource})

    kube.add(volume("pv-ckpt", claim_ref=("default", "ckpt")))
    kube.add(claim("ckpt", volume="pv-ckpt"))
    trainer = pod("train-0", node_name="n0", owner=("Job", "train"))
    trainer["spec"]["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    kube.add(trainer)
    overrides, nodes = kubernetes_sources(api, 30.0, False, metrics)
    try:
        assert [sample("synced", r) for r in RESOURCES] == [0, 0]
        overrides()   # the pods are read, one mounts a claim: the claims and volumes are followed
        eventually(lambda: overrides() is not None and [sample("synced", r) for r in RESOURCES] == [1, 1])
        assert [sample("failures", r) for r in RESOURCES] == [0, 0]
    finally:
        overrides.close()
        nodes.close()


def test_the_finished_pods_and_job_facts_watches_reach_the_controller_metrics(kube: FakeKube, api):
    metrics = ControllerMetrics()
    kube.add(pod("train-0", node_name="n0", owner=("Job", "train")))
    overrides, nodes = kubernetes_sources(api, 30.0, False, metrics)
    try:
        def synced():
            return [metrics.registry.get_sample_value("gputide_kubernetes_watch_synced", {"resource": r})
                    for r in ("finished_pods", "job_facts")]

        assert synced() == [0, 0]
        # the pods and their Jobs are read each cycle, the finished pods as the attribution reads them
        eventually(lambda: (overrides(), overrides.finished_pods(), synced())[2] == [1, 1])
    finally:
        overrides.close()
        nodes.close()
