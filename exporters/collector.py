"""The exporter's prometheus-client Collector: reads a backend at scrape time, builds fresh metric families.

No timers and no background threads: every `collect()` calls `backend.read()` once and turns the arrays into
dcgm-exporter series (docs/metrics.md section 1) with dcgm-exporter's names, help texts and labels. Collects run
one at a time: the HTTP server answers each scrape from its own thread (two Prometheus replicas, or a curl beside
Prometheus, scrape at once), and a read keeps state between scrapes that two reads at once would corrupt (the NVML
backend's GPM sample, which the next read compares with its own and frees; the fields NVML does not support; the
label caches here). The exporter's server goes further (`exporters.health`): one collection at a time in a thread
of its own, shared by the scrapes that arrive meanwhile, and a scrape waits for it only so long. It also publishes

* ``gputide_gpu_workload_info{UUID,namespace,pod,workload_class} 1`` (attribution join table; a pod on a MIG
  instance also has dcgm-exporter's ``GPU_I_ID`` and ``GPU_I_PROFILE``),
* ``DCGM_FI_DEV_XID_ERRORS`` with dcgm-exporter's ``err_code`` and ``err_msg`` labels too (`exporters.xid`),
* ``DCGM_FI_PROF_SM_ACTIVE`` also per GPU instance of a MIG GPU (``GPU_I_ID``, ``GPU_I_PROFILE``), where the backend
  reads it (`GpuReadings.instances`), as dcgm-exporter publishes it,
* ``gputide_exporter_scrape_duration_seconds`` (how long this collect took to read and build),
* ``gputide_exporter_collect_errors_total{UUID,field}`` (cumulative count of fields that failed to read),
* ``gputide_exporter_unsupported_field_info{UUID,field} 1`` (fields a GPU does not have; only those, so a fleet of
  boards that support everything adds no series),
* ``gputide_exporter_gpus`` (the GPUs the backend serves) and ``gputide_exporter_gpus_read`` (those of which this
  collection read at least one field): with none read (every field of every GPU failed, or no GPU at all) the
  collection has nothing real in it, and `nothing_read` says so to the exporter's readiness (`exporters.health`).
  Values a backend keeps rather than reads at each collection do not count (`KEPT`: the XID, heard from events, or
  79 for a GPU fallen off the bus; the temperature thresholds, read once): with every getter failing they still had
  values, so a collection that read nothing counted every GPU read and the exporter stayed ready,
* ``gputide_exporter_nvml_reinits_total`` and ``gputide_exporter_nvml_reinit_failures_total`` where the backend
  counts them (NVML initialised again after it stopped answering, `exporters.backends.nvml_init`),
* the simulated serving series ``gputide_inference_*{service}`` when the backend provides them.

Per-GPU families are `ArrayMetric`s: they keep the values as a numpy array and the per-GPU label sets as shared
dicts, so `exporters.exposition.render` writes 20 x 8,192 samples without building a Python object per sample;
their `samples` are still materialised on demand for `registry.get_sample_value` and prometheus_client's own
exposition. `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` is a counter whose sample name has no ``_total`` suffix,
exactly as dcgm-exporter exposes it (so are the ECC and remapped-row counters); prometheus_client's
`generate_latest` would append ``_total`` to its ``# TYPE`` line, which is why the server renders with
`exporters.exposition.render`.

A field a GPU does not support (NVML's NotSupported: ECC on GeForce boards or with ECC switched off, row remapping
before Ampere, memory temperature on GDDR boards, ...) has no series for that GPU, as with dcgm-exporter, and is no
collect error: an alert or dashboard on the error counter sees real failures only (NoPermission, Unknown, a GPU
fallen off the bus), and an operator sees what each GPU lacks in ``gputide_exporter_unsupported_field_info``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from exporters.backends.base import Backend, GpuIdentity, GpuReadings
from exporters.xid import xid_labels

# (name, type, help) in dcgm-exporter's words
GPU_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "Slowdown temperature threshold (in C)."),
    ("DCGM_FI_DEV_SHUTDOWN_TEMP", "gauge", "Shutdown temperature threshold (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed."),
    ("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether remapping of rows is pending."),
)
GPU_FIELD_NAMES = tuple(f[0] for f in GPU_FIELDS)
GPUS, GPUS_READ = "gputide_exporter_gpus", "gputide_exporter_gpus_read"
# values kept between collections rather than read in each: not a GPU read (module docstring)
KEPT = frozenset({"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_SHUTDOWN_TEMP"})
# backend attribute -> (counter, help); published where the backend has the attribute (the NVML backend)
BACKEND_COUNTERS = {
    "nvml_reinits": ("gputide_exporter_nvml_reinits", "Times NVML was initialised again after it stopped answering "
                     "(uninitialised under the exporter, the driver unloaded or reloaded)."),
    "nvml_reinit_failures": ("gputide_exporter_nvml_reinit_failures", "Attempts to initialise NVML again that "
                             "failed (at most one per collection while NVML does not answer)."),
}

SERVICE_FIELDS = (
    ("gputide_inference_requests", "counter", "Requests offered to the simulated service.", "requests_total"),
    ("gputide_inference_slo_violations", "counter", "Requests over their latency SLO (simulated).",
     "slo_violations_total"),
    ("gputide_inference_demand_rps", "gauge", "Offered load of the simulated service (req/s).", "demand_rps"),
    ("gputide_inference_latency_p99_seconds", "gauge", "p99 latency of the simulated service (s).", "latency_p99_s"),
    ("gputide_inference_replicas", "gauge", "Replicas the simulated service asked for (spec.replicas).", "replicas"),
    ("gputide_inference_replicas_ready", "gauge", "Replicas of the simulated service placed and warm "
     "(status.availableReplicas).", "replicas_ready"),
)


class ArrayMetric(Metric):
    """A metric family whose samples are one value per GPU: an array plus shared per-GPU label dicts."""

    def __init__(self, name: str, documentation: str, typ: str, label_sets: Sequence[dict[str, str]],
                 label_strs: Sequence[str], values: np.ndarray) -> None:
        super().__init__(name, documentation, typ)
        self.label_sets = label_sets
        self.label_strs = label_strs
        self.values = values

    @property
    def samples(self) -> list[Sample]:  # type: ignore[override]
        return [Sample(self.name, lbl, float(v)) for lbl, v in zip(self.label_sets, self.values.tolist())]

    @samples.setter
    def samples(self, _value: list[Sample]) -> None:  # Metric.__init__ assigns []; the array is the truth
        pass


def label_str(labels: dict[str, str]) -> str:
    """Labels rendered as in the text exposition format, escaped, in sorted order (as prometheus_client does)."""
    def esc(v: str) -> str:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")

    return ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items()))


class GpuCollector(Collector):
    """Reads `backend` on every scrape; see the module docstring."""

    def __init__(self, backend: Backend, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.backend = backend
        self._clock = clock
        self._errors: Counter[tuple[str, str]] = Counter()
        self._identity: tuple[GpuIdentity, ...] | None = None
        self._label_sets: list[dict[str, str]] = []
        self._label_strs: list[str] = []
        self._wl_key: object = None
        self._wl_sets: list[dict[str, str]] = []
        self._wl_strs: list[str] = []
        self._us_key: tuple[tuple[str, str], ...] = ()
        self._us_sets: list[dict[str, str]] = []
        self._us_strs: list[str] = []
        self._xid_key: object = None
        self._xid_sets: list[dict[str, str]] = []
        self._xid_strs: list[str] = []
        self._lock = threading.Lock()   # one collect at a time (the module docstring)

    def describe(self) -> list[Metric]:
        return []  # reading the hardware at registration time would be a side effect

    def _labels(self, identity: tuple[GpuIdentity, ...]) -> None:
        if identity != self._identity:
            self._identity = identity
            self._label_sets = [g.labels() for g in identity]
            self._label_strs = [label_str(d) for d in self._label_sets]

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = self._collect()
        yield from families

    def _collect(self) -> list[Metric]:
        start = self._clock()
        readings = self.backend.read()
        self._labels(readings.identity)
        self._errors.update(readings.errors)
        families = list(self._gpu_families(readings))
        families.append(self._workload_family(readings))
        families.append(self._unsupported_family(readings))
        families.extend(self._service_families(readings))
        errors = Metric("gputide_exporter_collect_errors", "Fields that failed to read, per GPU.", "counter")
        for (uuid, fld), n in sorted(self._errors.items()):
            errors.add_sample("gputide_exporter_collect_errors_total", {"UUID": uuid, "field": fld}, float(n))
        families.append(errors)
        families.extend(self._exporter_families(readings))
        duration = Metric("gputide_exporter_scrape_duration_seconds", "Time the last collect took.", "gauge")
        duration.add_sample("gputide_exporter_scrape_duration_seconds", {}, self._clock() - start)
        families.append(duration)
        return families

    def _exporter_families(self, r: GpuReadings) -> Iterator[Metric]:
        """How many GPUs are served and how many had a field read; the backend's counters of NVML re-initialisations."""
        read = np.zeros(len(r.identity), dtype=bool)
        for name in GPU_FIELD_NAMES:
            if name not in KEPT and (values := r.values.get(name)) is not None:
                read |= np.isfinite(np.asarray(values, dtype=float))
        for name, doc, value in ((GPUS, "GPUs the backend serves.", len(r.identity)),
                                 (GPUS_READ, "GPUs of which this collection read at least one field (not the "
                                 "XID nor the temperature thresholds, which are kept).",
                                  int(read.sum()))):
            m = Metric(name, doc, "gauge")
            m.add_sample(name, {}, float(value))
            yield m
        for attr, (name, doc) in BACKEND_COUNTERS.items():
            value = getattr(self.backend, attr, None)
            if isinstance(value, int | float):
                m = Metric(name, doc, "counter")
                m.add_sample(f"{name}_total", {}, float(value))
                yield m

    def _gpu_families(self, r: GpuReadings) -> Iterator[Metric]:
        for name, typ, doc in GPU_FIELDS:
            values = r.values.get(name)
            if values is None:
                continue
            values = np.asarray(values, dtype=float)
            ok = np.isfinite(values)
            if ok.all():
                sets, strs = self._label_sets, self._label_strs
            else:
                keep = np.flatnonzero(ok).tolist()
                sets = [self._label_sets[i] for i in keep]
                strs = [self._label_strs[i] for i in keep]
                values = values[ok]
            if name == "DCGM_FI_PROF_SM_ACTIVE" and r.instances:
                sets, strs, values = self._with_instances(r, sets, strs, values)
            elif name == "DCGM_FI_DEV_XID_ERRORS":
                sets, strs = self._with_xid_labels(sets, values)
            yield ArrayMetric(name, doc, typ, sets, strs, values)

    def _with_instances(self, r: GpuReadings, sets: list[dict[str, str]], strs: list[str], values: np.ndarray
                        ) -> tuple[list[dict[str, str]], list[str], np.ndarray]:
        """The GPU-level samples plus one per MIG GPU instance, labelled as dcgm-exporter labels them."""
        extra = [{**self._label_sets[i.gpu], "GPU_I_ID": i.gpu_instance_id,
                  **({"GPU_I_PROFILE": i.profile} if i.profile else {})} for i in r.instances]
        return ([*sets, *extra], [*strs, *map(label_str, extra)],
                np.concatenate([values, np.array([i.sm_active for i in r.instances], dtype=float)]))

    def _with_xid_labels(self, sets: list[dict[str, str]], values: np.ndarray
                         ) -> tuple[list[dict[str, str]], list[str]]:
        """The XID samples' labels plus dcgm-exporter's ``err_code`` and ``err_msg`` (`exporters.xid`). The last XID
        rarely changes: the label sets are rebuilt only when the GPUs or their codes do."""
        key = (self._identity, tuple(map(id, sets)), values.tobytes())
        if key != self._xid_key:
            self._xid_key = key
            self._xid_sets = [{**s, **xid_labels(v)} for s, v in zip(sets, values.tolist(), strict=True)]
            self._xid_strs = [label_str(d) for d in self._xid_sets]
        return self._xid_sets, self._xid_strs

    def _workload_family(self, r: GpuReadings) -> Metric:
        # placements change rarely: a backend that returns the same tuple gets the cached label strings back
        if r.workloads is not self._wl_key:
            self._wl_key = r.workloads
            self._wl_sets = [w.labels() for w in r.workloads]
            self._wl_strs = [label_str(d) for d in self._wl_sets]
        return ArrayMetric("gputide_gpu_workload_info", "Workloads placed on each GPU (attribution join table).",
                           "gauge", self._wl_sets, self._wl_strs, np.ones(len(self._wl_sets)))

    def _unsupported_family(self, r: GpuReadings) -> Metric:
        # the same pairs scrape after scrape (the backends remember them): their label strings are kept
        if r.unsupported is not self._us_key and r.unsupported != self._us_key:
            self._us_key = r.unsupported
            self._us_sets = [{"UUID": uuid, "field": fld} for uuid, fld in sorted(set(r.unsupported))]
            self._us_strs = [label_str(d) for d in self._us_sets]
        return ArrayMetric("gputide_exporter_unsupported_field_info", "Fields a GPU does not support (NVML answered "
                           "NotSupported): no series, no collect error.", "gauge", self._us_sets, self._us_strs,
                           np.ones(len(self._us_sets)))

    @staticmethod
    def _service_families(r: GpuReadings) -> Iterator[Metric]:
        if not r.services:
            return
        for name, typ, doc, attr in SERVICE_FIELDS:
            m = Metric(name, doc, typ)
            sample = f"{name}_total" if typ == "counter" else name
            for svc, reading in sorted(r.services.items()):
                value = getattr(reading, attr)
                if math.isfinite(value):
                    m.add_sample(sample, {"service": svc}, float(value))
            yield m


def nothing_read(families: Iterable[Metric]) -> str | None:
    """Why a collection holds no GPU reading at all (every field of every GPU failed, or the backend serves no GPU),
    or None: it read something, or its families are not a `GpuCollector`'s (`GPUS_READ` absent)."""
    counts = {m.name: m.samples[0].value for m in families if m.name in (GPUS, GPUS_READ) and m.samples}
    if counts.get(GPUS_READ, 1) > 0:
        return None
    gpus = int(counts.get(GPUS, 0))
    if not gpus:
        return "the last collection found no GPU to read (looked for again at each collection)"
    return f"the last collection read no field of its {gpus} GPUs (every one failed; see the exporter's log)"
