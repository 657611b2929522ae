"""Which MIG device a device plugin's ID or a DRA device name names, asked of NVML: `NvmlMigLookup(nvml, handles,
by_minor)(device_id)`.

With MIG, NVIDIA's device plugin hands pods MIG devices, not GPUs: their IDs are MIG UUIDs (``MIG-<uuid>``,
drivers R470 and newer), whether the resource is ``nvidia.com/gpu`` (MIG strategy "single") or
``nvidia.com/mig-<profile>`` ("mixed"); with ``--device-id-strategy=index`` they are ``<gpu index>:<mig index>``.
Neither says which GPU the device is carved from. NVML does, as dcgm-exporter asks it: the MIG device's handle
(``nvmlDeviceGetHandleByUUID``, or ``nvmlDeviceGetMigDeviceHandleByIndex`` under its GPU), then its parent GPU
(``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``), its GPU instance (``nvmlDeviceGetGpuInstanceId``) and its
name, whose last word is the profile (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``; a compute-instance profile such as
``1c.2g.20gb`` names the GPU instance's ``2g.20gb``, dcgm-exporter's ``GPU_I_PROFILE``).

NVIDIA's DRA driver (``gpu.nvidia.com``) names a MIG device by where its GPU instance lies, not by UUID:
``gpu-<minor>-mig-<GI profile id>-<placement start>-<placement size>`` (its ``MigDeviceInfo.CanonicalName``: the
GPU's /dev/nvidia<minor>, and the ``profileId`` and ``placement`` of ``nvmlGpuInstanceGetInfo``). The GPU is the
backend's with that minor number (`by_minor`); its GPU instances are listed as the driver lists them: each MIG
device under the GPU (``nvmlDeviceGetMigDeviceHandleByIndex`` up to ``nvmlDeviceGetMaxMigDeviceCount``), its GPU
instance ID, that instance (``nvmlDeviceGetGpuInstanceById``) and its info. The instance whose profile ID, start and
size are the name's is the device; its ID and profile (from the MIG device's name) are given as for a device
plugin's ID. The listing is kept for one collection (`new_collection()` drops it: instances are created and
destroyed as DRA claims come and go). A name no GPU instance matches (the GPU re-partitioned since) is None, as is
every name on a GPU whose listing NVML refused (NoPermission without the MIG monitor capability, NotSupported, a
lost GPU): pod attribution then holds the whole GPU, as before this lookup could read placements. Each is logged
once (per name; per GPU and error); refused listings are counted in `errors`. A GPU whose read is late or stuck in
NVML (`skip`, from the backend's `GpuReads.stuck`) is not asked, not a call that would hang the collection with it:
its DRA MIG devices are None this scrape, a device plugin's index on it is its GPU with no GPU instance (the index names
the GPU; pod attribution holds it whole, as a DRA device it cannot resolve).

A MIG UUID names one instance for its whole life (re-creating the instance gives it a new UUID), so what a UUID
resolved to is kept, and so is every MIG device a walk finds: a MIG UUID not known yet walks the MIG devices of every
GPU not late or stuck (once per collection), then, with no GPU stuck and the walk not finding it, asks NVML
(``nvmlDeviceGetHandleByUUID``, which may ask every GPU: not while one is stuck). So the instances of a GPU that
existed when it was last walked still resolve while it is stuck (audit s32y11); a walk forgets its GPU's UUIDs it no
longer finds (destroyed instances), and an NVML re-initialisation all of them (the backend builds a new lookup). A
UUID still unknown while a GPU is stuck is `MIG_GPU_UNKNOWN` (it may lie on the stuck GPU, which cannot be asked): not
attributed, counted unresolved rather than as on no GPU here, and looked for again at the next collection. An index
is asked each time (re-partitioning reuses it). What NVML cannot resolve is None and asked again at the next
scrape. The formats that carry their GPU (R450/R460's ``MIG-GPU-<uuid>/<gi>/<ci>``, GKE's
``nvidia<n>/gi<gi>``) need no NVML: `exporters.podresources` reads them itself.

Not verified on MIG hardware with the DRA driver (none was available): written against NVML's documented calls,
the driver's naming, and the in-repo fake. This module never imports `pynvml`: it uses the `nvml` module the
backend was given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

from exporters.backends.base import MIG_GPU_UNKNOWN, MigInstance

log = logging.getLogger(__name__)
_INDEX = re.compile(r"^(\d+):(\d+)$")
_DRA_MIG = re.compile(r"^gpu-(\d+)-mig-(\d+)-(\d+)-(\d+)$")   # gpu-<minor>-mig-<GI profile id>-<start>-<size>
_COMPUTE_INSTANCE = re.compile(r"^\d+c\.")
_LOGGED_MAX = 1000
# (GI profile id, placement start, placement size) -> the GPU instance there
Placements = dict[tuple[int, int, int], MigInstance]


def gpu_instance_profile(profile: str) -> str:
    """``1g.10gb`` from a MIG profile as NVML names a MIG device or the device plugin a resource (``1c.2g.20gb``
    is a compute instance of a ``2g.20gb`` GPU instance)."""
    return _COMPUTE_INSTANCE.sub("", profile.strip())


def profile_of_name(name: Any) -> str:
    """The GPU instance profile a MIG device's NVML name ends with (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``), or ""."""
    name = _text(name)
    return gpu_instance_profile(name.rsplit(" MIG ", 1)[1]) if " MIG " in name else ""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlMigLookup:
    """`MigLookup` over NVML (module docstring); `handles` are the backend's GPU handles in NVML index order (None
    for a GPU it left out), `by_minor` its served GPUs by minor number: {minor: (handle, UUID)}."""

    def __init__(self, nvml: Any, handles: Sequence[Any],
                 by_minor: Mapping[int, tuple[Any, str]] | None = None,
                 index_uuids: Mapping[int, str] | None = None) -> None:
        """`index_uuids`: the UUID of each served GPU by NVML index (which GPU an index lookup asks NVML of)."""
        self.nvml, self.handles = nvml, handles
        self.by_minor = dict(by_minor or {})
        self.index_uuids = dict(index_uuids or {})
        self._by_uuid: dict[str, MigInstance] = {}   # across collections: resolved, or found by a walk
        self._placements: dict[int, Placements | None] = {}   # this collection's, by minor; None: NVML refused
        self._walked = False   # this collection's GPUs not stuck walked into `_by_uuid`
        self._logged: set[tuple[str, str]] = set()
        self.errors = 0   # GPU instance listings NVML refused

    def new_collection(self) -> None:
        """Forget the GPU instances listed for the last collection."""
        self._placements.clear()
        self._walked = False

    def __call__(self, device_id: str, skip: Collection[str] = ()) -> MigInstance | None:
        """The MIG device `device_id` names, or None; never asking NVML of a GPU in `skip` (UUIDs: GPUs whose read
        is late or stuck in NVML, where a call would hang too): a DRA name there is None, an index there its GPU with
        no GPU instance (`MigInstance.gpu_instance_id` None), and a MIG UUID not known before is looked for only
        among the MIG devices walked, the stuck GPU's before it stuck (`_walk`: ``nvmlDeviceGetHandleByUUID`` may ask
        every GPU), else `MIG_GPU_UNKNOWN`. With no GPU in `skip` NVML is asked for the UUID alone (one call): a walk
        there listed every GPU's MIG devices, under the backend's lock, at each collection a UUID stayed unknown
        (a finished pod the kubelet still lists, whose instance is gone: 234 calls against 2 on 8 A100s)."""
        nvml = self.nvml
        if device_id in self._by_uuid:
            return self._by_uuid[device_id]
        if dra := _DRA_MIG.match(device_id):
            minor, profile_id, start, size = map(int, dra.groups())
            if minor in self.by_minor and self.by_minor[minor][1] in skip:
                return None
            return self._dra(device_id, minor, (profile_id, start, size))
        index = _INDEX.match(device_id)
        try:
            if index:
                gpu, mig = int(index[1]), int(index[2])
                if gpu >= len(self.handles) or self.handles[gpu] is None:   # None: a GPU the backend left out
                    return None
                if (uuid := self.index_uuids.get(gpu)) is not None and uuid in skip:
                    return MigInstance(uuid, None)   # the index names its GPU: held whole, the instance not asked
                found = self._describe(nvml.nvmlDeviceGetMigDeviceHandleByIndex(self.handles[gpu], mig))
            elif device_id.startswith("MIG-"):
                if not skip:   # one NVML call; a walk of every GPU's MIG devices only while one may hang
                    found = self._by_uuid[device_id] = self._describe(nvml.nvmlDeviceGetHandleByUUID(device_id))
                    return found
                self._walk(skip)
                # NVML's own lookup would ask every GPU, the stuck one too
                return self._by_uuid.get(device_id, MIG_GPU_UNKNOWN)
            else:
                return None
        except nvml.NVMLError:
            return None
        return found

    def _describe(self, mig: Any) -> MigInstance:
        nvml = self.nvml
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return MigInstance(parent_uuid=_text(nvml.nvmlDeviceGetUUID(parent)),
                           gpu_instance_id=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                           profile=profile_of_name(nvml.nvmlDeviceGetName(mig)))

    def _walk(self, skip: Collection[str]) -> None:
        """Keep the MIG devices of every GPU not in `skip` in `_by_uuid`, listed once per collection, and forget the
        UUIDs a GPU listed in full no longer has; a GPU that refuses (not in MIG mode, NotSupported) keeps its own."""
        if self._walked:
            return
        nvml, self._walked = self.nvml, True
        for gpu, uuid in self.index_uuids.items():
            if uuid in skip or gpu >= len(self.handles) or (handle := self.handles[gpu]) is None:
                continue
            try:
                found = {_text(nvml.nvmlDeviceGetUUID(mig)): MigInstance(
                    uuid, int(nvml.nvmlDeviceGetGpuInstanceId(mig)), profile_of_name(nvml.nvmlDeviceGetName(mig)))
                    for mig in self._migs(handle)}
            except nvml.NVMLError:
                continue
            for gone in [u for u, m in self._by_uuid.items() if m.parent_uuid == uuid and u not in found]:
                del self._by_uuid[gone]
            self._by_uuid.update(found)

    def _migs(self, handle: Any) -> Iterator[Any]:
        """The MIG devices under one GPU, as the DRA driver lists them (NVMLError where NVML refuses to)."""
        nvml = self.nvml
        absent = (nvml.NVMLError_NotFound, nvml.NVMLError_InvalidArgument)   # no MIG device at that index
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                yield nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except absent:
                continue

    def _dra(self, name: str, minor: int, where: tuple[int, int, int]) -> MigInstance | None:
        """The GPU instance a DRA driver's MIG device name places (module docstring), or None."""
        if minor not in self.by_minor:
            return None   # not a GPU of this backend: pod attribution counts it unmatched
        handle, uuid = self.by_minor[minor]
        if minor not in self._placements:
            self._placements[minor] = self._list(handle, uuid)
        placements = self._placements[minor]
        if placements is None:
            return None   # NVML refused the listing: logged there
        found = placements.get(where)
        if found is None:
            self._log_once(("placement", name), "DRA MIG device %s: no GPU instance of profile %d at placement "
                           "start %d size %d on GPU %s (%d listed): the pod is attributed to the whole GPU",
                           name, *where, uuid, len(placements))
        return found

    def _list(self, handle: Any, uuid: str) -> Placements | None:
        """The GPU instances of one GPU by their profile ID and placement, or None where NVML refuses to say."""
        nvml, found = self.nvml, {}
        try:
            for mig in self._migs(handle):
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
                where = (int(info.profileId), int(info.placement.start), int(info.placement.size))
                found.setdefault(where, MigInstance(uuid, gi, profile_of_name(nvml.nvmlDeviceGetName(mig))))
        except nvml.NVMLError as exc:
            self.errors += 1
            self._log_once((uuid, type(exc).__name__), "GPU instances of GPU %s not listed (%s: %s): its DRA MIG "
                           "devices are attributed to the whole GPU", uuid, type(exc).__name__, exc)
            return None
        return found

    def _log_once(self, key: tuple[str, str], msg: str, *args: Any) -> None:
        if key in self._logged or len(self._logged) >= _LOGGED_MAX:
            return
        self._logged.add(key)
        log.warning(msg, *args)
