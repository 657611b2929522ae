"""A pod the API reports Succeeded or Failed holds no GPU, whatever an old kubelet's PodResources still lists
(kubernetes#119423): the Prometheus source asks the workload reader (`KubernetesWorkloads.finished_pods`) and the
attribution drops them, so a finished Job's GPU reads idle and its pod is never planned as running."""

from __future__ import annotations

from test_telemetry_prometheus_unit import NOW, FakeClient

from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource


class Reader:
    """What the source needs of KubernetesWorkloads: called for the running pods, asked for the finished ones."""

    def __init__(self, finished):
        self.finished = finished

    def __call__(self):
        return {}

    def finished_pods(self):
        return self.finished


def snapshot(finished):
    pods = [("GPU-a0", "ml", "done-0", "batch"), ("GPU-a1", "ml", "serve-0", "inference")]
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                     client=FakeClient(workloads=pods), clock=lambda: NOW,
                                     workload_overrides=Reader(finished)).snapshot()


def test_a_finished_pod_still_listed_by_the_kubelet_holds_no_gpu():
    snap = snapshot(frozenset({"ml/done-0"}))
    assert "ml/done-0" not in snap.placements and "ml/done-0" not in snap.workload_by_name
    assert snap.placements["ml/serve-0"] == (1,)


def test_before_the_api_has_answered_every_attributed_pod_counts():
    assert snapshot(None).placements["ml/done-0"] == (0,)
