"""GPUs allocated through Dynamic Resource Allocation (ResourceClaims, NVIDIA's DRA driver `gpu.nvidia.com`) are
attributed to their pods from the kubelet's PodResources answer (`ContainerResources.dynamic_resources`), over a
real gRPC server that speaks the kubelet's wire format, encoded field by field here: a kubelet without the feature
gate KubeletPodResourcesDynamicResources answers without the field and reads as before."""

from __future__ import annotations

import logging
from concurrent import futures

import grpc
import pytest
from prometheus_client import CollectorRegistry
from test_exporter_podresources import GPUS, _field

from exporters.backends.base import MigInstance
from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.podresources import Allocation, Attributed, PodAttribution, PodResourcesClient

CLAIM_UID = "4f1c2d3e-aaaa-bbbb-cccc-0123456789ab"


def claim_resource(driver: str = "", pool: str = "", device: str = "", cdi: tuple[str, ...] = ()) -> bytes:
    """ClaimResource{1: repeated CDIDevice{1: name}, 2: driver_name, 3: pool_name, 4: device_name}; empty
    strings are left out, as protobuf leaves them out (a kubelet before 1.31 sends only the CDI devices)."""
    return (b"".join(_field(1, _field(1, name.encode())) for name in cdi)
            + b"".join(_field(n, v.encode()) for n, v in ((2, driver), (3, pool), (4, device)) if v))


def dynamic(claim: str, namespace: str, *resources: bytes, class_name: str = "") -> bytes:
    """DynamicResource{1: class_name (kubelets before 1.31), 2: claim_name, 3: claim_namespace, 4: repeated
    ClaimResource}."""
    return ((_field(1, class_name.encode()) if class_name else b"") + _field(2, claim.encode())
            + _field(3, namespace.encode()) + b"".join(_field(4, r) for r in resources))


def answer(pods) -> bytes:
    """ListPodResourcesResponse for [(namespace, pod, [(container, [(resource, [ids])], [DynamicResource])])]."""
    def container(name: str, devices, dynamics) -> bytes:
        body = _field(1, name.encode())
        body += b"".join(_field(2, _field(1, r.encode()) + b"".join(_field(2, d.encode()) for d in ids))
                         for r, ids in devices)
        body += b"".join(_field(5, d) for d in dynamics)
        return _field(3, body)

    return b"".join(_field(1, _field(1, pod.encode()) + _field(2, ns.encode())
                           + b"".join(container(*c) for c in containers)) for ns, pod, containers in pods)


class Kubelet:
    """A PodResources server on a unix socket answering `pods` (`answer`)."""

    def __init__(self, path: str) -> None:
        self.pods: list = []
        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(lambda request, context: answer(self.pods))})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()


@pytest.fixture
def kubelet(tmp_path):
    k = Kubelet(str(tmp_path / "kubelet.sock"))
    yield k, str(tmp_path / "kubelet.sock")
    k.server.stop(0)


def rows(att: PodAttribution, identity=GPUS, mig=None, files=None) -> set[tuple[str, str, str, str]]:
    return {(w.uuid, w.pod, w.gpu_instance_id, w.gpu_instance_profile) for w in att.workloads(identity, mig, files)}


def health(att: PodAttribution, name: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(att)
    return reg.get_sample_value(name)


DEVICE_PLUGIN_POD = ("ml", "dp", [("main", [("nvidia.com/gpu", ["GPU-0aaa"])], [])])


def test_a_dra_claimed_gpu_is_attributed_to_its_pod(kubelet):
    k, sock = kubelet
    k.pods = [DEVICE_PLUGIN_POD,
              ("ml", "train-0", [("main", [], [dynamic("train-0-gpu", "ml", claim_resource(
                  "gpu.nvidia.com", "node-a", "gpu-2", ("k8s.gpu.nvidia.com/device=gpu-2",)))])])]
    client = PodResourcesClient(sock)
    got = [(a.pod, a.resource, a.device_id, a.claim) for a in client.list()]
    assert got == [("dp", "nvidia.com/gpu", "GPU-0aaa", ""), ("train-0", "gpu.nvidia.com", "gpu-2", "ml/train-0-gpu")]
    att = PodAttribution(client)
    assert rows(att) == {("GPU-0aaa", "dp", "", ""), ("GPU-2aaa", "train-0", "", "")}
    assert health(att, "gputide_pod_resources_unmatched_devices") == 0
    client.close()


def test_a_kubelet_without_the_feature_gate_answers_as_before_and_with_it_adds_the_dra_pods(kubelet):
    k, sock = kubelet
    dra = ("ml", "b", [("main", [], [dynamic("b-gpu", "ml", claim_resource("gpu.nvidia.com", "node-a", "gpu-1"))])])
    k.pods = [DEVICE_PLUGIN_POD, ("web", "cpu-only", [("main", [("example.com/fpga", ["f0"])], [])])]
    before = rows(PodAttribution(PodResourcesClient(sock)))
    assert before == {("GPU-0aaa", "dp", "", "")}
    k.pods.append(dra)
    assert rows(PodAttribution(PodResourcesClient(sock))) == before | {("GPU-1aaa", "b", "", "")}


def test_a_kubelet_before_1_31_is_read_through_the_cdi_device_names(kubelet):
    """Kubelets 1.27-1.30 send DynamicResource.class_name (field 1, gone since) and only the CDI devices."""
    k, sock = kubelet
    k.pods = [("ml", "a", [("main", [], [dynamic("a-gpu", "ml", claim_resource(cdi=(
        "k8s.gpu.nvidia.com/device=gpu-1", f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-1")),
        class_name="gpu.nvidia.com")])]),
              ("ml", "b", [("main", [], [dynamic("b-gpu", "ml", claim_resource(cdi=(
                  f"k8s.gpu.nvidia.com/claim={CLAIM_UID}-gpu-3",)))])]),
              ("ml", "c", [("main", [], [dynamic("c-x", "ml", claim_resource(cdi=("vendor.com/gpu=gpudevice1",)))])])]
    att = PodAttribution(PodResourcesClient(sock))
    assert rows(att) == {("GPU-1aaa", "a", "", ""), ("GPU-3aaa", "b", "", "")}   # one row per device, not per CDI name
    assert health(att, "gputide_pod_resources_unmatched_devices") == 0


class Claims:
    """A PodResources client answering DRA allocations (pod, device name[, driver[, claim]])."""

    def __init__(self, *allocations: tuple[str, ...]) -> None:
        self.allocations = [Allocation("ml", a[0], "main", a[2] if len(a) > 2 else "gpu.nvidia.com", a[1],
                                       a[3] if len(a) > 3 else f"ml/{a[0]}-gpu") for a in allocations]

    def list(self) -> list[Allocation]:
        return self.allocations


A100 = "GPU-a100a100-0000-0000-0000-000000000000"
H100 = "GPU-h100h100-0000-0000-0000-000000000001"


def test_dra_gpu_names_are_the_gpus_minor_numbers_not_their_indices():
    """NVIDIA's driver names a GPU gpu-<minor>: on a node whose minors are not in index order the NVML backend's
    device files say which GPU it is."""
    nvml = FakeNvml([FakeDevice(uuid=A100, minor=1), FakeDevice(uuid=H100, minor=0)])
    backend = Attributed(NvmlBackend(nvml, hostname="node-a"), PodAttribution(Claims(("a", "gpu-0"), ("b", "gpu-1"))))
    assert {(w.uuid, w.pod) for w in backend.read().workloads} == {(H100, "a"), (A100, "b")}


def test_a_mig_dra_device_is_attributed_with_its_gpu_instance_where_the_backend_resolves_its_name():
    name = "gpu-0-mig-9-4-4"   # GI profile 9 (3g.40gb on an A100), placement start 4, size 4

    def mig(device: str) -> MigInstance | None:
        return MigInstance(GPUS[0].uuid, 2, "3g.40gb") if device == name else None

    att = PodAttribution(Claims(("a", name), ("b", "gpu-1")))
    assert rows(att, mig=mig) == {("GPU-0aaa", "a", "2", "3g.40gb"), ("GPU-1aaa", "b", "", "")}
    assert health(att, "gputide_pod_resources_unmatched_devices") == 0


def test_a_mig_dra_device_the_backend_cannot_resolve_holds_its_whole_gpu_never_left_free():
    """The NVML backend resolves MIG UUIDs and indices, not DRA names (which carry neither): the GPU the name
    says is held whole (no GPU_I_ID: counted as a whole GPU's share), not left unowned."""
    a100 = FakeDevice(uuid=A100, name="NVIDIA A100-SXM4-80GB", minor=0, arch=8,
                      migs=[FakeMig("MIG-1111", gpu_instance_id=7, profile="1g.10gb")])
    nvml = FakeNvml([a100, FakeDevice(uuid=H100, minor=1)])
    att = PodAttribution(Claims(("a", "gpu-0-mig-19-0-1")))
    backend = Attributed(NvmlBackend(nvml, hostname="node-a"), att)
    assert [(w.uuid, w.pod, w.gpu_instance_id) for w in backend.read().workloads] == [(A100, "a", "")]
    assert health(att, "gputide_pod_resources_unmatched_devices") == 0


def test_unknown_dra_devices_are_counted_unmatched_and_logged_once_other_drivers_ignored(caplog):
    att = PodAttribution(Claims(("a", "gpu-7"),                  # no GPU with minor 7 here
                                ("b", "gpu-vfio-0"),             # passthrough: bound to vfio-pci, NVML does not see it
                                ("c", "gpu-9-mig-9-0-4"),        # a MIG device of no GPU here
                                ("d", "channel-0", "compute-domain.nvidia.com"),   # IMEX channel: not a GPU
                                ("e", GPUS[3].uuid, "gpu.other.example"),          # a driver not configured
                                ("f", "gpu-0")))
    with caplog.at_level(logging.WARNING, logger="exporters.podresources"):
        for _ in range(3):
            assert rows(att) == {("GPU-0aaa", "f", "", "")}
    assert health(att, "gputide_pod_resources_unmatched_devices") == 3
    logged = [r.getMessage() for r in caplog.records if "matches no GPU" in r.getMessage()]
    assert len(logged) == 3 and all("DRA device" in m for m in logged)
    assert any("'gpu-vfio-0'" in m and "ml/b-gpu" in m for m in logged)


def test_a_dra_driver_that_names_devices_by_uuid_is_matched_by_it():
    att = PodAttribution(Claims(("a", GPUS[3].uuid, "gpu.other.example")), dra_drivers=["gpu.other.example"])
    assert rows(att) == {("GPU-3aaa", "a", "", "")}


def test_pods_sharing_one_resource_claim_all_hold_its_gpu():
    """A claim shared by pods (DRA's GPU sharing) is no finished pod's leftover: neither superseded nor contested."""
    now = [0.0]
    client = Claims(("a", "gpu-1", "gpu.nvidia.com", "ml/shared"))
    att = PodAttribution(client, clock=lambda: now[0])
    assert rows(att) == {("GPU-1aaa", "a", "", "")}
    now[0] += 30
    client.allocations += Claims(("b", "gpu-1", "gpu.nvidia.com", "ml/shared")).allocations
    assert rows(att) == {("GPU-1aaa", "a", "", ""), ("GPU-1aaa", "b", "", "")}
    assert health(att, "gputide_pod_resources_superseded_claims") == 0
    assert health(att, "gputide_pod_resources_contested_devices") == 0
