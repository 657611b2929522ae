"""Pods attributed to GPUs from the kubelet's PodResources API, over a real gRPC server on a unix socket that
speaks the kubelet's wire format (its messages encoded field by field, independent of the exporter's own)."""

from __future__ import annotations

from concurrent import futures

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.podresources import Attributed, PodAttribution, PodResourcesClient

GPUS = tuple(GpuIdentity(str(i), f"GPU-{i}aaa", f"0000:{i:02x}:00.0", f"nvidia{i}", "NVIDIA H100 80GB HBM3", "node-a")
             for i in range(4))


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand: the test's encoder shares nothing with the exporter."""
    key, n = (number << 3) | 2, len(payload)
    out = bytearray([key])
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out) + payload


def answer(pods) -> bytes:
    """ListPodResourcesResponse for [(namespace, pod, [(container, resource, [device ids])])]."""
    def container(name: str, resource: str, ids: list[str]) -> bytes:
        devices = _field(1, resource.encode()) + b"".join(_field(2, d.encode()) for d in ids)
        return _field(3, _field(1, name.encode()) + _field(2, devices))

    return b"".join(_field(1, _field(1, pod.encode()) + _field(2, ns.encode())
                           + b"".join(container(*c) for c in containers)) for ns, pod, containers in pods)


class Kubelet:
    """A PodResources server on a unix socket; `pods` is what it answers, `fail` makes it refuse."""

    def __init__(self, path: str) -> None:
        self.pods, self.fail, self.calls = [], False, 0

        def list_(request: bytes, context) -> bytes:
            self.calls += 1
            if self.fail:
                context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
            return answer(self.pods)

        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(list_, request_deserializer=None, response_serializer=None)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def stop(self) -> None:
        # waited for: gRPC unlinks the socket file as its shutdown ends, which otherwise may come after the next
        # kubelet of a restart test has bound the same path, and delete that kubelet's socket
        self.server.stop(0).wait()


@pytest.fixture
def kubelet(tmp_path):
    k = Kubelet(str(tmp_path / "kubelet.sock"))
    yield k, str(tmp_path / "kubelet.sock")
    k.stop()


class Backend:
    identity = GPUS

    def read(self) -> GpuReadings:
        return GpuReadings(identity=GPUS, values={"DCGM_FI_DEV_GPU_TEMP": np.full(4, 50.0)})


def test_allocations_are_read_over_grpc(kubelet):
    k, sock = kubelet
    k.pods = [("ml", "train-0", [("main", "nvidia.com/gpu", ["GPU-0aaa", "GPU-1aaa"]), ("side", "cpu", ["x"])])]
    client = PodResourcesClient(sock)
    got = [(a.namespace, a.pod, a.container, a.resource, a.device_id) for a in client.list()]
    client.close()
    assert got == [("ml", "train-0", "main", "nvidia.com/gpu", "GPU-0aaa"),
                   ("ml", "train-0", "main", "nvidia.com/gpu", "GPU-1aaa"), ("ml", "train-0", "side", "cpu", "x")]


def test_uuid_shared_replica_and_index_ids_name_this_nodes_gpus_and_the_rest_are_counted(kubelet):
    k, sock = kubelet
    k.pods = [("ml", "a", [("c", "nvidia.com/gpu", ["GPU-0aaa"])]),
              ("web", "b", [("c", "nvidia.com/gpu", ["GPU-1aaa::0", "GPU-1aaa::3"])]),   # time-sliced twice
              ("web", "c", [("c", "nvidia.com/gpu", ["2"])]),                             # index strategy
              ("ml", "d", [("c", "nvidia.com/gpu", ["MIG-9f", "GPU-other"])]),            # not ours
              ("ml", "e", [("c", "example.com/fpga", ["GPU-3aaa"])])]                     # another resource
    att = PodAttribution(PodResourcesClient(sock))
    got = [(w.uuid, w.namespace, w.pod, w.workload_class) for w in att.workloads(GPUS)]
    assert got == [("GPU-0aaa", "ml", "a", "unknown"), ("GPU-1aaa", "web", "b", "unknown"),
                   ("GPU-2aaa", "web", "c", "unknown")]
    reg = CollectorRegistry()
    reg.register(att)
    assert reg.get_sample_value("gputide_pod_resources_up") == 1
    assert reg.get_sample_value("gputide_pod_resources_unmatched_devices") == 2


def test_the_exporter_publishes_the_join_table_from_the_kubelet(kubelet):
    k, sock = kubelet
    k.pods = [("ml", "train-0", [("main", "nvidia.com/gpu", ["GPU-0aaa", "GPU-3aaa"])])]
    reg = CollectorRegistry()
    reg.register(GpuCollector(Attributed(Backend(), PodAttribution(PodResourcesClient(sock)))))
    text = generate_latest(reg).decode()
    rows = sorted(line.split("{", 1)[1].split("}")[0] for line in text.splitlines()
                  if line.startswith("gputide_gpu_workload_info{"))
    assert len(rows) == 2 and all('namespace="ml"' in r and 'pod="train-0"' in r for r in rows)
    assert {r.split('UUID="')[1].split('"')[0] for r in rows} == {"GPU-0aaa", "GPU-3aaa"}


def test_a_silent_kubelet_keeps_the_last_answer_for_the_grace_period_then_drops_it(kubelet):
    k, sock = kubelet
    now = [1000.0]
    k.pods = [("ml", "a", [("c", "nvidia.com/gpu", ["GPU-0aaa"])])]
    att = PodAttribution(PodResourcesClient(sock, timeout_s=2), grace_s=60, clock=lambda: now[0])
    assert len(att.workloads(GPUS)) == 1
    k.fail = True
    now[0] += 30
    assert len(att.workloads(GPUS)) == 1 and not att._up   # within the grace period: the last answer
    now[0] += 31
    assert len(att.workloads(GPUS)) == 1   # 61 s since the last answer, 31 since the first failure: counted from it
    now[0] += 30
    assert att.workloads(GPUS) == ()                         # past it: no attribution rather than a frozen one
    reg = CollectorRegistry()
    reg.register(att)
    assert reg.get_sample_value("gputide_pod_resources_up") == 0
    assert reg.get_sample_value("gputide_pod_resources_last_success_timestamp_seconds") == 1000.0
    k.fail = False
    assert len(att.workloads(GPUS)) == 1 and att._up


def test_no_socket_means_no_attribution_and_up_0_not_a_failed_scrape(tmp_path):
    att = PodAttribution(PodResourcesClient(str(tmp_path / "missing.sock"), timeout_s=0.5))
    reg = CollectorRegistry()
    reg.register(GpuCollector(Attributed(Backend(), att)))
    reg.register(att)
    text = generate_latest(reg).decode()
    assert "gputide_gpu_workload_info{" not in text and "DCGM_FI_DEV_GPU_TEMP{" in text
    assert reg.get_sample_value("gputide_pod_resources_up") == 0


def test_the_cli_flag_needs_the_nvml_backend(capsys):
    from balancer.cli import main

    assert main(["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1",
                 "--pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock"]) == 2
    err = capsys.readouterr().err
    assert "--pod-resources-socket" in err and "--backend nvml" in err


def test_the_cli_wraps_the_nvml_backend_and_registers_the_health_series(kubelet):
    import argparse

    from balancer.cmd.exporter import exporter_registry

    k, sock = kubelet
    k.pods = [("ml", "a", [("c", "nvidia.com/gpu", ["GPU-2aaa"])])]
    backend, reg = exporter_registry(Backend(), argparse.Namespace(backend="nvml", pod_resources_socket=sock))
    assert reg.get_sample_value("gputide_gpu_workload_info", {
        "UUID": "GPU-2aaa", "namespace": "ml", "pod": "a", "workload_class": "unknown"}) == 1
    assert reg.get_sample_value("gputide_pod_resources_up") == 1
    assert backend.identity == GPUS   # everything else is the wrapped backend's
