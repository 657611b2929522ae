"""NVML backend: reads real GPUs through nvidia-ml-py (`pynvml`); the only module that imports it.

Per GPU and scrape: one batched ``nvmlDeviceGetFieldValues`` for memory temperature, total energy and power (each
field has its own return code; a field the driver lacks falls back to the classic getter), then the power
management limit, temperature, memory, utilisation, SM clock and clock event reasons (on a driver before R535,
which lacks ``nvmlDeviceGetCurrentClocksEventReasons``, its old name ``...ThrottleReasons``). Memory is
``nvmlDeviceGetMemoryInfo`` version 2 (used without the driver's reserved memory, which is published as
``DCGM_FI_DEV_FB_RESERVED``), else version 1, whose used memory includes the reserved and which has no reserved
figure (`exporters.backends.nvml_memory`). SM activity
(``DCGM_FI_PROF_SM_ACTIVE``: the fraction of cycles an SM has a warp resident) comes from GPM only
(``nvmlGpmSampleGet`` + ``nvmlGpmMetricsGet``, ``NVML_GPM_METRIC_SM_UTIL`` / 100, between this scrape's sample and
the previous one), on Hopper and newer: a GPU's first scrape has no sample yet, a GPU without GPM (before Hopper,
or GPM answering NotSupported) has it unsupported, as dcgm-exporter emits no series without profiling; utilisation
is a different measure and is not passed off as it (the rules fall back to it, `gpu:sm_active:ratio`). A Hopper
GPU in MIG mode also gets it per GPU instance (``nvmlGpmMigSampleGet``, `exporters.backends.nvml_gpm`), as
dcgm-exporter publishes it. XIDs arrive as NVML events (``nvmlEventTypeXidCriticalError``), drained without
waiting on every read; the last one per GPU is reported, none for a GPU whose events NVML will not deliver
(`exporters.backends.nvml_xid`). Slowdown and shutdown thresholds are kept once read.

Power is NVML's 1-second average (``NVML_FI_DEV_POWER_AVERAGE``, falling back to ``nvmlDeviceGetPowerUsage``,
which NVML documents as that average on Ampere, except GA100, and newer, and as instantaneous power on GA100 (A100)
and older: there the fallback serves an instant sample), as dcgm-exporter's ``DCGM_FI_DEV_POWER_USAGE`` and
nvidia-smi's ``power.draw`` report it on those newer boards. The instant field swings around it: on a real
H200 at its 700 W limit it read 704.8 W while the average held 692 W (bench/device/h200-2026-12-04), and a
planner comparing power with the limit must not see a board above its own cap.

Memory health rides in the same batch: volatile single- and double-bit ECC totals (``NVML_FI_DEV_ECC_*_VOL_TOTAL``)
and the row remapper's correctable / uncorrectable remapped rows, pending and failure flags
(``NVML_FI_DEV_REMAPPED_*``); a field the batch does not return falls back to ``nvmlDeviceGetTotalEccErrors``
(volatile counter) and ``nvmlDeviceGetRemappedRows``.

A field the GPU does not have is not an error. NVML says so with NotSupported (``nvmlReturn`` 3 for a batched
field, ``NVMLError_NotSupported`` from a getter): no ECC on GeForce boards or with ECC switched off, no row remapper
before Ampere, no memory temperature on GDDR boards, no utilisation in MIG mode. Once the
source of last resort (the getter where there is one, else the batch) answers NotSupported, the field is
*unsupported* on that GPU: its series are left out, as dcgm-exporter leaves them out, it is reported in
`GpuReadings.unsupported` (published as ``gputide_exporter_unsupported_field_info``), and it is not read again while
the process runs. A batched field NotSupported also leaves that GPU's batch; GPM answering NotSupported turns GPM
off for that GPU (no SM activity). Support is a property of the board, its driver and its modes (ECC, MIG),
which change only with a GPU reset or a driver reload; the driver refuses both while a monitoring process such as
this one holds the GPU open, so the exporter restarts around them and asks again: there is no periodic re-check
(a re-initialisation of NVML, below, asks again).

Any other ``NVMLError`` (NoPermission, Unknown, ...) makes the field NaN and an ``(UUID, field)`` error, asked
again at the next scrape; a GPU that raises ``NVMLError_GpuIsLost`` loses every field for this scrape (its
unsupported fields stay unsupported, the others are errors) and its XID becomes 79 (fallen off the bus) until a
read finds it again. Errors never fail a scrape. A GPU NVML cannot name at start (lost before the exporter started)
is left out, the others served (`exporters.backends.nvml_identity`). NVML naming no GPU at all at start is NVML
down (below): asked again at each read, not a backend serving nothing until a restart.

Each GPU is read in a thread of its own (its fields, then its GPU instances' SM activity), all of them waited for
`GPU_TIMEOUT_S` at most (`exporters.backends.nvml_gpu_reads`): a GPU whose read has not returned by then (a call
hung in a GPU in recovery) has no series this scrape but its XID, and every other field an error, while the others
are served (its XID comes from the event drain, not from its read: the XID a GPU in recovery raised, say 119, or 79
while it is lost, is what says why it does not answer); it is not read again until that read returns. A late read
that has returned by the next collection is served there if that collection's own read of the GPU is late too (a GPU
always slower than the deadline is served one collection late), unless NVML was initialised again in between. The XID
drain, the DRA MIG listing and a re-initialisation still run in the collection's own thread; the drain runs after the
reads, and neither it nor the MIG listing asks NVML of a GPU whose read is late or stuck (one hung since the last
collection is known only once its read is late). A GPU not registered for XID events is registered by its own read,
in its job under the deadline (`XidEvents.register`), so a GPU always slower than the deadline is registered again
after a refusal or a set made anew, and one that hangs there is late, the collection not hung; the drain registers
only the GPUs no read job tried (nor one served late: its job tried before the last drain), each in its own job
under the deadline too (a set made anew, one that hangs there stuck, not the collection). NVML is not initialised
again while a GPU's read is still inside it (`_answers`: ``nvmlShutdown`` under a call in flight, and that read then
freeing a GPM sample of the old initialisation, could crash the process): the backend stays blind until the read
returns, and the probes fail meanwhile as for any stuck read. Should a read still outlive its initialisation, it stops
at its next step, before any GPM free, rather than use or mark the state built for the next one (`_fresh`); what it
read is dropped.

NVML itself can stop answering under the exporter or the power-cap agent (`exporters.backends.nvml_init`:
Uninitialized, DriverNotLoaded, LibRmVersionMismatch). The read stops at the first; from then every field of every
GPU is NaN and an error (a field the GPU is known not to have stays unsupported), its XID too: no series, never a 0.
Each later read (`read()`, and the agent's `power_limits()`, once per sync) first tries once to initialise NVML again,
then serves the GPUs NVML names now, as a restarted exporter would (`_serve`: a GPU no longer named is no longer
served, a new one is, labels follow NVML's index, everything said under the previous initialisation is asked anew,
the last XID kept by UUID). NVML counts its GPUs once per initialisation: a GPU that appears without one is served
only after the next re-initialisation or a restart. The collector follows each reading's `identity`.

Power-cap agent: `apply_power_caps({uuid: watts})` sets ``nvmlDeviceSetPowerManagementLimit`` (milliwatts)
between the GPU's minimum and its *default* limit, never above it, and `power_limits()` answers where each GPU's
limit is (`exporters.backends.nvml_power`); the next scrape reports a new limit in
``DCGM_FI_DEV_POWER_MGMT_LIMIT``: the management limit (``nvmlDeviceGetPowerManagementLimit``, what ``nvidia-smi -pl``
sets), the one the agent judges its caps by and DCGM reports under that name, not the limit the driver enforces
(field 190, ``nvmlDeviceGetEnforcedPowerLimit``), which an out-of-band limit can hold lower. A limit is set only
through a handle of the initialisation it was read under (`exporters.backends.nvml_power`: nothing while NVML does not
answer). The collection and the agent may share the backend from two threads (``--power-caps-file``): one lock keeps
their NVML calls, re-initialisations included, one at a time, so neither uses handles the other has replaced (a
GPU's read left hung past its deadline holds no lock). The agent leaves a GPU whose read is stuck alone (its limit
unread, a cap for it refused and asked again at the next sync): its call would hang too. Its own per-GPU calls run
in each GPU's own job with the reads' deadline (`GpuReads.call`): the agent the first to call a GPU in recovery
leaves that GPU stuck and the lock free, rather than holding it for good, and a Set that misses the deadline is
pending (`exporters.backends.nvml_power`), judged by the agent from what it returns (kept across a
re-initialisation). Each Set is made only while the GPU's limit is still the one the agent's decision read. A
collection waits for the lock `lock_timeout_s` at most (the collection timeout in the exporter), then fails
(`NvmlBusy`, logged once) rather than wait for good behind an agent's call that does not return.
`mig_instance(device_id)` tells pod attribution which GPU and GPU instance a device plugin's MIG device is, and a
DRA driver's MIG device by its placement (`exporters.backends.nvml_mig`; GPU instances listed once per `read()`):
NVML is never asked of a GPU whose read is late or stuck (its DRA devices None, an index on it its GPU with no GPU
instance, a MIG UUID among those walked on it before or on the other GPUs, else `MIG_GPU_UNKNOWN`), and None rather
than a wait past `lock_timeout_s` for the lock.
A command starts the backend through `started` (the exporter's ``--backend nvml``, `gputide power-cap-agent`): NVML
unusable here (pynvml not installed, or an ``NVMLError`` at its start: no libnvidia-ml, no driver, no permission on
the GPU devices, ...) is `NvmlUnusable`, exit 2, said as what is missing and what to do after the command's own words;
pynvml's errors are told by their class here, the one module that imports pynvml, and anything else (a bug) is raised
as it is, not as bad input.
Tests inject `exporters.backends.fake_nvml` as `nvml`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from balancer.errors import InputError
from exporters.backends.base import GpuIdentity, GpuReadings, InstanceReading, MigInstance
from exporters.backends.nvml_gpm import UNSUPPORTED, GpuActivity, MigActivity
from exporters.backends.nvml_gpu_reads import MAX_AGE_S, GpuReads
from exporters.backends.nvml_identity import Gpus, identify
from exporters.backends.nvml_identity import text as _text
from exporters.backends.nvml_init import NvmlInit
from exporters.backends.nvml_memory import NvmlMemory
from exporters.backends.nvml_mig import NvmlMigLookup
from exporters.backends.nvml_power import NvmlPowerCaps
from exporters.backends.nvml_xid import XidEvents
from exporters.collector import GPU_FIELD_NAMES
from exporters.power_caps import PowerCapError, PowerLimit, TargetUnavailable

log = logging.getLogger(__name__)
MIB = float(1 << 20)
# dcgm field -> (batched NVML field id, nvmlDeviceGetTotalEccErrors error type); the volatile counters
ECC_FIELDS = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("NVML_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
              "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("NVML_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")}
# dcgm field -> batched NVML field id, in the order of nvmlDeviceGetRemappedRows' (corr, unc, pending, failure)
REMAP_FIELDS = {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "NVML_FI_DEV_REMAPPED_COR",
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "NVML_FI_DEV_REMAPPED_UNC",
                "DCGM_FI_DEV_ROW_REMAP_PENDING": "NVML_FI_DEV_REMAPPED_PENDING",
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": "NVML_FI_DEV_REMAPPED_FAILURE"}
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
XID = "DCGM_FI_DEV_XID_ERRORS"
FB_FIELDS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
BATCH_ONLY = frozenset({"DCGM_FI_DEV_MEMORY_TEMP"})   # batched fields without a classic getter to fall back on
# how long a collection waits for its GPUs' reads: with the kubelet's answer after it (at most half the collection
# timeout, `balancer.cmd.exporter`), within the exporter's 8 s collection timeout
GPU_TIMEOUT_S = 3.0
# how long a collection waits for the power-cap agent's NVML calls (the backend's lock): the exporter's collection
# timeout (`balancer.cmd.exporter.watch_gpu_reads` sets it), so scrapes meanwhile get what a late collection gets
LOCK_TIMEOUT_S = 8.0
# the least the XID drain's registrations are waited for where the reads used their whole deadline (a late GPU): one
# answers in microseconds, so after a set made anew the healthy GPUs are heard that collection, not blanked
XID_GRACE_S = 0.05


def _field_value(fv: Any, nvml: Any) -> float:
    t = fv.valueType
    attr = {nvml.NVML_VALUE_TYPE_DOUBLE: "dVal", nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
            nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
            nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal"}.get(t, "ullVal")
    return float(getattr(fv.value, attr))


class _Out:
    """The fields of one GPU's read that came back without a value: errors, and fields the GPU does not have."""

    __slots__ = ("errors", "unsupported")

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.unsupported: list[str] = []


class _Stale(Exception):
    """A GPU's read that outlived the NVML initialisation it began under (`NvmlBackend._fresh`)."""


NVML_WHERE = ("run it on a GPU node whose NVIDIA driver is loaded, libnvidia-ml.so.1 in its container (the NVIDIA "
              "container runtime mounts it: runtimeClassName nvidia)")
# NoPermission's and Unknown's advice, each command adding what else it needs (the power-cap agent: root with
# CAP_SYS_ADMIN)
NVML_DEVICES = ("give it the GPU devices, /dev/nvidiactl and /dev/nvidia* (the NVIDIA container runtime with "
                "NVIDIA_VISIBLE_DEVICES=all)")
NVML_START_ERRORS = {   # pynvml's error class at start, by its name in pynvml -> what is missing, in words; what to do
    "NVMLError_LibraryNotFound": ("libnvidia-ml.so.1, NVML's library (the NVIDIA driver's), could not be loaded",
                                  NVML_WHERE),
    "NVMLError_DriverNotLoaded": ("the NVIDIA driver is not loaded, though libnvidia-ml.so.1 was found", NVML_WHERE),
    "NVMLError_LibRmVersionMismatch": ("libnvidia-ml.so.1 does not match the NVIDIA kernel module loaded (the driver "
                                       "upgraded, its old module still in the kernel)",
                                       "reboot the node, or reload the NVIDIA kernel module once nothing uses the "
                                       "GPUs (a libnvidia-ml.so.1 in the image, not the node's: let the NVIDIA "
                                       "container runtime mount the node's)"),
    "NVMLError_NoPermission": ("this process may not use the GPU devices (NVML answered 'Insufficient "
                               "Permissions')", NVML_DEVICES),
    # in a container, NVML's answer when the GPU devices cannot be opened: their cgroup rules lost (a systemd
    # daemon-reload under the systemd cgroup driver, NVIDIA/nvidia-docker#1730) or never given
    "NVMLError_Unknown": ("NVML answered 'Unknown Error', in a container usually as it cannot open the GPU devices "
                          "(access lost at a systemd daemon-reload, which a new container gets back: "
                          "NVIDIA/nvidia-docker#1730)", NVML_DEVICES),
    "NVMLError_FunctionNotFound": ("the NVIDIA driver is older than the installed nvidia-ml-py expects (a function "
                                   "it calls is not in libnvidia-ml.so.1)",
                                   "upgrade the NVIDIA driver, or install an older nvidia-ml-py, no newer than the "
                                   "driver (its versions follow the driver's)"),
}
NO_PYNVML = ("pynvml, NVML's Python binding (nvidia-ml-py), is not installed", "install nvidia-ml-py (gputide's "
             "image has it)")
NVML_FAILED = ("NVML failed at start (initialising it or listing the GPUs)", NVML_WHERE)


class NvmlUnusable(InputError):
    """NVML cannot be used on this machine: exit 2 at a command's start. Said after the command's own words (`lead`:
    which command, what it needs NVML for) as what is missing, with pynvml's error, and what to do (NoPermission: the
    devices, not a node with a driver, which it has), not as an invalid flag: the power-cap agent has no
    ``--backend``, and the exporter's ``--backend nvml`` is right on a GPU node."""

    def __init__(self, lead: str, exc: BaseException, missing: str, todo: str) -> None:
        super().__init__(None, "NVML", "libnvidia-ml.so.1", NVML_WHERE, f"{type(exc).__name__}: {exc}")
        self.args = (f"{lead}, which cannot be used on this machine: {missing} (pynvml: {self.detail}); {todo}",)


def started(lead: str, devices: str = "", **kwargs: Any) -> NvmlBackend:
    """`NvmlBackend(**kwargs)` at a command's start, or `NvmlUnusable` (exit 2) where NVML cannot be used here: pynvml
    not installed, or an ``NVMLError`` at NVML's start (initialising it, or listing the GPUs once it started), told
    by its class. `devices`: what the command needs beyond `NVML_DEVICES` where that is the advice. Anything
    else (an AttributeError, a bug) is raised as it is: catching every exception said a bug as bad input."""
    try:
        import pynvml
    except ImportError as exc:
        if exc.name != "pynvml":   # pynvml there, but something it imports is not: no missing binding
            raise
        raise NvmlUnusable(lead, exc, *NO_PYNVML) from exc
    try:
        return NvmlBackend(**kwargs)
    except pynvml.NVMLError as exc:
        missing, todo = next((words for name, words in NVML_START_ERRORS.items()
                              if isinstance(exc, getattr(pynvml, name, ()))), NVML_FAILED)
        raise NvmlUnusable(lead, exc, missing, todo + devices if todo is NVML_DEVICES else todo) from exc


class NvmlBusy(TimeoutError):
    """A collection that could not take the backend's lock within `NvmlBackend.lock_timeout_s`: the power-cap
    agent's NVML call has not returned (a GPU in recovery). The collection fails, and ends, rather than wait on."""


class NvmlBackend:
    def __init__(self, nvml: Any = None, *, hostname: str | None = None, reads: GpuReads | None = None) -> None:
        """`reads`: how each GPU is read, and waited for (`exporters.backends.nvml_gpu_reads`: `GPU_TIMEOUT_S`, its
        `watching` settable later, to `exporters.health.CollectHealth.watching` in the exporter)."""
        self.reads = reads or GpuReads(GPU_TIMEOUT_S)
        self.lock_timeout_s = LOCK_TIMEOUT_S
        self.limits_max_age_s = MAX_AGE_S   # a late limit read used at the agent's next sync: `agent_syncs_every`
        self._busy = False   # the last read found the lock held past lock_timeout_s (logged once per episode)
        self._mig_busy = False   # a MIG lookup of this collection found the lock held: the others do not wait
        self._local = threading.local()   # a GPU read's thread: the initialisation it began under
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            self._start(nvml, hostname or socket.gethostname())
        except BaseException:   # no backend to shut NVML down later: the start's error said, not shutdown's
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
            raise

    def _start(self, nvml: Any, host: str) -> None:
        """Everything after ``nvmlInit`` at the backend's start: a call that raises here ends the start, and NVML
        (initialised, its reference counted) is shut down, not left to the process's end (a caller going on without
        NVML, a test's next backend, held an initialisation nobody would shut down)."""
        driver = _text(self._try_static(nvml.nvmlSystemGetDriverVersion, ""))   # DCGM_FI_DRIVER_VERSION label
        self._init = NvmlInit(nvml, host, driver)
        self._lock = threading.Lock()   # NVML's users: the collection, the power-cap agent (another thread)
        self._limits_read: int | None = None   # the initialisation (`NvmlInit.reinits`) power_limits() last read under
        self._fatal = (nvml.NVMLError_GpuIsLost, *self._init.gone)   # not one field's error: the read stops
        self._batch = {nvml.NVML_FI_DEV_MEMORY_TEMP: "DCGM_FI_DEV_MEMORY_TEMP",
                       nvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                       nvml.NVML_FI_DEV_POWER_AVERAGE: "DCGM_FI_DEV_POWER_USAGE",
                       **{getattr(nvml, fid): name for name, (fid, _) in ECC_FIELDS.items()},
                       **{getattr(nvml, fid): name for name, fid in REMAP_FIELDS.items()}}
        self._xids: XidEvents | None = None
        self._power: NvmlPowerCaps | None = None
        self._xid_until: float | None = None   # when this collection's XID registrations are no longer waited for
        self.identity: tuple[GpuIdentity, ...] = ()
        self._serve(identify(nvml, host, driver))   # a GPU NVML cannot name is left out (`nvml_identity`)
        if not self.identity:
            self._init.no_gpu()   # asked again at each read, as after NVML stopped answering

    def _serve(self, gpus: Gpus) -> None:
        """Everything tied to one NVML initialisation, built anew for the GPUs NVML names: at start, and after NVML
        is initialised again. What NVML said of a GPU under the previous one (unsupported fields, GPM, MIG mode,
        memory version 2, event registrations) is asked again; its GPM samples and event set are dropped, not freed
        (NVML may have freed them at its shutdown: freeing twice would crash the process, leaking costs a few KiB
        per re-initialisation). The last XID heard of each GPU still served is kept, by UUID, and so are the power-cap
        agent's pending Sets (`NvmlPowerCaps.late_sets`): what one returned says whether it took, which the limit read
        under the new initialisation cannot (an operator's limit at the watts asked)."""
        nvml = self.nvml
        heard = {} if self._xids is None else dict(zip((g.uuid for g in self.identity), self._xids.last.tolist()))
        self.identity = ids = gpus.identity
        self.handles = handles = gpus.handles
        n = len(ids)
        minors = [self._try_static(lambda h=h: nvml.nvmlDeviceGetMinorNumber(h), None) for h in handles]
        self._thresholds = {"DCGM_FI_DEV_SLOWDOWN_TEMP": (nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, np.full(n, np.nan)),
                            "DCGM_FI_DEV_SHUTDOWN_TEMP": (nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, np.full(n, np.nan))}
        self._sm = GpuActivity(nvml, handles, [g.uuid for g in ids], self._init.gone, fresh=self._fresh)
        self._mig_activity = MigActivity(nvml, handles, self._sm.on, fresh=self._fresh)   # before GPM turns off
        self._xids = XidEvents(nvml, handles, [g.uuid for g in ids], lambda h: _text(nvml.nvmlDeviceGetUUID(h)),
                               last=[heard.get(g.uuid, 0.0) for g in ids])
        self._xids.in_jobs = self._register_xids
        self._batch_ids = [list(self._batch) for _ in handles]   # a field NotSupported leaves its GPU's batch
        self._unsupported: set[tuple[int, str]] = set()   # (GPU, field) NVML answered NotSupported: never asked again
        self._mig = NvmlMigLookup(nvml, gpus.by_index, {m: (h, g.uuid) for m, h, g in zip(minors, handles, ids)
                                                        if m is not None},   # DRA names a GPU by its minor
                                  {int(g.gpu): g.uuid for g in ids})
        self.device_files = {f"nvidia{m}": g.uuid for m, g in zip(minors, ids) if m is not None}
        self._reasons = [f for f in (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None),   # R535 and newer
                                     getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)) if f]
        self._memory = NvmlMemory(nvml)
        self._power = NvmlPowerCaps(nvml, {g.uuid: h for g, h in zip(ids, handles, strict=True)}, self._init,
                                    late_sets=None if self._power is None else self._power.late_sets())

    @property
    def nvml_reinits(self) -> int:
        """Times NVML was initialised again after it stopped answering (`exporters.backends.nvml_init`)."""
        return self._init.reinits

    @property
    def nvml_reinit_failures(self) -> int:
        """Attempts to initialise NVML again that failed (at most one per read)."""
        return self._init.failures

    # ---- set-up helpers ----------------------------------------------------------------------------------------
    def _try_static(self, fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except self.nvml.NVMLError:
            return default

    # ---- reading -----------------------------------------------------------------------------------------------
    def read(self) -> GpuReadings:
        """Every GPU's fields; while NVML does not answer (`exporters.backends.nvml_init`), one attempt to initialise
        it again, and every field an error until it succeeds. Raises `NvmlBusy` if the power-cap agent holds NVML
        (the backend's lock) past `lock_timeout_s`: a failed collection, never one that waits for good."""
        if not self._lock.acquire(timeout=self.lock_timeout_s):
            why = (f"no GPU read: the power-cap agent's NVML call has held the backend for over "
                   f"{self.lock_timeout_s:g} s (a GPU in recovery?); the collection fails rather than wait on")
            if not self._busy:
                self._busy = True
                log.error("%s", why)
            raise NvmlBusy(why)
        try:
            self._mig_busy = False
            if self._busy:
                self._busy = False
                log.warning("the power-cap agent's NVML call returned: GPUs read again")
            if not self._answers():
                return self._blind()
            try:
                return self._read()
            except self._init.gone as exc:
                self._init.lost(exc)
                return self._blind()
        finally:
            self._lock.release()

    def _answers(self) -> bool:
        """Whether NVML answers, after one attempt to initialise it again where it did not (`NvmlInit.answers`).
        Not while a GPU's read is still inside NVML (`GpuReads.stuck`): ``nvmlShutdown`` under a call in flight, and
        that read then freeing what it allocated under the old initialisation, could crash the process; the
        re-initialisation waits until that read returns (`NvmlInit.deferred`, logged once)."""
        if self._init.down is not None and (stuck := self.reads.stuck()):
            self._init.deferred(stuck)
            return False
        return self._init.answers([g.uuid for g in self.identity], self._serve)

    def _read(self) -> GpuReadings:
        vals = {name: np.full(len(self.handles), np.nan) for name in GPU_FIELD_NAMES}
        errors: list[tuple[str, str]] = []
        unsupported: list[tuple[str, str]] = []
        instances: list[InstanceReading] = []
        self._mig.new_collection()   # GPU instance placements are listed again for this collection's DRA devices
        now = self._init.reinits   # the initialisation each read is of: when it is asked for, not when it starts
        started = self.reads.clock()
        done = self.reads.run({g.uuid: lambda k=k, h=h: self._read_gpu(k, h, now)
                                for k, (g, h) in enumerate(zip(self.identity, self.handles, strict=True))})
        for read in done.values():   # NVML itself stopped answering (`read`), or a fault of this module: raised
            if read.error is not None and not isinstance(read.error, self.nvml.NVMLError_GpuIsLost):
                raise read.error
        # not registered from here (it would hang the collection with the GPU): a GPU hung since the last collection
        # (late by now, after the reads) and one served late, whose read job tried its registration (`XidEvents`)
        skip = set(self.reads.stuck()) | {uuid for uuid, read in done.items() if read.late}
        # the drain's registrations (a set made anew: twice in one drain) end with the reads' deadline, not a fresh
        # one each: the collection stays within it (`balancer.cmd.exporter.watch_gpu_reads`), but for a short grace
        grace = min(XID_GRACE_S, self.reads.timeout_s)
        self._xid_until = max(started + self.reads.timeout_s, self.reads.clock() + grace)
        self._xids.drain(skip=[k for k, g in enumerate(self.identity) if g.uuid in skip])
        for k, g in enumerate(self.identity):
            out = _Out()
            read = done.get(g.uuid)
            if read is None:   # late or stuck (`exporters.backends.nvml_gpu_reads`): no series but its XID
                self._unread(k, vals, out)
            elif read.error is not None:   # GpuIsLost
                self._xids.lost(k)
                self._unread(k, vals, out)
            elif read.result[0] != self._init.reinits:   # a late read of an earlier initialisation: not served
                self._unread(k, vals, out)
            else:
                _, mine, out, gis = read.result
                for name in GPU_FIELD_NAMES:
                    vals[name][k] = mine[name][k]
                instances.extend(gis)
                self._xids.found(k)   # back on the bus: no longer 79
            errors.extend((g.uuid, f) for f in out.errors)
            unsupported.extend((g.uuid, f) for f in out.unsupported)
        vals[XID] = xid = self._xids.values()   # heard by the drain, a late GPU's too (79 while it is lost)
        for k in np.flatnonzero(np.isnan(xid)).tolist():   # events NVML will not deliver for that GPU
            (unsupported if self._xids.unsupported[k] else errors).append((self.identity[k].uuid, XID))
        return GpuReadings(identity=self.identity, values=vals, errors=tuple(errors), unsupported=tuple(unsupported),
                           instances=tuple(instances))

    def _read_gpu(self, k: int, h: Any, reinits: int) -> tuple[int, dict[str, np.ndarray], _Out,
                                                                list[InstanceReading]]:
        """GPU `k`'s fields and its GPU instances' SM activity, in a thread of its own (`GpuReads`): into arrays of
        its own, which `_read` copies from only if it returned in time, or late under the same initialisation
        (`reinits`: the one `h` is of, returned first). Its XID registration too, where it is not listening: under
        the deadline, a registration that hangs leaves this GPU late, not the collection hung (`XidEvents.register`)."""
        self._local.reinits = reinits
        vals = {name: np.full(len(self.handles), np.nan) for name in GPU_FIELD_NAMES}
        out = _Out()
        self._read_one(k, h, vals, out)
        self._fresh()
        self._xids.register(k)
        self._fresh()
        return reinits, vals, out, self._mig_activity.read_gpu(k)

    def _register_xids(self, gpus: Sequence[int]) -> None:
        """The XID drain's registrations, each in its GPU's own job (`GpuReads.call`) until what is left of this
        collection's reads' deadline (`_xid_until`: they took a fresh deadline each, the drain's and a rebuild's,
        and a collection took up to three): one that hangs (a GPU in recovery since its read) leaves that GPU stuck,
        not the collection hung, as the GPU's read job's own registration does."""
        xids = self._xids
        self.reads.call({self.identity[k].uuid: (lambda k=k: xids.register(k)) for k in gpus}, "XID registration",
                        until=self._xid_until)

    def _fresh(self) -> None:
        """Raise `_Stale` in a GPU's read that outlived its NVML initialisation (hung across a re-initialisation:
        `_read` no longer waits for it), before it uses or writes the state `_serve` built for the next one."""
        if getattr(self._local, "reinits", self._init.reinits) != self._init.reinits:
            raise _Stale

    def _mark(self, k: int, fields: Sequence[str]) -> None:
        """`fields` of GPU `k` are unsupported (NVML answered NotSupported): not asked again."""
        self._fresh()
        self._unsupported.update((k, f) for f in fields)

    def _unread(self, k: int, vals: dict[str, np.ndarray], out: _Out) -> None:
        """GPU `k` read nothing: every field but its XID NaN, an error unless the GPU is known not to have it."""
        for name in GPU_FIELD_NAMES:
            if name != XID:
                vals[name][k] = np.nan
                (out.unsupported if (k, name) in self._unsupported else out.errors).append(name)

    def _blind(self) -> GpuReadings:
        """A read while NVML does not answer: every field of every GPU NaN and an error, its XID too (no event can
        be heard), but what a GPU is known not to have, which stays unsupported."""
        vals = {name: np.full(len(self.identity), np.nan) for name in GPU_FIELD_NAMES}
        errors: list[tuple[str, str]] = []
        unsupported: list[tuple[str, str]] = []
        for k, g in enumerate(self.identity):
            out = _Out()
            self._unread(k, vals, out)
            (out.unsupported if self._xids.unsupported[k] else out.errors).append(XID)
            errors.extend((g.uuid, f) for f in out.errors)
            unsupported.extend((g.uuid, f) for f in out.unsupported)
        return GpuReadings(identity=self.identity, values=vals, errors=tuple(errors), unsupported=tuple(unsupported))

    def _ask(self, k: int, fields: Sequence[str], fn: Callable[[], Any], out: _Out) -> Any:
        """`fn()` for `fields` of GPU `k`, or None where it gave nothing: NotSupported makes the fields unsupported
        for good (`fn` is not called for them again), another NVMLError counts them as errors. GpuIsLost, and NVML
        itself not answering, propagate."""
        nvml = self.nvml
        self._fresh()
        if all((k, f) in self._unsupported for f in fields):
            out.unsupported.extend(fields)
            return None
        try:
            return fn()
        except self._fatal:
            raise
        except nvml.NVMLError_NotSupported:
            self._mark(k, fields)
            out.unsupported.extend(fields)
        except nvml.NVMLError:
            out.errors.extend(fields)
        return None

    def _read_one(self, k: int, h: Any, vals: dict[str, np.ndarray], out: _Out) -> None:
        nvml = self.nvml

        def get(field: str, fn: Callable[[], float]) -> float:
            v = self._ask(k, (field,), fn, out)
            if v is None:
                return np.nan
            vals[field][k] = float(v)
            return float(v)

        got = self._batched(k, h)
        scale = {"DCGM_FI_DEV_POWER_USAGE": 1e-3}
        fallback = {
            "DCGM_FI_DEV_MEMORY_TEMP": None,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h),
            "DCGM_FI_DEV_POWER_USAGE": lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda: nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,   # no batch
        }
        for field, fb in fallback.items():
            if field in got:
                vals[field][k] = got[field] * scale.get(field, 1.0)
            elif fb is not None:
                get(field, fb)
            else:   # the batch is its only source: it said NotSupported (remembered by _batched) or failed
                (out.unsupported if (k, field) in self._unsupported else out.errors).append(field)
        self._memory_health(k, h, got, vals, out)
        for field, (which, known) in self._thresholds.items():
            if np.isnan(known[k]):   # read until it answers once: thresholds are the board's
                known[k] = get(field, lambda which=which: nvml.nvmlDeviceGetTemperatureThreshold(h, which))
            vals[field][k] = known[k]
        get("DCGM_FI_DEV_GPU_TEMP", lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
        mem = self._ask(k, FB_FIELDS, lambda: self._memory.read(k, h), out)
        if mem is not None:
            vals["DCGM_FI_DEV_FB_USED"][k] = round(mem.used / MIB)
            vals["DCGM_FI_DEV_FB_FREE"][k] = round(mem.free / MIB)
            if k in self._memory.v1:   # version 1: used includes the reserved, which it does not report
                self._mark(k, ("DCGM_FI_DEV_FB_RESERVED",))
                out.unsupported.append("DCGM_FI_DEV_FB_RESERVED")
            else:
                vals["DCGM_FI_DEV_FB_RESERVED"][k] = round(mem.reserved / MIB)
        get("DCGM_FI_DEV_GPU_UTIL", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu)
        get("DCGM_FI_DEV_SM_CLOCK", lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        get("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", lambda: self._clock_reasons(h))
        self._sm_active(k, h, vals, out)

    def _sm_active(self, k: int, h: Any, vals: dict[str, np.ndarray], out: _Out) -> None:
        """SM activity from GPM (`exporters.backends.nvml_gpm.GpuActivity`): none on a GPU's first read."""
        self._fresh()
        sm, fault = self._sm.read(k, h)
        if sm is not None:
            vals[SM_ACTIVE][k] = sm
        elif fault == UNSUPPORTED:   # no GPM (before Hopper, or NotSupported): no SM activity, as dcgm-exporter
            self._mark(k, (SM_ACTIVE,))
            out.unsupported.append(SM_ACTIVE)
        elif fault:
            out.errors.append(SM_ACTIVE)

    def _clock_reasons(self, h: Any) -> int:
        """``nvmlDeviceGetCurrentClocksEventReasons``, or its name before R535 where the driver lacks the new one:
        nvidia-ml-py has both, and calls into a driver without the symbol raise FunctionNotFound."""
        nvml = self.nvml
        while True:
            reasons = self._reasons   # GPUs are read in threads of their own: one drops the new name, once
            try:
                return reasons[0](h)
            except nvml.NVMLError_FunctionNotFound:
                if len(reasons) == 1:
                    raise
                if self._reasons is reasons:
                    log.info("driver without nvmlDeviceGetCurrentClocksEventReasons (before R535): clock event "
                             "reasons from nvmlDeviceGetCurrentClocksThrottleReasons")
                    self._reasons = reasons[1:]

    def _batched(self, k: int, h: Any) -> dict[str, float]:
        """The fields of GPU `k`'s ``nvmlDeviceGetFieldValues`` call that came back; the caller falls back for the
        rest. A field answering NotSupported leaves this GPU's batch, and is unsupported if it has no getter."""
        nvml, batch, ids = self.nvml, self._batch, self._batch_ids[k]
        got: dict[str, float] = {}
        if not ids:
            return got
        try:
            answers = [(fv.fieldId, fv.nvmlReturn, fv) for fv in nvml.nvmlDeviceGetFieldValues(h, ids)]
        except self._fatal:
            raise
        except nvml.NVMLError_NotSupported:   # no batched reads on this GPU at all
            answers = [(fid, nvml.NVML_ERROR_NOT_SUPPORTED, None) for fid in ids]
        except nvml.NVMLError:
            return got   # the classic getters instead
        for fid, ret, fv in answers:
            if fid not in batch:
                continue
            if ret == nvml.NVML_SUCCESS:
                got[batch[fid]] = _field_value(fv, nvml)
            elif ret == nvml.NVML_ERROR_NOT_SUPPORTED:
                ids.remove(fid)
                if batch[fid] in BATCH_ONLY:
                    self._mark(k, (batch[fid],))
        return got

    def _memory_health(self, k: int, h: Any, got: Mapping[str, float], vals: dict[str, np.ndarray],
                       out: _Out) -> None:
        """ECC totals and the row remapper: the batch's values, else the classic getters (module docstring)."""
        nvml = self.nvml

        def ecc(fields: list[str]) -> list[float]:
            return [nvml.nvmlDeviceGetTotalEccErrors(h, getattr(nvml, ECC_FIELDS[f][1]), nvml.NVML_VOLATILE_ECC)
                    for f in fields]

        def remap(fields: list[str]) -> list[float]:
            rows = dict(zip(REMAP_FIELDS, nvml.nvmlDeviceGetRemappedRows(h)))
            return [rows[f] for f in fields]

        for fields, fetch in ((ECC_FIELDS, ecc), (REMAP_FIELDS, remap)):
            missing = []
            for f in fields:
                if f in got:
                    vals[f][k] = got[f]
                else:
                    missing.append(f)
            if missing:
                values = self._ask(k, missing, lambda fetch=fetch, missing=missing: fetch(missing), out)
                if values is not None:
                    for f, v in zip(missing, values, strict=True):
                        vals[f][k] = float(v)

    def mig_instance(self, device_id: str) -> MigInstance | None:
        """The MIG device a device plugin's ID or a DRA driver's device name names (`exporters.backends.nvml_mig`),
        for pod attribution. Never asking NVML of a GPU whose read is late or stuck (the call would hang there too, in
        the collection's thread, under the lock: `NvmlMigLookup.__call__`), and None when the power-cap agent holds
        the lock past `lock_timeout_s`: the first lookup of a collection waits that long, the others then not at all
        (no MIG attribution this scrape, rather than a collection waiting for good)."""
        if not self._lock.acquire(timeout=0 if self._mig_busy else self.lock_timeout_s):
            self._mig_busy = True
            return None
        try:
            self._mig_busy = False
            return self._mig(device_id, skip=frozenset(self.reads.stuck()))
        finally:
            self._lock.release()

    # ---- power-cap agent ---------------------------------------------------------------------------------------
    def apply_power_caps(self, caps: Mapping[str, float]) -> dict[str, float]:
        """Set each GPU's power limit, clamped to [its minimum, its default]; raises `PowerCapError` if refused,
        every GPU while NVML does not answer (never initialised again here: `power_limits` is). A GPU whose read is
        stuck in NVML (`GpuReads.stuck`) is refused without asking NVML (the call would hang too): not set, so the agent
        asks again at its next sync. A Set that misses the reads' deadline is refused as pending
        (`PowerCapError.pending`): it may still land."""
        with self._lock:
            if why := self._init.refusal(self._limits_read):
                raise PowerCapError({}, dict.fromkeys(caps, why))
            return self._power.apply_power_caps(caps, call=lambda jobs: self.reads.call(jobs, "power-limit Set"),
                                                stuck=self.reads.stuck())

    def power_limits(self) -> dict[str, PowerLimit]:
        """Each GPU's power management limit now and its default, in watts (one NVML call a GPU: the default and
        allowed range are asked once per initialisation, a NotSupported answer for at most `NOT_SUPPORTED_TTL_S`;
        again after a transient error or an answer no board gives, `NvmlPowerCaps._constant`); while NVML does not
        answer, one attempt to initialise it again, and `TargetUnavailable` if it fails. A GPU whose read is stuck in
        NVML reads NaN (unread: the agent judges nothing on it) without asking NVML."""
        with self._lock:
            if not self._answers():
                raise TargetUnavailable(self._init.why())
            self._limits_read = self._init.reinits
            return self._power.power_limits(call=lambda jobs: self.reads.call(jobs, "power-limit read"),
                                            stuck=self.reads.stuck(),
                                            young=lambda read: self.reads.young(read, self.limits_max_age_s))

    def agent_syncs_every(self, interval_s: float) -> None:
        """The power-cap agent syncs every `interval_s`: a limit read that missed its deadline is used at the next
        `power_limits` if it began at most two intervals ago. Its own bound, not the reads' `max_age_s` (the
        exporter's ``--serve-stale-for``): at a ``--caps-interval`` at or above that (or ``--serve-stale-for 0s``) a
        GPU slower than the deadline was never capped nor given back; and raising the reads' to the agent's interval
        changed when a read counts as stuck."""
        self.limits_max_age_s = 2.0 * interval_s

    def returned_sets(self) -> dict[str, float | str]:
        """The power-limit Sets that missed the reads' deadline (pending) and have returned since: the watts set, or
        why refused (`exporters.backends.nvml_power`); no NVML call, so not behind the lock."""
        return self._power.returned_sets()

    def close(self) -> None:
        """``nvmlShutdown``, not behind the lock (a collection stuck in NVML must not hold up the process's exit),
        and not while a GPU's read is still inside NVML: a shutdown under a call in flight could crash the process
        on its way out; its exit releases NVML all the same."""
        if stuck := self.reads.stuck():
            log.warning("NVML not shut down at exit: the read of %s is still inside it", ", ".join(stuck))
            return
        self._init.close()
