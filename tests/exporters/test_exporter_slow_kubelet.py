"""A kubelet slow to answer PodResources costs a scrape its pods, never its GPUs.

The kubelet is asked inside the collection, after the NVML read, and was waited for 5 s whatever the collection
timeout: with ``--collect-timeout`` under 5 s and a kubelet that accepts the call and never answers, every
collection outran its timeout, every scrape answered 503 and /readyz blamed NVML. The exporter now waits for the
kubelet at most half the collection timeout (5 s at most); the GPUs are served with ``gputide_pod_resources_up`` 0.
"""

from __future__ import annotations

import argparse
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

from balancer.cmd.exporter import exporter_registry
from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.health import CollectHealth, TrackedCollector

GPUS = (GpuIdentity("0", "GPU-0aaa", "0000:00:00.0", "nvidia0", "NVIDIA H100 80GB HBM3", "node-a"),)
# --collect-timeout 3s: the kubelet is given 1.5 s, the collection's other work the rest. With 1 s (0.5 s left) a
# collection on 2 loaded cores took 0.63 s beside the kubelet's wait already, and outran its timeout once slowed
# 0.4 s more
COLLECT_TIMEOUT_S = 3.0


class Backend:
    identity = GPUS

    def read(self) -> GpuReadings:
        return GpuReadings(identity=GPUS, values={"DCGM_FI_DEV_GPU_TEMP": np.full(1, 50.0)})


@pytest.fixture
def hung_kubelet(tmp_path):
    """A PodResources server that accepts `List` and does not answer until the test ends."""
    release = threading.Event()

    def list_(request: bytes, context) -> bytes:
        release.wait(30)
        return b""

    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(list_, request_deserializer=None, response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), handlers=[handler])
    sock = str(tmp_path / "kubelet.sock")
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    yield sock
    release.set()
    server.stop(0)


def test_a_hung_kubelet_leaves_the_gpus_served_without_their_pods(hung_kubelet):
    args = argparse.Namespace(backend="nvml", pod_resources_socket=hung_kubelet)
    backend, registry = exporter_registry(Backend(), args, COLLECT_TIMEOUT_S)
    health = CollectHealth(collect_timeout_s=COLLECT_TIMEOUT_S, serve_stale_s=0.0)
    scrapes = TrackedCollector(registry, health)
    for _ in range(2):
        body = scrapes.exposition().decode()   # CollectTimeout (a 503) when the kubelet was waited for 5 s
        assert 'DCGM_FI_DEV_GPU_TEMP{' in body
        assert "gputide_pod_resources_up 0.0" in body
        assert "gputide_gpu_workload_info{" not in body
        assert health.ready()[0]
    assert health.timeouts == 0


def test_the_kubelet_is_given_half_the_collection_timeout_and_at_most_5_s():
    from balancer.cmd.exporter import pod_resources_timeout_s

    assert pod_resources_timeout_s(1.0) == 0.5
    assert pod_resources_timeout_s(8.0) == 4.0
    assert pod_resources_timeout_s(60.0) == 5.0
