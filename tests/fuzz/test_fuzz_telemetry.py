"""Bad-telemetry properties of the Prometheus source (balancer.telemetry.prometheus) and the NVML exporter backend.

Prometheus: a fake client answers the source's instant queries with a healthy 4-GPU answer that hypothesis then
breaks (labels dropped or garbled, values replaced by strings, NaN, +/-Inf, negative and huge numbers, samples
duplicated, malformed elements). Property: `snapshot()` either raises a TelemetryError or returns a snapshot whose
every value is finite and physically possible; never another exception, never a NaN or invented zero.

NVML: a chaos NVML (the in-repo fake) raises a random NVML error from any call with some probability. Property: the
scrape always succeeds, and every field left out of it is either counted in gputide_exporter_collect_errors_total or,
where NVML answered NotSupported, listed as unsupported on that GPU (never both).
"""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
from fuzzing import examples
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from balancer.errors import InvalidTelemetry, TelemetryError
from balancer.telemetry.prometheus import BOUNDS, FIELDS, PrometheusOptions, PrometheusTelemetrySource
from exporters.backends import fake_nvml as fk
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector
from exporters.exposition import render

SETTINGS = settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000.0
GOOD = {"temperature_c": 50, "memory_temperature_c": 55, "slowdown_temp_c": 87, "power_w": 300,
        "power_limit_w": 700, "sm_active": 0.5, "mem_used_mib": 2**34, "mem_free_mib": 2**34, "sm_clock_mhz": 1.4e9,
        "clock_event_reasons": 0, "xid": 0, "last_sample": NOW - 5}
GPUS = [(h, g) for h in ("node-a", "node-b") for g in ("0", "1")]


def healthy() -> dict[str, list]:
    gpu = [{"metric": {"__name__": rule, "hostname": h, "gpu": g, "UUID": f"GPU-{h}-{g}",
                       "modelName": "NVIDIA H100 80GB HBM3"}, "value": [NOW, str(GOOD[name])]}
           for h, g in GPUS for name, (rule, _) in FIELDS.items()]
    wl = [{"metric": {"__name__": "gputide_gpu_workload_info", "UUID": f"GPU-{h}-{g}", "namespace": "ns",
                      "pod": f"p-{h}-{g}", "workload_class": "inference", "priority": "10"}, "value": [NOW, "1"]}
          for h, g in GPUS]
    svc = [{"metric": {"__name__": n, "service": "chat"}, "value": [NOW, v]} for n, v in (
        ("gputide_inference_demand_rps", "12"), ("gputide_inference_latency_p99_seconds", "0.2"),
        ("gputide_inference_replicas", "4"))]
    return {"gpu": gpu, "wl": wl, "svc": svc}


class FakeClient:
    def __init__(self, answers: dict[str, list]) -> None:
        self.answers = answers

    def custom_query(self, promql: str):
        if promql.startswith("gputide_gpu_workload_info"):
            return self.answers["wl"]
        if "gputide_inference" in promql:
            return self.answers["svc"]
        return self.answers["gpu"]


def _source(answers) -> PrometheusTelemetrySource:
    return PrometheusTelemetrySource(PrometheusOptions(url="http://fake"), clock=lambda: NOW,
                                     client=FakeClient(answers))


BAD_VALUES = st.one_of(st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "1e308", "abc", "", None, 7, [], "0x1p3"]),
                       st.floats(allow_nan=True, allow_infinity=True).map(repr))
LABELS = ("__name__", "hostname", "gpu", "UUID", "modelName", "namespace", "pod", "priority", "service",
          "workload_class")


@st.composite
def breakage(draw):
    """A list of (query, row index, how, argument) edits applied to a healthy answer."""
    edits = []
    for _ in range(draw(st.integers(1, 4))):
        query = draw(st.sampled_from(["gpu", "gpu", "gpu", "wl", "svc"]))
        how = draw(st.sampled_from(["value", "drop_label", "set_label", "duplicate", "drop_key", "replace_row"]))
        arg = {"value": BAD_VALUES, "drop_label": st.sampled_from(LABELS),
               "set_label": st.tuples(st.sampled_from(LABELS), st.text(max_size=6)),
               "duplicate": st.none(), "drop_key": st.sampled_from(["metric", "value"]),
               "replace_row": st.sampled_from(["x", None, 3, [], {"metric": "x", "value": [1, "1"]}])}[how]
        edits.append((query, draw(st.integers(0, 100)), how, draw(arg)))
    return edits


def _apply(answers: dict[str, list], edits) -> None:
    for query, i, how, arg in edits:
        rows = answers[query]
        i %= len(rows)
        row = rows[i]
        labels = row.get("metric") if isinstance(row, dict) else None
        if how == "value" and isinstance(row, dict):
            row["value"] = [NOW, arg]
        elif how == "drop_label" and isinstance(labels, dict):
            labels.pop(arg, None)
        elif how == "set_label" and isinstance(labels, dict):
            labels[arg[0]] = arg[1]
        elif how == "duplicate":  # an earlier edit may have broken the row already: copy it as it is
            rows.append(copy.deepcopy(row))
        elif how == "drop_key" and isinstance(row, dict):
            row.pop(arg, None)
        elif how == "replace_row":
            rows[i] = arg


@SETTINGS
@given(breakage())
@example([("gpu", 0, "replace_row", {"metric": "x", "value": [1, "1"]}), ("gpu", 0, "duplicate", None)])
def test_broken_prometheus_answers_raise_telemetry_errors_or_give_a_sound_snapshot(edits):
    answers = healthy()
    try:
        _apply(answers, edits)
    except (AttributeError, KeyError, TypeError):
        return  # an earlier edit replaced the row this one edits: nothing new to test
    try:
        snap = _source(answers).snapshot()
    except TelemetryError as exc:
        event(type(exc).__name__)
        assert str(exc)
        return
    event("sound snapshot")
    for name in ("temperature_c", "power_w", "power_limit_w", "sm_active", "mem_used_mib", "slowdown_temp_c"):
        values = getattr(snap, name)
        lo, hi = BOUNDS[name]
        assert np.isfinite(values).all() and (values >= lo).all() and (values <= hi).all(), name
    assert np.isfinite(snap.sample_age_s).all()
    assert all(g.uuid and g.node for g in snap.gpus)
    assert len({g.uuid for g in snap.gpus}) == len(snap.gpus)
    for placement in snap.placements.values():
        assert len(set(placement)) == len(placement)  # a duplicated series never places a pod twice on one GPU
    for status in snap.services.values():
        assert np.isfinite([status.demand_rps, status.p99_latency_s]).all() and status.demand_rps >= 0


def test_a_healthy_answer_gives_the_values_it_holds():
    snap = _source(healthy()).snapshot()
    assert len(snap.gpus) == 4 and snap.temperature_c.tolist() == [50.0] * 4
    assert snap.sm_clock_mhz.tolist() == [1400.0] * 4 and snap.services["chat"].replicas == 4
    assert sorted(snap.placements) == sorted(f"ns/p-{h}-{g}" for h, g in GPUS)


def _edit_gpu(i: int, **changes):
    def go(a):
        a["gpu"][i].update(changes)
    return go


@pytest.mark.parametrize("edit, error", [
    pytest.param(lambda a: a["gpu"][0]["metric"].pop("__name__"), InvalidTelemetry, id="a series without a name"),
    pytest.param(lambda a: a["gpu"][0]["metric"].pop("UUID"), InvalidTelemetry, id="a series without a UUID"),
    pytest.param(lambda a: a["gpu"][0]["metric"].update(gpu="abc"), InvalidTelemetry, id="a non-integer gpu label"),
    pytest.param(_edit_gpu(0, value=[NOW, "abc"]), InvalidTelemetry, id="a string value"),
    pytest.param(_edit_gpu(0, value=[NOW]), InvalidTelemetry, id="a value without its number"),
    pytest.param(_edit_gpu(0, value=[NOW, "NaN"]), InvalidTelemetry, id="NaN temperature"),
    pytest.param(_edit_gpu(3, value=[NOW, "-5"]), InvalidTelemetry, id="negative power"),
    pytest.param(_edit_gpu(3, value=[NOW, "1e308"]), InvalidTelemetry, id="huge power"),
    pytest.param(_edit_gpu(11, value=[NOW, "+Inf"]), InvalidTelemetry, id="a last-sample time of +Inf"),
    pytest.param(lambda a: a["wl"][0]["metric"].update(priority="high"), InvalidTelemetry,
                 id="a non-integer priority label"),
    pytest.param(lambda a: a["svc"][0].update(value=[NOW, "-3"]), InvalidTelemetry, id="negative demand"),
    pytest.param(lambda a: a["svc"][0]["metric"].pop("__name__"), InvalidTelemetry, id="a nameless serving series"),
    pytest.param(lambda a: a.update(gpu={"status": "error"}), InvalidTelemetry, id="an answer that is not a vector"),
])
def test_named_broken_answers(edit, error):
    answers = healthy()
    edit(answers)
    with pytest.raises(error):
        _source(answers).snapshot()


def test_duplicated_series_are_counted_once():
    answers = healthy()
    answers["gpu"] += healthy()["gpu"]
    answers["wl"] += healthy()["wl"]
    snap = _source(answers).snapshot()
    assert len(snap.gpus) == 4
    assert all(len(p) == 1 for p in snap.placements.values())
    assert {w.gpu_milli for w in snap.workloads} == {1000}


def test_nan_serving_latency_is_absent_not_a_number():
    answers = healthy()
    answers["svc"][0]["value"] = [NOW, "0"]
    answers["svc"][1]["value"] = [NOW, "NaN"]  # histogram_quantile with no traffic
    status = _source(answers).snapshot().services["chat"]
    assert status.p99_latency_s == 0.0 and status.demand_rps == 0.0
    answers["svc"][0]["value"] = [NOW, "12"]   # requests arrive and no p99 says how long they waited: unknown, never 0
    status = _source(answers).snapshot().services["chat"]
    assert math.isnan(status.p99_latency_s) and status.demand_rps == 12.0


# ---- NVML exporter backend ---------------------------------------------------------------------------------------
ERRORS = [fk.NVMLError, fk.NVMLError_NotSupported, fk.NVMLError_NoPermission, fk.NVMLError_Timeout,
          fk.NVMLError_GpuIsLost]


class ChaosNvml(fk.FakeNvml):
    """The fake NVML, but once `armed` every nvml* call raises a random NVML error with probability `p`."""

    def __init__(self, devices, rng: random.Random, p: float) -> None:
        super().__init__(devices)
        self.rng, self.p, self.armed, self.raised = rng, p, False, 0

    def __getattribute__(self, name: str):
        attr = object.__getattribute__(self, name)
        if not (name.startswith("nvml") and callable(attr) and object.__getattribute__(self, "armed")):
            return attr

        def chaotic(*args, **kwargs):
            if self.rng.random() < self.p:
                self.raised += 1
                raise self.rng.choice(ERRORS)()
            return attr(*args, **kwargs)
        return chaotic


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(0, 2**32), st.floats(0.0, 0.9), st.integers(1, 6))
def test_random_nvml_errors_never_fail_a_scrape_and_every_missing_field_is_counted(seed, p, n_gpus):
    rng = random.Random(seed)
    devices = [fk.FakeDevice(uuid=f"GPU-{i}", gpm_sm_util=rng.choice([None, 40.0])) for i in range(n_gpus)]
    nvml = ChaosNvml(devices, rng, p)
    backend = NvmlBackend(nvml=nvml, hostname="h")
    nvml.armed = True
    registry = CollectorRegistry()
    registry.register(GpuCollector(backend))
    expected: dict[tuple[str, str], int] = {}
    for _ in range(3):
        body = render(registry).decode()  # must not raise
        assert "DCGM_FI_DEV_XID_ERRORS" in body
    # the same chaos, read directly: every NaN field is an error counted against its GPU and field, or unsupported
    for _ in range(3):
        readings = backend.read()
        errors, unsupported = set(readings.errors), set(readings.unsupported)
        for name in GPU_FIELD_NAMES:
            for k, value in enumerate(readings.values[name]):
                key = (readings.identity[k].uuid, name)
                said = (key in errors) + (key in unsupported)
                if name == "DCGM_FI_PROF_SM_ACTIVE":   # NaN unsaid too: GPM's first sample (none before to compare)
                    assert said <= int(np.isnan(value)), name
                else:
                    assert said == int(np.isnan(value)), name
        for key in readings.errors:
            expected[key] = expected.get(key, 0) + 1
    if p == 0:
        assert nvml.raised == 0 and not expected


def test_nvml_errors_show_up_in_the_error_counter():
    device = fk.FakeDevice(uuid="GPU-x", fail={"nvmlDeviceGetClockInfo": fk.NVMLError_NoPermission})
    registry = CollectorRegistry()
    registry.register(GpuCollector(NvmlBackend(nvml=fk.FakeNvml([device]), hostname="h")))
    render(registry)
    render(registry)
    count = registry.get_sample_value("gputide_exporter_collect_errors_total",  # itself a third scrape
                                      {"UUID": "GPU-x", "field": "DCGM_FI_DEV_SM_CLOCK"})
    assert count == 3
    assert registry.get_sample_value("DCGM_FI_DEV_GPU_TEMP", {**_labels(registry)}) == 45


def _labels(registry) -> dict:
    for metric in registry.collect():
        if metric.name == "DCGM_FI_DEV_GPU_TEMP":
            return dict(metric.samples[0].labels)
    raise AssertionError("no temperature series")
