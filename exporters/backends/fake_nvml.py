"""An in-repo stand-in for the subset of `pynvml` the NVML backend uses (no GPU is needed to test it).

Build it with `FakeDevice`s, inject it as ``NvmlBackend(nvml=FakeNvml([...]))``, and break things on purpose:
``device.lost = True`` makes every call raise `NVMLError_GpuIsLost`; ``device.fail["nvmlDeviceGetClockInfo"] =
NVMLError_NotSupported`` breaks one getter (``fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission``:
an agent without root); a power limit outside ``min_limit_mw``..``max_limit_mw`` is refused as the driver refuses
it, and ``default_limit_mw`` may sit below ``max_limit_mw`` as on many PCIe boards; ``device.field_fail = {185}``
makes one batched field answer NotSupported (``nvmlReturn`` 3) and ``device.field_ret = {185: 4}`` any other
return code (4: NoPermission); `push_xid(device, 48)` queues an XID event. Memory info answers version 2
(``reserved_bytes`` apart from ``used_bytes``) and version 1 (reserved counted as used);
``fail["nvmlDeviceGetMemoryInfo_v2"] = NVMLError_FunctionNotFound`` is a driver without version 2. What a board lacks
answers NotSupported, as real NVML does: ``ecc_supported=False`` (a GeForce board, ECC off) and
``remap_supported=False`` (before Ampere) for memory health, ``mem_temp=None`` (GDDR boards) for field 82,
``gpm_sm_util=None`` or ``arch`` before Hopper for GPM.
MIG: ``FakeDevice(..., migs=[FakeMig("MIG-...", gpu_instance_id=1, profile="1g.10gb")])`` partitions a GPU; its MIG
devices are found by UUID and by index and answer name, parent and GPU instance as NVML does, the GPU its MIG mode,
and GPM per GPU instance (``FakeMig.gpm_sm_util``; None or a GPU before Hopper: NotSupported). A MIG device's GPU
instance answers ``nvmlDeviceGetGpuInstanceById`` and ``nvmlGpuInstanceGetInfo`` (its ``gi_profile_id`` and
``placement`` (start, size), as NVIDIA's DRA driver names it ``gpu-<minor>-mig-<profile id>-<start>-<size>``); one
without a ``placement`` answers NotSupported there, and the GPU's ``fail`` breaks either call
(``fail["nvmlDeviceGetGpuInstanceById"] = NVMLError_NoPermission``: an exporter without the MIG monitor capability).

The library itself can stop answering, as real NVML does: it counts ``nvmlInit`` / ``nvmlShutdown`` (`refs`), and at
0 every call raises `NVMLError_Uninitialized` (once it has been initialised: a fake no one initialised answers)
(``nvml.nvmlShutdown()`` from a test: another user of the library in the process shutting it down once too often);
``nvml.broken = NVMLError_DriverNotLoaded`` (or `NVMLError_LibRmVersionMismatch`) makes every call raise that,
``nvmlInit`` included, until it is set back to None. Handles, event sets and GPM samples belong to one initialisation:
the first one's are the `FakeDevice`s themselves, each later one's are `FakeHandle`s of that `generation`, and a handle
or event set of another initialisation is refused with `NVMLError_InvalidArgument`, so a caller that does not name its
GPUs again after ``nvmlInit`` fails. So is an event set used after ``nvmlEventSetFree`` (a crash in NVML), which sets
`used_freed_set`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    value = 999


class NVMLError_Uninitialized(NVMLError):  # noqa: N801 - pynvml's names
    value = 1


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801
    value = 2


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    value = 3


class NVMLError_NoPermission(NVMLError):  # noqa: N801
    value = 4


class NVMLError_Timeout(NVMLError):  # noqa: N801
    value = 10


class NVMLError_NotFound(NVMLError):  # noqa: N801
    value = 6


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    value = 15


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    value = 13


class NVMLError_ArgumentVersionMismatch(NVMLError):  # noqa: N801
    value = 25


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    value = 9


class NVMLError_LibRmVersionMismatch(NVMLError):  # noqa: N801
    value = 18


@dataclass(frozen=True)
class FakeHandle:
    """A handle NVML gave after it was initialised again (`generation` > 0): valid for that initialisation only."""

    target: Any
    generation: int


@dataclass(frozen=True, eq=False)
class FakeEventSet:
    """An event set: one object per ``nvmlEventSetCreate`` (told apart by identity, as NVML's pointers are)."""

    generation: int


@dataclass
class FakeMig:
    """A MIG device of a `FakeDevice` (its `parent` is set by the device)."""

    uuid: str
    gpu_instance_id: int = 1
    profile: str = "1g.10gb"
    compute_instance_id: int = 0
    gi_profile_id: int = 19            # nvmlGpuInstanceGetInfo's profileId (19: 1g.10gb on an A100 / H100)
    placement: tuple[int, int] | None = None   # (start, size) of its GPU instance; None: not modelled (NotSupported)
    gpm_sm_util: float | None = 40.0   # percent of the instance's SMs (nvmlGpmMigSampleGet); None: NotSupported
    parent: Any = field(default=None, repr=False)
    fail: dict[str, type[NVMLError]] = field(default_factory=dict)

    @property
    def lost(self) -> bool:
        return bool(self.parent is not None and self.parent.lost)

    @property
    def name(self) -> str:
        return f"{self.parent.name} MIG {self.profile}"


@dataclass
class FakeDevice:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    bus_id: str = "00000000:18:00.0"
    minor: int = 0
    arch: int = 9                  # NVML_DEVICE_ARCH_HOPPER
    temp: int = 45
    mem_temp: int | None = 52      # None: no memory temperature sensor (field 82 answers NotSupported)
    slowdown: int = 87
    shutdown: int = 92
    power_mw: int = 350_000         # the 1 s average (field 185; nvmlDeviceGetPowerUsage on Ampere but GA100 and newer)
    power_instant_mw: int | None = None   # field 186; None: the average
    limit_mw: int = 700_000         # the management limit (nvidia-smi -pl); enforced_mw: what the driver enforces
    enforced_mw: int | None = None  # (field 190): None the same, lower under an out-of-band limit
    min_limit_mw: int = 200_000
    max_limit_mw: int = 700_000
    default_limit_mw: int = 700_000  # the limit the board boots with; some boards allow more (max_limit_mw)
    energy_mj: int = 123_456_789
    total_bytes: int = 80 << 30
    used_bytes: int = 20 << 30     # allocated by processes (version 2's used)
    reserved_bytes: int = 0        # the driver's and firmware's (version 2's reserved; counted as used by version 1)
    util: int = 60
    sm_clock: int = 1980
    reasons: int = 0
    gpm_sm_util: float | None = 55.0  # percent; None: GPM not supported
    ecc_supported: bool = True
    sbe_volatile: int = 3
    dbe_volatile: int = 0
    remap_supported: bool = True
    remapped_correctable: int = 1
    remapped_uncorrectable: int = 0
    remap_pending: int = 0
    remap_failure: int = 0
    lost: bool = False
    fail: dict[str, type[NVMLError]] = field(default_factory=dict)
    field_fail: set[int] = field(default_factory=set)
    field_ret: dict[int, int] = field(default_factory=dict)
    migs: list[FakeMig] = field(default_factory=list)

    def __post_init__(self) -> None:
        for mig in self.migs:
            mig.parent = self


@dataclass(frozen=True)
class FakeGpuInstance:
    """A GPU instance handle (``nvmlDeviceGetGpuInstanceById``): the GPU and a MIG device of that instance."""

    device: Any   # the GPU's handle as the caller gave it
    mig: FakeMig


class _GpmMetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]


class FakeNvml:
    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibRmVersionMismatch = NVMLError_LibRmVersionMismatch
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_Timeout = NVMLError_Timeout
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_ArgumentVersionMismatch = NVMLError_ArgumentVersionMismatch
    NVML_SUCCESS = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_UNKNOWN = 999
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
    NVML_FI_DEV_MEMORY_TEMP = 82
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
    NVML_FI_DEV_POWER_AVERAGE = 185
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_FI_DEV_POWER_CURRENT_LIMIT = 190
    NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3
    NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4
    NVML_FI_DEV_REMAPPED_COR = 142
    NVML_FI_DEV_REMAPPED_UNC = 143
    NVML_FI_DEV_REMAPPED_PENDING = 144
    NVML_FI_DEV_REMAPPED_FAILURE = 145
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG = 0, 1, 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_INT = 3, 4, 5
    NVML_DEVICE_ARCH_HOPPER = 9
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRICS_GET_VERSION = 1
    nvmlEventTypeXidCriticalError = 0x8
    nvmlMemory_v2 = 0x2000028   # pynvml's: sizeof(nvmlMemory_v2_t) | 2 << 24
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet
    driver_version: str | None = "580.159.04"   # None: nvmlSystemGetDriverVersion fails

    def __init__(self, devices: list[FakeDevice]) -> None:
        self.devices = devices
        self.events: list[SimpleNamespace] = []
        self.calls: list[str] = []
        self.freed_sets: set[FakeEventSet] = set()   # nvmlEventSetFree'd: using one again is a crash in NVML
        self.used_freed_set = False
        self.asked: list[tuple[str, str]] = []   # (function or "nvmlDeviceGetFieldValues:<id>", UUID it asked about)
        self.refs = 0           # nvmlInit calls not yet matched by nvmlShutdown; 0: uninitialised
        self.generation = 0     # initialisations after the first (their handles are `FakeHandle`s)
        self.inits = 0          # nvmlInit calls that succeeded
        self.broken: type[NVMLError] | None = None   # every call raises it (the driver unloaded, ...)

    @property
    def initialised(self) -> bool:
        return self.refs > 0

    def _library(self, fn: str) -> None:
        """What every call checks first: the driver there and the library initialised."""
        if self.broken is not None:
            self.calls.append(fn)
            raise self.broken()
        if not self.refs and self.inits:   # a fake never initialised answers: tests of parts that do not init
            self.calls.append(fn)
            raise NVMLError_Uninitialized()

    def _handle(self, target: Any) -> Any:
        return target if not self.generation else FakeHandle(target, self.generation)

    def _target(self, h: Any) -> Any:
        """The device a handle names, if it is this initialisation's."""
        if isinstance(h, FakeHandle):
            if h.generation != self.generation:
                raise NVMLError_InvalidArgument()
            return h.target
        if self.generation and isinstance(h, (FakeDevice, FakeMig)):
            raise NVMLError_InvalidArgument()   # the first initialisation's handle
        return h

    def _dev(self, h: Any, fn: str) -> Any:
        self._library(fn)
        h = self._target(h)
        self.calls.append(fn)
        self.asked.append((fn, h.uuid))
        if h.lost:
            raise NVMLError_GpuIsLost()
        if fn in h.fail:
            raise h.fail[fn]()
        return h

    def push_xid(self, device: FakeDevice, xid: int) -> None:
        self.events.append(SimpleNamespace(device=device, eventType=0x8, eventData=xid))

    # library
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.broken is not None:
            raise self.broken()
        if not self.refs and self.inits:
            self.generation += 1   # the previous initialisation's handles are no longer valid
        self.refs += 1
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        if not self.refs:
            raise NVMLError_Uninitialized()
        self.refs -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._library("nvmlSystemGetDriverVersion")
        if self.driver_version is None:
            raise NVMLError()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._library("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        self._library("nvmlDeviceGetHandleByIndex")
        return self._handle(self.devices[i])

    # identity
    def nvmlDeviceGetUUID(self, h):
        return self._dev(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h):
        return self._dev(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._dev(h, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetMinorNumber(self, h):
        return self._dev(h, "nvmlDeviceGetMinorNumber").minor

    def nvmlDeviceGetArchitecture(self, h):
        return self._dev(h, "nvmlDeviceGetArchitecture").arch

    def nvmlDeviceGetTemperatureThreshold(self, h, which):
        d = self._dev(h, "nvmlDeviceGetTemperatureThreshold")
        return d.slowdown if which == self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN else d.shutdown

    # MIG
    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._library("nvmlDeviceGetHandleByUUID")
        self.calls.append("nvmlDeviceGetHandleByUUID")
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for d in self.devices:
            for h in (d, *d.migs):
                if h.uuid == uuid:
                    return self._handle(h)
        raise NVMLError_NotFound()

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, index):
        d = self._dev(h, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not 0 <= index < len(d.migs):
            raise NVMLError_NotFound()
        return self._handle(d.migs[index])

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h):
        d = self._dev(h, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if not isinstance(d, FakeMig):
            raise NVMLError()   # NVML_ERROR_INVALID_ARGUMENT: not a MIG device
        return self._handle(d.parent)

    def nvmlDeviceGetMigMode(self, h):
        d = self._dev(h, "nvmlDeviceGetMigMode")
        if d.arch < 8:   # MIG is Ampere's and newer
            raise NVMLError_NotSupported()
        return [int(bool(d.migs)), int(bool(d.migs))]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if self._dev(h, "nvmlDeviceGetMaxMigDeviceCount").migs else 0

    def nvmlDeviceGetGpuInstanceId(self, h):
        return self._dev(h, "nvmlDeviceGetGpuInstanceId").gpu_instance_id

    def nvmlDeviceGetGpuInstanceById(self, h, gpu_instance_id):
        d = self._dev(h, "nvmlDeviceGetGpuInstanceById")
        if isinstance(d, FakeMig) or d.arch < 8:
            raise NVMLError_NotSupported()
        mig = next((m for m in d.migs if m.gpu_instance_id == gpu_instance_id), None)
        if mig is None:
            raise NVMLError_NotFound()
        return FakeGpuInstance(h, mig)

    def nvmlGpuInstanceGetInfo(self, gi):
        self._dev(gi.device, "nvmlGpuInstanceGetInfo")
        if gi.mig.placement is None:
            raise NVMLError_NotSupported()
        start, size = gi.mig.placement
        return SimpleNamespace(device=gi.device, id=gi.mig.gpu_instance_id, profileId=gi.mig.gi_profile_id,
                               placement=SimpleNamespace(start=start, size=size))

    # telemetry
    def nvmlDeviceGetFieldValues(self, h, ids):
        d = self._dev(h, "nvmlDeviceGetFieldValues")
        self.asked.extend((f"nvmlDeviceGetFieldValues:{fid}", d.uuid) for fid in ids)
        table = {82: (d.mem_temp, 5, "siVal"), 83: (d.energy_mj, 3, "ullVal"), 185: (d.power_mw, 1, "uiVal"),
                 186: (d.power_mw if d.power_instant_mw is None else d.power_instant_mw, 1, "uiVal"),
                 190: (d.enforced_mw or d.limit_mw, 1, "uiVal"),
                 3: (d.sbe_volatile, 3, "ullVal"), 4: (d.dbe_volatile, 3, "ullVal"),
                 142: (d.remapped_correctable, 1, "uiVal"), 143: (d.remapped_uncorrectable, 1, "uiVal"),
                 144: (d.remap_pending, 1, "uiVal"), 145: (d.remap_failure, 1, "uiVal")}
        unsupported = (({3, 4} if not d.ecc_supported else set()) | ({82} if d.mem_temp is None else set())
                       | ({142, 143, 144, 145} if not d.remap_supported else set()))
        out = []
        for fid in ids:
            v, typ, attr = table[fid]
            ret = self.NVML_ERROR_NOT_SUPPORTED if fid in d.field_fail | unsupported else d.field_ret.get(fid, 0)
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=ret, valueType=typ,
                                       value=SimpleNamespace(**{attr: v})))
        return out

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._dev(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetPowerUsage(self, h):
        return self._dev(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._dev(h, "nvmlDeviceGetTemperature").temp

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        d = self._dev(h, "nvmlDeviceGetMemoryInfo")
        free = d.total_bytes - d.reserved_bytes - d.used_bytes
        if version is None:   # version 1: the reserved memory counts as used
            return SimpleNamespace(total=d.total_bytes, used=d.used_bytes + d.reserved_bytes, free=free)
        self._dev(h, "nvmlDeviceGetMemoryInfo_v2")   # fail["nvmlDeviceGetMemoryInfo_v2"]: a driver without it
        if version != self.nvmlMemory_v2:
            raise NVMLError_ArgumentVersionMismatch()
        return SimpleNamespace(version=version, total=d.total_bytes, reserved=d.reserved_bytes, used=d.used_bytes,
                               free=free)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=self._dev(h, "nvmlDeviceGetUtilizationRates").util, memory=0)

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._dev(h, "nvmlDeviceGetClockInfo").sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):   # R535 and newer; fail[...] = FunctionNotFound: older
        return self._dev(h, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):   # its name before R535
        return self._dev(h, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    # memory health
    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        d = self._dev(h, "nvmlDeviceGetTotalEccErrors")
        if not d.ecc_supported or counter_type != self.NVML_VOLATILE_ECC:  # the fake keeps no aggregate counter
            raise NVMLError_NotSupported()
        return d.dbe_volatile if error_type == self.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else d.sbe_volatile

    def nvmlDeviceGetRemappedRows(self, h):
        d = self._dev(h, "nvmlDeviceGetRemappedRows")
        if not d.remap_supported:
            raise NVMLError_NotSupported()
        return d.remapped_correctable, d.remapped_uncorrectable, d.remap_pending, d.remap_failure

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h):
        d = self._dev(h, "nvmlGpmQueryDeviceSupport")   # GPM is Hopper's and newer
        return SimpleNamespace(isSupportedDevice=int(d.gpm_sm_util is not None and d.arch >= 9))

    def nvmlGpmSampleAlloc(self):
        self._library("nvmlGpmSampleAlloc")
        return SimpleNamespace(device=None)

    def nvmlGpmSampleGet(self, h, sample):
        sample.device = self._dev(h, "nvmlGpmSampleGet")
        return sample

    def nvmlGpmMigSampleGet(self, h, gpu_instance_id, sample):
        d = self._dev(h, "nvmlGpmMigSampleGet")
        mig = next((m for m in d.migs if m.gpu_instance_id == gpu_instance_id), None)
        if mig is None:
            raise NVMLError_InvalidArgument()
        if mig.gpm_sm_util is None or d.arch < 9:
            raise NVMLError_NotSupported()
        sample.device = mig
        return sample

    def nvmlGpmMetricsGet(self, mg):
        self._library("nvmlGpmMetricsGet")
        d = mg.sample2.device
        for m in mg.metrics[: mg.numMetrics]:
            m.value = float(d.gpm_sm_util or 0.0)
            m.nvmlReturn = 0
        return mg

    def nvmlGpmSampleFree(self, sample) -> None:
        self.calls.append("nvmlGpmSampleFree")
        sample.device = None

    # events
    def nvmlEventSetCreate(self):
        self._library("nvmlEventSetCreate")
        return FakeEventSet(self.generation)

    def nvmlDeviceRegisterEvents(self, h, types, events) -> None:
        self._dev(h, "nvmlDeviceRegisterEvents")
        self._event_set(events)

    def nvmlEventSetFree(self, events) -> None:
        self._library("nvmlEventSetFree")
        self._event_set(events)
        self.freed_sets.add(events)

    def _event_set(self, events: Any) -> None:
        if events in self.freed_sets:   # NVML's memory freed: a crash there, told here
            self.used_freed_set = True
            raise NVMLError_InvalidArgument()
        if isinstance(events, FakeEventSet) and events.generation != self.generation:
            raise NVMLError_InvalidArgument()   # a set of another initialisation

    def nvmlEventSetWait(self, events, timeout_ms):
        self._library("nvmlEventSetWait")
        self._event_set(events)
        if not self.events:
            raise NVMLError_Timeout()
        event = self.events.pop(0)
        return SimpleNamespace(device=self._handle(event.device), eventType=event.eventType,
                               eventData=event.eventData)

    # power management
    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        d = self._dev(h, "nvmlDeviceGetPowerManagementLimitConstraints")
        return d.min_limit_mw, d.max_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._dev(h, "nvmlDeviceGetPowerManagementDefaultLimit").default_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return self._dev(h, "nvmlDeviceGetPowerManagementLimit").limit_mw

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        d = self._dev(h, "nvmlDeviceSetPowerManagementLimit")
        if not d.min_limit_mw <= mw <= d.max_limit_mw:   # the driver refuses a limit outside the constraints
            raise NVMLError_InvalidArgument()
        d.limit_mw = int(mw)
