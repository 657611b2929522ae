"""The source's snapshot carries what each service's HPA keeps on its own metrics (`ServiceStatus.hpa_wants`, from
its `hpa_wants` provider: `k8s_hpa_reads.KubernetesHpaWants` under `gputide run --services`), which the capacity
planner lends above; without a provider none is known (None), as before; a provider that has not read the HPAs yet
(None) has every service lend nothing."""

from __future__ import annotations

from balancer.model import Workload, WorkloadClass
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from tests.telemetry.test_telemetry_prometheus_unit import NOW, FakeClient

PODS = [("GPU-a0", "ml", "chat-0", "inference"), ("GPU-a1", "ml", "chat-1", "inference")]
OWNED = {f"ml/{p}": Workload(name=f"ml/{p}", workload_class=WorkloadClass(c), namespace="ml", owner="chat")
         for _, _, p, c in PODS}
SERVING = {"gputide_inference_demand_rps": "12", "gputide_inference_replicas": "5"}


def chat(hpa_wants=None):
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(workloads=PODS, serving=SERVING), clock=lambda: NOW,
                                    workload_overrides=lambda: OWNED, hpa_wants=hpa_wants)
    return src.snapshot().services["chat"]


def test_the_snapshot_carries_what_the_hpa_keeps():
    assert chat().hpa_wants is None
    assert chat(lambda: {"ml/chat": (3, "")}).hpa_wants == 3
    assert chat(lambda: {"other/chat": (3, "")}).hpa_wants is None   # another namespace's HPA: not its
    assert chat(lambda: None).hpa_wants == 5   # not read yet: its replicas, nothing lent
