"""A required field the exporter declares unsupported for a GPU (gputide_exporter_unsupported_field_info) is
unknown, not missing telemetry: the GPU stays in the snapshot with NaN there. The same field gone without that
declaration (a broken exporter, or dcgm-exporter, which declares nothing) holds the controller still as before."""

from __future__ import annotations

import time

import numpy as np
import pytest

from balancer import safety
from balancer.config import SafetyPolicy
from balancer.errors import MissingTelemetry
from balancer.model import ClusterSnapshot
from balancer.telemetry.gpu_frame import declared_unsupported
from balancer.telemetry.prometheus import FIELDS, PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files

NOW = 1_700_000_000.0
GPUS = [("node-a", "0", "GPU-a0", "NVIDIA A100-SXM4-80GB"), ("node-a", "1", "GPU-a1", "NVIDIA A100-SXM4-80GB"),
        ("node-b", "0", "GPU-b0", "NVIDIA H100 80GB HBM3")]
VALUES = {"temperature_c": 60.0, "power_w": 300.0, "power_limit_w": 400.0, "sm_active": 0.5,
          "mem_used_mib": 1024.0 * 1048576, "mem_free_mib": 2048.0 * 1048576, "last_sample": NOW - 5}


class FakeClient:
    """GPU series without the (UUID, field) pairs in `drop`; `declared`: the exporter's unsupported pairs
    (UUID, exported field name), answered only to a query for them."""

    def __init__(self, drop=(), declared=()):
        self.drop, self.declared, self.queries = set(drop), list(declared), []

    def custom_query(self, promql):
        self.queries.append(promql)
        if promql.startswith("gputide_exporter_unsupported_field_info"):
            return [{"metric": {"__name__": "gputide_exporter_unsupported_field_info", "UUID": u, "field": f,
                                "instance": "10.0.0.1:9400"}, "value": [NOW, "1"]} for u, f in self.declared]
        if "workload" in promql or "gputide_inference" in promql:
            return []
        return [{"metric": {"__name__": FIELDS[name][0], "hostname": host, "gpu": gpu, "UUID": uuid,
                            "modelName": model}, "value": [NOW, str(value)]}
                for host, gpu, uuid, model in GPUS for name, value in VALUES.items() if (uuid, name) not in self.drop]


def snapshot(client):
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                     client=client, clock=lambda: NOW).snapshot()


SM = "DCGM_FI_PROF_SM_ACTIVE"
UTIL = "DCGM_FI_DEV_GPU_UTIL"   # gpu:sm_active:ratio falls back to it: SM activity is unknowable only without both


@pytest.mark.parametrize(("unknown", "declared"), [
    (["GPU-a0"], [("GPU-a0", SM), ("GPU-a0", UTIL)]),
    (["GPU-a0", "GPU-a1", "GPU-b0"], [(u, f) for _, _, u, _ in GPUS for f in (SM, UTIL)]),
    (["GPU-a0"], [("GPU-a0", SM), ("GPU-a0", UTIL), ("GPU-a0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), ("GPU-b0", SM),
                  ("GPU-b0", UTIL)]),
], ids=["one MIG A100 without SM activity", "a fleet of MIG GPUs none of which has it",
        "a declaration for a GPU that does report it changes nothing there"])
def test_a_declared_unsupported_sm_activity_keeps_the_gpu_with_an_unknown_value(unknown, declared):
    snap = snapshot(FakeClient(drop=[(u, "sm_active") for u in unknown], declared=declared))
    assert [g.uuid for g in snap.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    sm = dict(zip([g.uuid for g in snap.gpus], snap.sm_active, strict=True))
    assert [u for u, v in sm.items() if np.isnan(v)] == unknown
    assert all(v == 0.5 for u, v in sm.items() if u not in unknown)
    assert np.isfinite(snap.temperature_c).all() and np.isfinite(snap.power_w).all()
    assert safety.check_telemetry(snap, SafetyPolicy()) == pytest.approx(5.0)   # the loop acts on it


@pytest.mark.parametrize(("drop", "declared", "named"), [
    ([("GPU-a0", "sm_active")], [], "GPU-a0"),
    ([("GPU-a0", "sm_active"), ("GPU-a1", "sm_active")], [("GPU-a0", SM), ("GPU-a0", UTIL)], "GPU-a1"),
    ([("GPU-a0", "sm_active")], [("GPU-a1", SM), ("GPU-a1", UTIL)], "GPU-a0"),
    ([("GPU-a0", "sm_active")], [("GPU-a0", SM)], "GPU-a0"),
    ([("GPU-a0", "sm_active")], [("GPU-a0", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")], "GPU-a0"),
    ([("GPU-a0", "temperature_c")], [("GPU-a0", "DCGM_FI_DEV_GPU_TEMP")], "GPU-a0"),
    ([("GPU-a0", "power_w")], [("GPU-a0", "DCGM_FI_DEV_POWER_USAGE")], "GPU-a0"),
], ids=["SM activity gone without a declaration (dcgm-exporter, a broken exporter)",
        "one GPU declared, another gone without one", "another GPU's declaration excuses nothing",
        "SM activity alone declared (no GPM before Hopper) excuses nothing: its utilisation stands in for it",
        "another field's declaration excuses nothing", "temperature stays required even declared unsupported",
        "power stays required even declared unsupported"])
def test_a_required_field_gone_without_a_declaration_is_missing_telemetry(drop, declared, named):
    with pytest.raises(MissingTelemetry, match=named) as err:
        snapshot(FakeClient(drop=drop, declared=declared))
    assert err.value.subjects == (named,)


def test_sm_activity_gone_for_every_gpu_without_declarations_says_the_series_is_missing():
    with pytest.raises(MissingTelemetry, match="gpu:sm_active:ratio is missing for every GPU"):
        snapshot(FakeClient(drop=[(u, "sm_active") for _, _, u, _ in GPUS]))


def test_the_declarations_are_asked_for_only_when_a_gpu_lacks_the_field():
    client = FakeClient(declared=[("GPU-a0", SM)])
    snapshot(client)
    assert not any("unsupported" in q for q in client.queries)


def test_declared_unsupported_reads_only_known_fields_with_a_uuid():
    rows = [{"metric": {"UUID": "GPU-1", "field": SM}, "value": [NOW, "1"]},
            {"metric": {"UUID": "GPU-1", "field": UTIL}, "value": [NOW, "1"]},
            {"metric": {"UUID": "GPU-3", "field": SM}, "value": [NOW, "1"]},   # utilisation stands in
            {"metric": {"field": SM}, "value": [NOW, "1"]},
            {"metric": {"field": UTIL}, "value": [NOW, "1"]},
            {"metric": {"UUID": "GPU-2", "field": "DCGM_FI_DEV_MEMORY_TEMP"}, "value": [NOW, "1"]}]
    assert declared_unsupported(rows) == {("GPU-1", "sm_active")}


def _exposition(declared: bool) -> str:
    """gputide's exporter on a node with a MIG A100 (no SM activity) and an H100 (with it)."""
    lines = []
    for uuid, model, gpu in (("GPU-m0", "NVIDIA A100-SXM4-80GB", "0"), ("GPU-h0", "NVIDIA H100 80GB HBM3", "1")):
        labels = f'gpu="{gpu}",UUID="{uuid}",modelName="{model}",Hostname="n1"'
        for name, v in (("DCGM_FI_DEV_GPU_TEMP", 50), ("DCGM_FI_DEV_POWER_USAGE", 200),
                        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 400), ("DCGM_FI_DEV_FB_USED", 1024),
                        ("DCGM_FI_DEV_FB_FREE", 9000), ("DCGM_FI_DEV_SLOWDOWN_TEMP", 87)):
            lines.append(f"{name}{{{labels}}} {v}")
        if uuid == "GPU-h0":
            lines.append(f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} 0.25")
    if declared:
        lines.append(f'gputide_exporter_unsupported_field_info{{UUID="GPU-m0",field="{SM}"}} 1')
        lines.append(f'gputide_exporter_unsupported_field_info{{UUID="GPU-m0",field="{UTIL}"}} 1')
    return "\n".join(lines) + "\n"


def _poll(src, until, timeout=40.0):
    deadline, got = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            got = src.snapshot()
        except Exception as exc:  # noqa: BLE001 - rules not evaluated yet, or the expected refusal: asked again
            got = exc
        if until(got):
            return got
        time.sleep(0.3)
    return got


@pytest.mark.integration
def test_on_a_real_prometheus_a_declared_gpu_is_kept_and_an_undeclared_one_holds_still(prometheus_factory,
                                                                                        metrics_server):
    server = metrics_server(_exposition(declared=True))
    prom = prometheus_factory([Target("ours", server.address)], rule_files=default_rule_files())
    src = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0))
    got = _poll(src, lambda s: isinstance(s, ClusterSnapshot))
    assert isinstance(got, ClusterSnapshot), got
    sm = dict(zip([g.uuid for g in got.gpus], got.sm_active, strict=True))
    assert np.isnan(sm["GPU-m0"]) and sm["GPU-h0"] == pytest.approx(0.25)
    server.text = _exposition(declared=False)   # the declaration goes: the gap is missing telemetry again
    got = _poll(src, lambda s: isinstance(s, MissingTelemetry), timeout=20.0)
    assert isinstance(got, MissingTelemetry) and got.subjects == ("GPU-m0",), got
