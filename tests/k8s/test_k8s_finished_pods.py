"""The pods that ran to their end (Succeeded or Failed) and held a GPU, read from the API for the attribution:
kubelets before 1.34 still list their devices in PodResources (kubernetes#119423), and the controller drops them
(`balancer.telemetry.attribution.attributed`'s `finished`)."""

from __future__ import annotations

from fakeapi import FakeKube, pod

from balancer.actuate.k8s_workloads import KubernetesWorkloads


def mig_pod(name: str, namespace: str, phase: str) -> dict:
    p = pod(name, namespace, gpus=0, phase=phase)
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb": "1"}
    return p


def test_finished_gpu_pods_are_listed_and_running_pending_and_cpu_pods_are_not(kube: FakeKube, api, clock):
    kube.add(pod("serve-0", "ml", gpus=1))
    kube.add(pod("job-done", "ml", gpus=1, phase="Succeeded"))
    kube.add(pod("job-failed", "ml", gpus=2, phase="Failed"))
    kube.add(mig_pod("mig-done", "ml", "Succeeded"))
    kube.add(pod("starting", "ml", gpus=1, phase="Pending"))
    kube.add(pod("cpu-done", "ml", gpus=0, phase="Succeeded"))
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    assert provider.finished_pods() == {"ml/job-done", "ml/job-failed", "ml/mig-done"}
    assert set(provider()) == {"ml/serve-0"}   # the running workloads are as before
    kube.mutate("pods", "serve-0", "ml", {"status": {"phase": "Succeeded"}})
    clock.advance(61)
    assert "ml/serve-0" in provider.finished_pods() and provider() == {}
    provider.close()


def test_finished_pods_are_unknown_until_the_api_answers(kube: FakeKube, api, clock):
    kube.inject("GET", r"/pods(\?|$)", 503, count=10)
    provider = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    assert provider.finished_pods() is None
