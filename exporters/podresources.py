"""Which pod holds which GPU, from the kubelet's PodResources API: the exporter's `gputide_gpu_workload_info`.

NVML knows the GPUs and the processes on them, not the pods. The kubelet does: its PodResources gRPC service
(`v1.PodResourcesLister/List`, on the node's `/var/lib/kubelet/pod-resources/kubelet.sock`, stable since
Kubernetes 1.28) lists, for every pod and container, the device IDs the device plugin allocated to it. NVIDIA's
device plugin names a GPU by its UUID (`GPU-...`); with time-slicing or MPS sharing each replica is the UUID with
a `::N` suffix; with `--device-id-strategy=index` it is the GPU's index. GKE's device plugin names it by its device
file (`nvidia<minor>`: the NVML backend's `device_files`, which need not be the `device` label's index; without
them, the `device` label), a time-shared one `nvidia<minor>/vgpu<k>`. dcgm-exporter attributes pods the same way.
Without this join table the controller sees every GPU of a real node as idle: it can throttle a hot GPU but not
move what runs on it, and capacity shifting counts no replica.

MIG devices are attributed to the GPU they are carved from, with dcgm-exporter's `GPU_I_ID` and `GPU_I_PROFILE`
labels for the GPU instance. The device plugin lists them under `nvidia.com/gpu` (MIG strategy "single") or
`nvidia.com/mig-<profile>` ("mixed"; shared with `renameByDefault`, `nvidia.com/gpu.shared` and
`nvidia.com/mig-<profile>.shared`), by MIG UUID (`MIG-<uuid>`, drivers R470 and newer) or, with the index
strategy, `<gpu index>:<mig index>`; those the backend resolves through NVML (`Backend.mig_instance`,
`exporters.backends.nvml_mig`). Two forms carry their GPU and are read here: R450/R460's
`MIG-GPU-<uuid>/<gi>/<ci>` and GKE's `nvidia<n>/gi<gi>`. The profile is NVML's, else the mixed strategy's resource
name's, else left out.

GPUs allocated through Dynamic Resource Allocation (ResourceClaims; NVIDIA's DRA driver, `gpu.nvidia.com`) are in
the same answer, under each container's `dynamic_resources` (`ContainerResources` field 5), where the kubelet lists
them with its feature gate `KubeletPodResourcesDynamicResources` (alpha since 1.27, off by default; beta and on by
default since 1.34); without it the field is absent and the answer reads as before. Each `ClaimResource` names its
device by driver, pool and device name (fields 2-4, kubelets 1.31 and newer) and lists its CDI devices (field 1).
NVIDIA's driver names a whole GPU `gpu-<minor>` (the N of /dev/nvidia<N>, matched here through the NVML backend's
`device_files` like GKE's names; releases before kubernetes-sigs/dra-driver-nvidia-gpu#428, mid-2025, used the NVML
index, which is the same GPU wherever minor and index agree) and a MIG device
`gpu-<minor>-mig-<GI profile id>-<placement start>-<placement size>`; its CDI devices are
`k8s.gpu.nvidia.com/device=<that name>` and `k8s.gpu.nvidia.com/claim=<claim UID>-<that name>`. A kubelet that gives
no device name (before 1.31) is read through the CDI names. NVIDIA's names carry no UUID (the driver's
ResourceSlices do, as the `uuid` attribute dcgm-exporter reads; the exporter reads no API objects: no RBAC); another
driver's name that carries one is matched by it. A MIG device's name says its GPU and its GPU instance's profile
and placement, not its GPU instance ID: the backend's `mig_instance` is asked the name (the NVML backend finds the
GPU instance at that placement, `exporters.backends.nvml_mig`) and gives its `GPU_I_ID` and `GPU_I_PROFILE` as for
a device plugin's MIG device. Where it cannot (NVML refuses to list GPU instances, no instance lies there, a backend
without MIG) the pod is attributed to the whole GPU without `GPU_I_ID`, which the controller counts as holding a
whole GPU's share (never as free), and the device is counted in `gputide_pod_resources_unresolved_mig_devices`; so is
a device plugin's `<gpu index>:<mig index>` on a GPU whose read is stuck in NVML (not asked: the call would hang the
collection), rather than left unattributed, which reads its GPU instance as free. A MIG UUID the backend has not seen
on a GPU while some GPU is stuck (`MIG_GPU_UNKNOWN`: it may lie there) has no GPU to hold: it is left out of the
rows and counted in that gauge too, not as unmatched (which says "on no GPU of this node").
Pods sharing one ResourceClaim all hold its device (DRA claims are never superseded, below). DRA devices of other
drivers (`compute-domain.nvidia.com`'s IMEX channels) are ignored; those of `gpu.nvidia.com` no GPU here matches (a
`gpu-vfio-<n>` passthrough GPU, which NVML does not see) are counted unmatched.

* `PodResourcesClient(socket)`: one `List` call over gRPC (`grpcio`), with the request and answer messages defined
  here (`_messages`): only the fields gputide reads, by their numbers in the kubelet's API (protobuf skips the
  rest, so newer kubelets with more fields answer the same, and older ones without a field answer it empty).
* `PodAttribution(client, grace_s)`: turns the answer into `WorkloadInfo`s for this node's GPUs. If the kubelet
  does not answer (restarting, socket not mounted, permission denied), the last answer is kept, then dropped, so a
  lasting outage shows as GPUs without pods rather than frozen pods. The rule, on a monotonic clock (an NTP step
  moves no grace), each collection timed from its own start (`PodAttribution.began`): T is the start of the first
  silent collection begun after another silent one had completed (`CollectHealth.last_complete`; rendered without
  `CollectHealth`, the first silent one). The pods are dropped at a silent collection begun more than `grace_s`
  after T, or at any from T on where the kept answer was already older than `grace_s` + the longest of `grace_s`,
  `--serve-stale-for` and `--collect-timeout` when the outage began (`_carried_for_s`: no collection reached the
  kubelet for that long, and its pods, some gone, would be billed `grace_s` longer); never at the outage's first.
  The promise: a scraper answered at least every `grace_s` (each Prometheus of an HA pair alone) gets a scrape with
  `gputide_pod_resources_up` 0 and the pods before they go, so up 0 is written before their stale markers, which
  remote write's shards may deliver seconds ahead of a sample of the same scrape (the controller, reading the pods
  with up 0, would see the GPUs free). From T on every answer is a collection of this outage (`exporters.health`),
  and such a scraper's last one before the drop came after T; an answer that old reached no such scraper (a scrape
  carries a collection at most that longest after it began). A failed scrape (503, 500) carries nothing: Prometheus
  marks every series stale at once. It also collects its own health: `gputide_pod_resources_up`,
  `gputide_pod_resources_last_success_timestamp_seconds` and `gputide_pod_resources_unmatched_devices` (device IDs
  of a GPU or MIG resource, and DRA devices of a GPU driver, that match no GPU of this exporter: another node's, a
  MIG device NVML does not know, an ID format or device name not known here; each logged once).
* Pods that have finished: kubelets list a pod's devices until the pod object is gone, Succeeded and Failed ones
  included (kubernetes#119423; newer kubelets leave terminal pods out), and `List` says nothing
  of a pod's phase, UID or start. So a GPU whose Job pod completed still names that pod, and once the device plugin
  hands the device to a new pod, both claim it. The device manager gives a device to a new pod only once its holder
  is done with it, and the exporter asks the kubelet at every scrape: of the pods claiming one device ID (exactly:
  a time-sliced replica's ID is its own; DRA devices are left out: pods sharing a ResourceClaim share its device,
  and the DRA manager gives a device to one claim at a time), the claim this exporter saw appear last is the
  holder, the older claims are dropped (counted in `gputide_pod_resources_superseded_claims`). What is remembered is
  when each claim (namespace, pod, resource, device ID) first appeared, not each pod: a StatefulSet pod deleted and
  re-created between two scrapes keeps its name, and its new claim on a finished pod's device is the newer one
  (remembered per pod, the name seen before made it the older claimant and it vanished from the GPU). "When" is the
  number of the kubelet answer it first appeared in, never a clock, so a wall clock stepped back (NTP) cannot make
  a new claim look older. Claims that appeared in the same answer (all of them, the first time the exporter asks)
  cannot be told apart: all keep the device, counted in `gputide_pod_resources_contested_devices`. A finished pod
  whose device nobody has claimed since still holds it here; telling that needs the pod's phase from the API
  server, which the exporter does not read (no RBAC): the controller does, and counts no finished pod as holding a
  GPU (`KubernetesWorkloads.finished_pods`).
* `Attributed(backend, attribution)`: any backend whose readings gain the workloads (the NVML backend has none),
  with the backend's `mig_instance` to resolve MIG devices where it has one.

The workload class is not in the kubelet's answer: the series carry `workload_class="unknown"`, and the
controller, which reads the pods from the API server, classifies them (its `KubernetesWorkloads` replaces what the
join table says of a pod by what the API says).
"""

from __future__ import annotations

import logging
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from prometheus_client.core import GaugeMetricFamily

from exporters.backends.base import MIG_GPU_UNKNOWN, GpuIdentity, GpuReadings, MigLookup, WorkloadInfo
from exporters.backends.nvml_mig import gpu_instance_profile
from exporters.health import CollectHealth, current_collection

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# the second: time-slicing or MPS with `renameByDefault: true` (a shared MIG device: nvidia.com/mig-<profile>.shared)
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"   # the device plugin's MIG strategy "mixed": nvidia.com/mig-1g.10gb, ...
LIST_METHOD = "/v1.PodResourcesLister/List"
UNKNOWN_CLASS = "unknown"
_SHARED_REPLICA = re.compile(r"(::|/vgpu)\d+$")   # time-slicing / MPS: GPU-<uuid>::<k>, GKE's /vgpu<k>
_OLD_MIG = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/\d+$")   # drivers R450/R460: MIG-<GPU UUID>/<GI>/<CI>
_GKE_MIG = re.compile(r"^(nvidia\d+)/gi(\d+)$")         # GKE's device plugin: nvidia<minor>/gi<GI>
DRA_GPU_DRIVERS = ("gpu.nvidia.com",)   # NVIDIA's DRA driver for GPUs (its compute-domain driver's are no GPUs)
_DRA_GPU = re.compile(r"^gpu-(\d+)$")                                    # gpu-<minor>
_DRA_MIG = re.compile(r"^gpu-(\d+)-mig-\d+-\d+-\d+$")                    # gpu-<minor>-mig-<profile>-<start>-<size>
_CDI_CLAIM_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-")


@cache
def _messages() -> dict[str, Any]:
    """The message classes of `List`, built at run time from a descriptor (no generated code to keep in step):
    ListPodResourcesResponse{1: repeated PodResources}, PodResources{1: name, 2: namespace, 3: repeated
    ContainerResources}, ContainerResources{1: name, 2: repeated ContainerDevices, 5: repeated DynamicResource},
    ContainerDevices{1: resource_name, 2: repeated device_ids}, DynamicResource{2: claim_name, 3: claim_namespace,
    4: repeated ClaimResource}, ClaimResource{1: repeated CDIDevice, 2: driver_name, 3: pool_name, 4: device_name},
    CDIDevice{1: name}. Field numbers are the kubelet's (package `v1`; DynamicResource's 1, class_name, went in 1.31;
    ClaimResource's 2-4 came in 1.31)."""
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="gputide/podresources/v1.proto", package="v1", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, str]) -> None:
        m = fdp.message_type.add(name=name)
        for field_name, number, kind, of in fields:
            label = f.LABEL_REPEATED if of.startswith("*") else f.LABEL_OPTIONAL
            spec = m.field.add(name=field_name, number=number, label=label, type=kind)
            if kind == f.TYPE_MESSAGE:
                spec.type_name = ".v1." + of.lstrip("*")

    string, msg = f.TYPE_STRING, f.TYPE_MESSAGE
    message("ListPodResourcesRequest")
    message("ContainerDevices", ("resource_name", 1, string, ""), ("device_ids", 2, string, "*"))
    message("CDIDevice", ("name", 1, string, ""))
    message("ClaimResource", ("cdi_devices", 1, msg, "*CDIDevice"), ("driver_name", 2, string, ""),
            ("pool_name", 3, string, ""), ("device_name", 4, string, ""))
    message("DynamicResource", ("claim_name", 2, string, ""), ("claim_namespace", 3, string, ""),
            ("claim_resources", 4, msg, "*ClaimResource"))
    message("ContainerResources", ("name", 1, string, ""), ("devices", 2, msg, "*ContainerDevices"),
            ("dynamic_resources", 5, msg, "*DynamicResource"))
    message("PodResources", ("name", 1, string, ""), ("namespace", 2, string, ""),
            ("containers", 3, msg, "*ContainerResources"))
    message("ListPodResourcesResponse", ("pod_resources", 1, msg, "*PodResources"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{m.name}"))
            for m in fdp.message_type}


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device the kubelet allocated to a container: a device plugin's (`resource`, `device_id`), or a DRA
    driver's (`resource` the driver, `device_id` its device name, `claim` "<namespace>/<claim name>")."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    claim: str = ""


class PodResourcesClient:
    """`list()`: every device allocation on the node, from the kubelet's PodResources service at `socket`."""

    def __init__(self, socket: str = DEFAULT_SOCKET, timeout_s: float = 5.0) -> None:
        self.socket, self.timeout_s = socket, timeout_s
        self._request = _messages()["ListPodResourcesRequest"]
        self._connect()

    def _connect(self) -> None:
        self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        self._list = self._channel.unary_unary(LIST_METHOD, request_serializer=self._request.SerializeToString,
                                               response_deserializer=_messages()["ListPodResourcesResponse"].FromString)

    def list(self) -> list[Allocation]:
        try:
            answer = self._list(self._request(), timeout=self.timeout_s)
        except grpc.RpcError:
            # a channel whose connection failed refuses every call until its reconnect backoff ends (growing to 2
            # minutes): a fresh one asks the kubelet at the next scrape, as dcgm-exporter does by connecting per scrape
            self._channel.close()
            self._connect()
            raise
        return [a for p in answer.pod_resources for c in p.containers
                for a in [*(Allocation(p.namespace, p.name, c.name, d.resource_name, device)
                            for d in c.devices for device in d.device_ids),
                          *(Allocation(p.namespace, p.name, c.name, driver, device,
                                       f"{r.claim_namespace or p.namespace}/{r.claim_name}")
                            for r in c.dynamic_resources for cr in r.claim_resources
                            for driver, device in _dra_devices(cr))]]

    def close(self) -> None:
        self._channel.close()


def _dra_devices(claim_resource: Any) -> list[tuple[str, str]]:
    """(driver, device name) of a ClaimResource: its own fields (kubelets 1.31 and newer), else read from its CDI
    devices, `k8s.<driver>/device=<name>` or `k8s.<driver>/claim=<claim UID>-<name>` (NVIDIA's naming)."""
    if claim_resource.driver_name:
        return [(claim_resource.driver_name, claim_resource.device_name)]
    found: dict[tuple[str, str], None] = {}
    for cdi in claim_resource.cdi_devices:
        kind, _, name = cdi.name.partition("=")
        vendor, _, cdi_class = kind.rpartition("/")
        if name and vendor.startswith("k8s.") and cdi_class in ("device", "claim"):
            found.setdefault((vendor.removeprefix("k8s."), _CDI_CLAIM_UID.sub("", name)), None)
    return list(found)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a device ID lies: a GPU of this exporter and, for a MIG device, its GPU instance and profile."""

    gpu: GpuIdentity
    gpu_instance_id: str = ""
    profile: str = ""


class DeviceIndex:
    """This exporter's GPUs by every name a device plugin gives them (module docstring); `mig` resolves MIG UUIDs
    and MIG indices (the NVML backend's `mig_instance`), without it those stay unmatched; `files` ({"nvidia<minor>":
    UUID}, the NVML backend's `device_files`) name the GPUs' device files, without it the `device` labels do."""

    def __init__(self, identity: Iterable[GpuIdentity], mig: MigLookup | None = None,
                 files: Mapping[str, str] | None = None) -> None:
        ids = tuple(identity)
        self.by_uuid = {g.uuid: g for g in ids}
        self.by_index = {g.gpu: g for g in ids}
        self.by_device = ({f: self.by_uuid[u] for f, u in files.items() if u in self.by_uuid} if files
                          else {g.device: g for g in ids})
        self.mig = mig
        self.unresolved: set[str] = set()   # MIG devices held whole, or on a GPU not knowable: instance not resolved
        self.unplaced: set[str] = set()   # device IDs whose GPU is not knowable now (`MIG_GPU_UNKNOWN`): not unmatched

    def place(self, device_id: str, resource: str = GPU_RESOURCES[0]) -> Placement | None:
        device = _SHARED_REPLICA.sub("", device_id)
        if g := (self.by_uuid.get(device) or self.by_device.get(device)
                 or (self.by_index.get(device) if device.isdigit() else None)):
            return Placement(g)
        mixed = resource.startswith(MIG_RESOURCE_PREFIX)   # the resource names the profile
        profile = (gpu_instance_profile(resource.removeprefix(MIG_RESOURCE_PREFIX).removesuffix(".shared"))
                   if mixed else "")
        if m := _OLD_MIG.match(device) or _GKE_MIG.match(device):
            g = self.by_uuid.get(m[1]) or self.by_device.get(m[1])
            return Placement(g, m[2], profile) if g else None
        found = self.mig(device) if self.mig is not None else None
        if found == MIG_GPU_UNKNOWN:   # a MIG UUID maybe on a GPU stuck in NVML: on no GPU to attribute, yet ours
            self.unresolved.add(device)
            self.unplaced.add(device_id)
            return None
        if found is None or (g := self.by_uuid.get(found.parent_uuid)) is None:
            return None   # not a MIG device NVML knows, or one of another node's GPUs
        if found.gpu_instance_id is None:   # an index on a GPU stuck in NVML: held whole, as a DRA device unresolved
            self.unresolved.add(device)
            return Placement(g)
        return Placement(g, str(found.gpu_instance_id), found.profile or profile)

    def place_dra(self, name: str) -> Placement | None:
        """Where a DRA GPU driver's device lies (module docstring): `gpu-<minor>` by the GPU's device file, a MIG
        device's GPU by the same and its GPU instance by the backend's `mig` where that knows the name (else the
        whole GPU), a name that carries a UUID by it."""
        if m := _DRA_GPU.match(name) or _DRA_MIG.match(name):
            g = self.by_device.get(f"nvidia{m[1]}")
            if g is None or m.re is _DRA_GPU:
                return Placement(g) if g else None
            found = self.mig(name) if self.mig is not None else None
            if found is None or found.parent_uuid != g.uuid or found.gpu_instance_id is None:
                self.unresolved.add(name)
                return Placement(g)   # the GPU is known, its instance not: held whole, never free
            return Placement(g, str(found.gpu_instance_id), found.profile)
        return self.place(name)


def _claim(a: Allocation) -> tuple[str, str, str, str]:
    """What `PodAttribution` remembers the first answer of: a pod's claim on a device (the kubelet's answer names no
    pod UID, so a re-created pod's claim on the device it held before is the same claim; on another device, a new
    one)."""
    return (a.namespace, a.pod, a.resource, a.device_id)


def is_gpu_resource(resource: str, whole_gpus: Iterable[str] = GPU_RESOURCES) -> bool:
    return resource in whole_gpus or resource.startswith(MIG_RESOURCE_PREFIX)


class PodAttribution:
    """This node's pods on its GPUs (see the module docstring); also a Prometheus collector of its own health."""

    def __init__(self, client: Any, *, grace_s: float = 60.0, resources: Iterable[str] = GPU_RESOURCES,
                 dra_drivers: Iterable[str] = DRA_GPU_DRIVERS, clock: Callable[[], float] | None = None,
                 wall: Callable[[], float] | None = None) -> None:
        self.client, self.grace_s = client, grace_s
        # grace_s is timed on `clock`, monotonic: on the wall clock, an NTP step forward before the first failed
        # collection made the kept answer look older than it was (`_stale_kept`), and the next collection dropped
        # the pods, so an HA partner scraping every grace_s got its first up 0 without them. `wall` (the wall clock)
        # only stamps the published last success; a `clock` given alone (a test's) stands for both
        self.clock = clock or time.monotonic
        self.wall = wall or clock or time.time
        self.resources, self.dra_drivers = frozenset(resources), frozenset(dra_drivers)
        self._logged: set[tuple[str, str]] = set()   # unmatched devices already logged
        self._last: list[Allocation] | None = None
        self._last_ok = float("nan")   # when the kubelet last answered, on `wall` (published)
        self._answered_at = float("nan")   # ... on `clock` (timed)
        self._up = False
        self._unmatched = self._unresolved = 0
        self._failing_since: float | None = None   # when the first silent collection of this outage began
        # the health and the number of the first silent collection (its `seq`), where `CollectHealth.run` ran it
        self._down_in: tuple[CollectHealth, int] | None = None
        self._down_for_all_from: float | None = None   # T (module docstring), on `clock`
        # (namespace, pod, resource, device ID) -> the number of the kubelet answer it first appeared in
        self._first_seen: dict[tuple[str, str, str, str], int] = {}
        self._answers = 0   # kubelet answers so far: an order no clock step can upset
        self._superseded = self._contested = 0

    def _allocations(self, now: float) -> list[Allocation]:
        """The kubelet's answer, else the kept one (module docstring); `now`: when this collection began."""
        try:
            self._last = [a for a in self.client.list() if (a.resource in self.dra_drivers if a.claim
                                                            else is_gpu_resource(a.resource, self.resources))]
            self._answers += 1
            self._first_seen = {c: self._first_seen.get(c, self._answers)   # DRA devices are never superseded
                                for c in (_claim(a) for a in self._last if not a.claim)}
        except grpc.RpcError as exc:
            self._up = False
            first = self._failing_since is None
            if first:
                at = current_collection()
                self._failing_since, self._down_in, self._down_for_all_from = now, at and (at[0], at[1].seq), None
                log.warning("kubelet PodResources at %s not answering (%s); keeping the last answer (%.0f s old) "
                            "for %s", getattr(self.client, "socket", "?"),
                            exc.code() if hasattr(exc, "code") else exc, now - self._answered_at,
                            "one more collection" if self._stale_kept() else f"{self.grace_s:.0f} s")
            if self._down_for_all_from is None and self._down_for_all():
                self._down_for_all_from = now
            since = self._down_for_all_from   # T: the rule and why, module docstring
            if self._last is not None and not first and since is not None and (
                    self._stale_kept() or now - since > self.grace_s):
                log.error("kubelet PodResources silent for %.0f s (%.0f s since it last answered): GPUs are "
                          "published without their pods", now - self._failing_since, now - self._answered_at)
                self._last = None
            return self._last or []
        self._up, self._answered_at, self._last_ok, self._failing_since = True, self.clock(), self.wall(), None
        return self._last

    def _stale_kept(self) -> bool:
        """The kept answer was over `grace_s` + `_carried_for_s()` old when the outage began (module docstring)."""
        return self._failing_since is not None and (
            self._failing_since - self._answered_at > self.grace_s + self._carried_for_s())

    def _carried_for_s(self) -> float:
        """The longest a scrape may carry a collection after it began, where `CollectHealth.run` runs this one:
        `--serve-stale-for` (the last complete one, served instead of a late one) or `--collect-timeout` (a running one
        the scrape waited for), at least `grace_s`; rendered without `CollectHealth`, `grace_s`."""
        if self._down_in is None:
            return self.grace_s
        health = self._down_in[0]
        return max(self.grace_s, health.serve_stale_s, health.collect_timeout_s)

    def began(self) -> float:
        """When the collection that runs this began, on `clock`: its own start (`Collection.started`) where
        `CollectHealth.run` runs it on this same clock (`gputide exporter`'s: both monotonic), else now (a registry
        rendered directly; `Attributed.read` asks before the GPU reads). The grace is reasoned from when a scrape's
        collection began; read later (before the GPU reads, after what the collection ran first), the collection
        that drops the pods was timed late by that much more than the one the grace is counted from, and the pods
        went before `grace_s` of collection starts had passed."""
        at = current_collection()
        if at is not None and at[0].clock is self.clock:
            return at[1].started
        return self.clock()

    def _down_for_all(self) -> bool:
        """Whether a silent collection had completed before this one began (`CollectHealth.last_complete` is the
        first silent one or later; it changes only as a collection ends, and this one runs): from now on a scrape is
        answered with a collection of this outage. Rendered without `CollectHealth`: from the first silent one on."""
        if self._down_in is None:
            return True
        health, first = self._down_in
        last = health.last_complete
        return last is not None and last.seq >= first

    def _settled(self, allocations: list[Allocation]) -> list[Allocation]:
        """`allocations` less the claims on a device ID that a pod which appeared later claims too (module
        docstring); counts those dropped and the device IDs whose claimants appeared together."""
        claims: defaultdict[tuple[str, str], set[tuple[str, str, str, str]]] = defaultdict(set)
        for a in allocations:
            if not a.claim:   # DRA: pods sharing a claim share its device (module docstring)
                claims[a.resource, a.device_id].add(_claim(a))   # a pod's containers may share a device
        dropped: set[tuple[str, str, str, str]] = set()
        self._contested = 0
        for held in claims.values():
            if len(held) < 2:
                continue
            newest = max(self._first_seen.get(c, 0) for c in held)
            older = {c for c in held if self._first_seen.get(c, 0) < newest}
            if len(held - older) > 1:
                self._contested += 1
            dropped |= older
        self._superseded = len(dropped)
        return [a for a in allocations if _claim(a) not in dropped] if dropped else allocations

    def workloads(self, identity: Iterable[GpuIdentity], mig: MigLookup | None = None,
                  files: Mapping[str, str] | None = None, *, at: float | None = None) -> tuple[WorkloadInfo, ...]:
        """One `WorkloadInfo` per (GPU, GPU instance, pod) of the GPUs in `identity`, in the kubelet's order, each
        once; `mig` resolves MIG devices, `files` names device files (`DeviceIndex`). `at`: when the collection
        began, on `clock` (`Attributed.read`: before its GPU reads, whose time varies), else now; `grace_s` is
        counted between such times."""
        index = DeviceIndex(identity, mig, files)
        seen: dict[tuple[str, str, str, str], WorkloadInfo] = {}
        unmatched = 0
        for a in self._settled(self._allocations(self.clock() if at is None else at)):
            p = index.place_dra(a.device_id) if a.claim else index.place(a.device_id, a.resource)
            if p is None:
                if a.device_id in index.unplaced:
                    continue   # counted unresolved
                unmatched += 1
                self._log_unmatched(a)
                continue
            seen.setdefault((p.gpu.uuid, p.gpu_instance_id, a.namespace, a.pod),
                            WorkloadInfo(p.gpu.uuid, a.namespace, a.pod, UNKNOWN_CLASS, p.gpu_instance_id, p.profile))
        self._unmatched, self._unresolved = unmatched, len(index.unresolved)
        return tuple(seen.values())

    def _log_unmatched(self, a: Allocation) -> None:
        if (a.resource, a.device_id) in self._logged or len(self._logged) >= 1000:
            return
        self._logged.add((a.resource, a.device_id))
        what = f"DRA device {a.device_id!r} of {a.resource} (claim {a.claim})" if a.claim else \
            f"device ID {a.device_id!r} of {a.resource}"
        log.warning("%s, allocated to pod %s/%s, matches no GPU of this exporter: not attributed "
                    "(gputide_pod_resources_unmatched_devices)", what, a.namespace, a.pod)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("gputide_pod_resources_up", "1 if the kubelet's PodResources API answered the last "
                                "scrape (pods are attributed to GPUs from it).", value=1.0 if self._up else 0.0)
        yield GaugeMetricFamily("gputide_pod_resources_last_success_timestamp_seconds",
                                "When the kubelet's PodResources API last answered.", value=self._last_ok)
        yield GaugeMetricFamily("gputide_pod_resources_unmatched_devices", "GPU and MIG device IDs, and DRA GPU "
                                "devices, allocated to pods that match no GPU of this exporter.",
                                value=float(self._unmatched))
        yield GaugeMetricFamily("gputide_pod_resources_unresolved_mig_devices", "DRA MIG devices, and a device "
                                "plugin's MIG indices on a GPU stuck in NVML, whose GPU instance the backend could "
                                "not resolve: their pods are attributed to the whole GPU; and MIG UUIDs not known "
                                "while a GPU is stuck in NVML, whose GPU cannot be known: their pods not attributed.",
                                value=float(self._unresolved))
        yield GaugeMetricFamily("gputide_pod_resources_superseded_claims", "Claims on a GPU or MIG device ID left "
                                "out because a pod that appeared later claims it too (the older pod has finished).",
                                value=float(self._superseded))
        yield GaugeMetricFamily("gputide_pod_resources_contested_devices", "GPU and MIG device IDs that several pods "
                                "claim which appeared together: all are attributed (one may have finished).",
                                value=float(self._contested))


class Attributed:
    """A backend whose readings carry the pods on its GPUs (`PodAttribution`), e.g. `Attributed(NvmlBackend(),
    PodAttribution(PodResourcesClient()))`. Everything else is the wrapped backend's."""

    def __init__(self, backend: Any, attribution: PodAttribution) -> None:
        self.backend, self.attribution = backend, attribution

    def __getattr__(self, name: str) -> Any:   # identity, apply_power_caps, close ... of the wrapped backend
        return getattr(self.backend, name)

    def read(self) -> GpuReadings:
        # the collection's start, before the GPU reads (up to their deadline, seconds): read after them, the kubelet's
        # grace_s was counted between times shifted by each collection's reads, and a scraper scraping every grace_s
        # could go from up 1 with the pods to up 0 without them (`PodAttribution.began`)
        began = self.attribution.began()
        readings = self.backend.read()
        mig = getattr(self.backend, "mig_instance", None)   # the NVML backend's; a simulated fleet has no MIG
        files = getattr(self.backend, "device_files", None)   # the NVML backend's minor numbers
        return replace(readings, workloads=readings.workloads + self.attribution.workloads(
            readings.identity, mig, files, at=began))
