"""dcgm-exporter's exact /metrics format through the real Prometheus and rules/: the normalised series.

Two static "dcgm-exporters" are scraped: node-a speaks the older format (`Hostname`), with one GPU shared by
two pods (identical duplicated series, as dcgm-exporter emits them for time-sliced GPUs); node-b speaks the
newer one (`hostname`), with one GPU split into two MIG instances and one GPU attributed to a pod. A third
target serves the attribution join table. The checks are a table: record, expected value per key label.
"""

from __future__ import annotations

import pytest

from balancer.telemetry.promserver import Target, default_rule_files

MIB = 1048576
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"

# name -> (HELP text as dcgm-exporter's default counters CSV words it, TYPE)
FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": ("SM clock frequency (in MHz).", "gauge"),
    "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (in C).", "gauge"),
    "DCGM_FI_DEV_MEMORY_TEMP": ("Memory temperature (in C).", "gauge"),
    "DCGM_FI_DEV_SLOWDOWN_TEMP": ("Slowdown temperature (in C).", "gauge"),
    "DCGM_FI_DEV_POWER_USAGE": ("Power draw (in W).", "gauge"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("Current power limit (in W).", "gauge"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("Total energy consumption since boot (in mJ).", "counter"),
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (in %).", "gauge"),
    "DCGM_FI_DEV_FB_FREE": ("Framebuffer memory free (in MiB).", "gauge"),
    "DCGM_FI_DEV_FB_USED": ("Framebuffer memory used (in MiB).", "gauge"),
    "DCGM_FI_PROF_SM_ACTIVE": ("The ratio of cycles an SM has at least 1 warp assigned.", "gauge"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("Current clock event reasons (bitmask).", "gauge"),
    "DCGM_FI_DEV_XID_ERRORS": ("Value of the last XID error encountered.", "gauge"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("Total number of double-bit volatile ECC errors.", "counter"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("Whether remapping of rows is pending", "gauge"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("Whether remapping of rows has failed", "gauge"),
}
# memory health where the board reports it (node-a GPU 0 does not: no series at all)
HEALTHY_MEMORY = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
                  "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0}
BASE = {"DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEMORY_TEMP": 45, "DCGM_FI_DEV_SLOWDOWN_TEMP": 87,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 5_000_000_000,
        "DCGM_FI_DEV_GPU_UTIL": 30, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0, "DCGM_FI_DEV_XID_ERRORS": 0}


def gpu(index: int, uuid: str, model: str, host_label: str, host: str, **values: float) -> dict:
    labels = {"gpu": str(index), "UUID": uuid, "pci_bus_id": f"00000000:{0x3B + index:02X}:00.0",
              "device": f"nvidia{index}", "modelName": model, host_label: host,
              "DCGM_FI_DRIVER_VERSION": "550.54.15"}
    return {"labels": labels, "values": {**BASE, **values}, "variants": [{}]}


# node-a: older dcgm-exporter (Hostname); GPU 1 time-sliced between two pods.
A0 = gpu(0, "GPU-aaaa0000-0000-0000-0000-000000000000", H100, "Hostname", "node-a", DCGM_FI_DEV_GPU_TEMP=41,
         DCGM_FI_DEV_POWER_USAGE=123.5, DCGM_FI_DEV_FB_USED=1024, DCGM_FI_DEV_FB_FREE=80896,
         DCGM_FI_PROF_SM_ACTIVE=0.25)
A1 = gpu(1, "GPU-aaaa1111-0000-0000-0000-000000000000", H100, "Hostname", "node-a", DCGM_FI_DEV_GPU_TEMP=78,
         DCGM_FI_DEV_POWER_USAGE=650, DCGM_FI_DEV_FB_USED=79872, DCGM_FI_DEV_FB_FREE=2048,
         DCGM_FI_PROF_SM_ACTIVE=0.9, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x40 | 0x4, DCGM_FI_DEV_XID_ERRORS=79,
         **{**HEALTHY_MEMORY, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1, "DCGM_FI_DEV_ROW_REMAP_PENDING": 1})
A1["variants"] = [{"container": "main", "namespace": "ml", "pod": "p1", "pod_uid": ""},
                  {"container": "main", "namespace": "research", "pod": "p2", "pod_uid": ""}]
# node-b: newer dcgm-exporter (hostname); GPU 0 in MIG mode with two instances, GPU 1 attributed to a pod.
B0 = gpu(0, "GPU-bbbb0000-0000-0000-0000-000000000000", A100, "hostname", "node-b", DCGM_FI_DEV_GPU_TEMP=55,
         DCGM_FI_DEV_POWER_USAGE=210, DCGM_FI_DEV_SLOWDOWN_TEMP=88, **HEALTHY_MEMORY)
B0["variants"] = [{"GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "1", "DCGM_FI_DEV_FB_USED": 10000,
                   "DCGM_FI_DEV_FB_FREE": 30000, "DCGM_FI_PROF_SM_ACTIVE": 0.3},
                  {"GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "2", "DCGM_FI_DEV_FB_USED": 5000,
                   "DCGM_FI_DEV_FB_FREE": 35000, "DCGM_FI_PROF_SM_ACTIVE": 0.7}]
B1 = gpu(1, "GPU-bbbb1111-0000-0000-0000-000000000000", A100, "hostname", "node-b", DCGM_FI_DEV_GPU_TEMP=60,
         DCGM_FI_DEV_POWER_USAGE=300, DCGM_FI_DEV_FB_USED=40960, DCGM_FI_DEV_FB_FREE=40960,
         DCGM_FI_PROF_SM_ACTIVE=0.5, **{**HEALTHY_MEMORY, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1})
B1["variants"] = [{"container": "server", "namespace": "ml", "pod": "p3", "pod_uid": ""}]


def dcgm_text(gpus: list[dict]) -> str:
    """Render GPUs the way dcgm-exporter does: HELP/TYPE once per field, one line per GPU (per variant)."""
    lines = []
    for name, (help_text, kind) in FIELDS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for g in gpus:
            for variant in g["variants"]:
                value = variant.get(name, g["values"].get(name))
                if value is None:   # a field this board does not report
                    continue
                labels = {**g["labels"], **{k: v for k, v in variant.items() if not k.startswith("DCGM_FI_")}}
                body = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{body}}} {value}")
    return "\n".join(lines) + "\n"


JOIN = "\n".join([
    "# HELP gputide_gpu_workload_info Which pod runs on which GPU (attribution join table).",
    "# TYPE gputide_gpu_workload_info gauge",
    f'gputide_gpu_workload_info{{UUID="{A1["labels"]["UUID"]}",namespace="ml",pod="p1",workload_class="inference"}} 1',
    f'gputide_gpu_workload_info{{UUID="{A1["labels"]["UUID"]}",namespace="research",pod="p2",'
    f'workload_class="training"}} 1',
    f'gputide_gpu_workload_info{{UUID="{B0["labels"]["UUID"]}",namespace="research",pod="p4",'
    f'workload_class="training"}} 1',
    f'gputide_gpu_workload_info{{UUID="{B1["labels"]["UUID"]}",namespace="ml",pod="p3",workload_class="inference"}} 1',
]) + "\n"


@pytest.fixture(scope="module")
def prom(module_prometheus_factory, module_metrics_server):
    node_a = module_metrics_server(dcgm_text([A0, A1]))
    node_b = module_metrics_server(dcgm_text([B0, B1]))
    join = module_metrics_server(JOIN)
    server = module_prometheus_factory(
        [Target("dcgm-exporter", node_a.address), Target("dcgm-exporter", node_b.address),
         Target("gputide-exporter", join.address)],
        default_rule_files(), cluster="test",
    )
    # Each rule group evaluates on its own schedule: wait until every group has seen all four GPUs.
    for promql, value in [("count(gpu:temperature:celsius)", "4"), ("cluster:gpu_count:sum", "4"),
                          ("sum(namespace:gpu_power:watts_sum)", "1160")]:
        server.wait_for(promql, lambda r, v=value: bool(r) and r[0]["value"][1] == v)
    return server


def values_by(prom, promql: str, key: str) -> dict[str, float]:
    return {s["metric"].get(key, ""): float(s["value"][1]) for s in prom.query(promql)}


U = {name: g["labels"]["UUID"] for name, g in {"A0": A0, "A1": A1, "B0": B0, "B1": B1}.items()}
CASES = [
    ("temperature in celsius, MIG instances and pod duplicates collapsed", "gpu:temperature:celsius", "UUID",
     {U["A0"]: 41, U["A1"]: 78, U["B0"]: 55, U["B1"]: 60}),
    ("headroom is slowdown minus current", "gpu:temperature_headroom:celsius", "UUID",
     {U["A0"]: 46, U["A1"]: 9, U["B0"]: 33, U["B1"]: 27}),
    ("power in watts, not summed over the two pods of a shared GPU", "gpu:power:watts", "UUID",
     {U["A0"]: 123.5, U["A1"]: 650, U["B0"]: 210, U["B1"]: 300}),
    ("energy counter from mJ to joules", "gpu:energy:joules_total", "UUID",
     {u: 5_000_000 for u in U.values()}),
    ("framebuffer MiB to bytes, summed over MIG instances", "gpu:memory_used:bytes", "UUID",
     {U["A0"]: 1024 * MIB, U["A1"]: 79872 * MIB, U["B0"]: 15000 * MIB, U["B1"]: 40960 * MIB}),
    ("memory used ratio over the whole MIG GPU", "gpu:memory_used:ratio", "UUID",
     {U["A0"]: 1024 / 81920, U["A1"]: 79872 / 81920, U["B0"]: 15000 / 80000, U["B1"]: 0.5}),
    ("SM active of a MIG GPU is its instances' mean weighted by slices (two 3g: 0.3 and 0.7)", "gpu:sm_active:ratio",
     "UUID", {U["A0"]: 0.25, U["A1"]: 0.9, U["B0"]: 0.5, U["B1"]: 0.5}),
    ("utilisation percent to ratio", "gpu:utilization:ratio", "UUID", {u: 0.3 for u in U.values()}),
    ("SM clock MHz to hertz", "gpu:sm_clock:hertz", "UUID", {u: 1.98e9 for u in U.values()}),
    ("HW thermal slowdown bit reads as throttled", "gpu:thermal_throttled:bool", "UUID",
     {U["A0"]: 0, U["A1"]: 1, U["B0"]: 0, U["B1"]: 0}),
    ("SW power cap bit reads as capped", "gpu:power_capped:bool", "UUID",
     {U["A0"]: 0, U["A1"]: 1, U["B0"]: 0, U["B1"]: 0}),
    ("XID 79 is kept and classed fatal", "gpu:xid_fatal:bool", "UUID",
     {U["A0"]: 0, U["A1"]: 1, U["B0"]: 0, U["B1"]: 0}),
    ("memory unhealthy: a DBE with its remap pending, a failed remap; no series where none is reported",
     "gpu:memory_unhealthy:bool", "UUID", {U["A1"]: 1, U["B0"]: 0, U["B1"]: 1}),
    ("ECC errors are not summed over the two pods of a shared GPU nor the two MIG instances",
     "gpu:ecc_dbe_volatile:total", "UUID", {U["A1"]: 1, U["B0"]: 0, U["B1"]: 0}),
    ("node maximum groups old Hostname and new hostname alike", "node:gpu_temperature:celsius_max", "hostname",
     {"node-a": 78, "node-b": 60}),
    ("hotspot: degrees above the node mean", "gpu:temperature_above_node_mean:celsius", "UUID",
     {U["A0"]: -18.5, U["A1"]: 18.5, U["B0"]: -2.5, U["B1"]: 2.5}),
    ("GPUs per model pool", "model:gpu_count:sum", "modelName", {H100: 2, A100: 2}),
    ("GPUs per cluster carry the target's cluster label", "cluster:gpu_count:sum", "cluster", {"test": 4}),
    ("inference/training/idle split from the join", "class:gpu_count:sum", "workload_class",
     {"inference": 2, "training": 2, "idle": 1}),
    ("GPUs attributed per namespace", "namespace:gpu_allocated:count", "namespace", {"ml": 2, "research": 2}),
    ("power per namespace splits a shared GPU between its pods", "namespace:gpu_power:watts_sum", "namespace",
     {"ml": 325 + 300, "research": 325 + 210}),
]


@pytest.mark.integration
@pytest.mark.parametrize(("record", "key", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_normalised_series_have_the_expected_values(prom, record, key, expected):
    assert values_by(prom, record, key) == pytest.approx(expected, rel=1e-9)


@pytest.mark.integration
def test_per_gpu_series_carry_exactly_the_contract_labels(prom):
    label_sets = {frozenset(s["metric"]) for s in prom.query('{__name__=~"gpu:.+"}')}
    assert label_sets == {frozenset({"__name__", "cluster", "hostname", "gpu", "UUID", "modelName"})}


@pytest.mark.integration
def test_fatal_xid_alert_is_firing_in_prometheus_with_its_runbook(prom):
    def fatal(alerts):
        return [a for a in alerts if a["labels"]["alertname"] == "GpuXidErrorFatal" and a["state"] == "firing"]

    deadline_result = prom.wait_for("ALERTS{alertname='GpuXidErrorFatal', alertstate='firing'}")
    assert {s["metric"]["UUID"] for s in deadline_result} == {U["A1"]}
    (alert,) = fatal(prom.alerts())
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"].endswith("docs/runbooks.md#gpuxiderrorfatal")
    assert "XID 79" in alert["annotations"]["description"]
