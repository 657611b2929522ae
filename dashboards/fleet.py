"""GPU Fleet: which GPUs run hot, right now and over time.

Four GPUs x time heatmaps (temperature, power, SM activity, memory used; one row per GPU, see
`dashboards.common`), one of SM activity per MIG GPU instance (a row per instance), a node x GPU grid of the
current thermal headroom, the GPUs closest to slowdown, throttle reasons and XID errors. Everything reads the
normalised `gpu:*` recording rules, so it works behind gputide's exporter and behind an existing dcgm-exporter alike.
Every panel follows `$gpu` (the GPU index on its node, dcgm-exporter's `gpu` label) as well as `$node` and `$model`.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    GPU,
    GPU_LEGEND,
    bargauge_panel,
    each_gpu,
    gpu_heatmap_panel,
    hotspot_annotations,
    new_dashboard,
    one_per_gpu,
    q,
    stat_panel,
    table_panel,
    thresholds,
    timeseries_panel,
)

UID = "gputide-gpu-fleet"

# Heat is coloured by headroom below each GPU's own slowdown temperature (gpu:temperature_headroom:celsius), not by
# temperature: slowdown is 89 °C on an H100, 98 °C on an A10 (balancer.catalog), so a fixed 85 °C threshold read an
# H100 4 °C from throttling and an A10 13 °C from it alike. Red within the controller's default hotspots.marginC (5 °C:
# a hot reading), orange until its releaseMarginC (12 °C: not yet cool again).
# The temperature heatmap's colour scale: room temperature to above the highest catalogued slowdown (A10: 98).
TEMPERATURE_COLOURS = (20, 100)
HEADROOM_THRESHOLDS = thresholds((None, "red"), (5, "orange"), (12, "green"))
HEADROOM_COLOURS = ("Red: within 5 °C of slowdown (the controller's default hotspots.marginC, a hot reading); "
                    "orange: within 12 °C (releaseMarginC, not yet cool). No data for a GPU whose exporter does not "
                    "publish its slowdown temperature (DCGM_FI_DEV_SLOWDOWN_TEMP).")


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / GPU Fleet",
        "Per-GPU temperature, power, SM activity and memory as GPUs x time heatmaps, SM activity per MIG "
        "instance, the node x GPU headroom grid, the GPUs closest to slowdown, throttling and XID errors.",
        ["gpu", "fleet"], per_gpu=True,
    )
    for marker in hotspot_annotations():
        d = d.annotation(marker)
    d = (
        d.with_panel(stat_panel("GPUs reporting", "GPUs with a temperature sample in the selection.", "none",
                                [q(f"count({each_gpu(f'gpu:temperature:celsius{{{GPU}}}')})", "GPUs")]))
        .with_panel(stat_panel("Fleet power draw", "Sum of the selected GPUs' power draw.", "watt",
                               [q(f"sum({each_gpu(f'gpu:power:watts{{{GPU}}}')})", "power")]))
        .with_panel(stat_panel("Mean SM activity", "Mean fraction of time the SMs were busy (DCGM SM_ACTIVE).",
                               "percentunit", [q(f"avg({each_gpu(f'gpu:sm_active:ratio{{{GPU}}}')})", "SM active")]))
        .with_panel(stat_panel("Least thermal headroom", "How far the GPU closest to its slowdown temperature runs "
                               f"below it (gpu:temperature_headroom:celsius; alert GpuNearSlowdownTemperature below "
                               f"3 °C for 2 minutes). {HEADROOM_COLOURS}", "celsius",
                               [q(f"min(gpu:temperature_headroom:celsius{{{GPU}}})", "headroom")])
                    .thresholds(HEADROOM_THRESHOLDS))
    )
    d = d.with_row(dashboard.Row("Heatmaps: one row per GPU, one column per time step"))
    d = (
        d.with_panel(gpu_heatmap_panel(
            "GPU temperature", "Core temperature of every GPU over time (gpu:temperature:celsius), coloured from "
            f"{TEMPERATURE_COLOURS[0]} to {TEMPERATURE_COLOURS[1]} °C whatever the fleet's range (the top is above "
            "every catalogued board's slowdown, 89-98 °C). A hot horizontal stripe is a GPU that stays hot: a hotspot "
            "candidate.", "celsius", f"gpu:temperature:celsius{{{GPU}}}", colours=TEMPERATURE_COLOURS))
        .with_panel(gpu_heatmap_panel(
            "GPU power", "Power draw of every GPU over time (gpu:power:watts).", "watt",
            f"gpu:power:watts{{{GPU}}}", scheme="Oranges"))
        .with_panel(gpu_heatmap_panel(
            "SM activity", "Fraction of time the SMs were busy, per GPU (gpu:sm_active:ratio). "
            "Dark rows are idle GPUs.", "percentunit", f"gpu:sm_active:ratio{{{GPU}}}", scheme="Viridis",
            colours=(0, 1)))
        .with_panel(gpu_heatmap_panel(
            "Memory used", "Framebuffer memory in use, per GPU (gpu:memory_used:bytes).", "bytes",
            f"gpu:memory_used:bytes{{{GPU}}}", scheme="Blues"))
        .with_panel(gpu_heatmap_panel(
            "SM activity per MIG instance", "Fraction of time each GPU instance of a MIG GPU kept its own SMs "
            "busy (gpu_instance:sm_active:ratio), one row per instance: hostname/GPU index/GPU_I_ID and its "
            "GPU_I_PROFILE. The SM activity heatmap shows the GPU as its instances' mean weighted by their compute "
            "slices; here a busy small instance beside idle ones stands out. Empty on a fleet without MIG.",
            "percentunit", f"gpu_instance:sm_active:ratio{{{GPU}}}", scheme="Viridis", colours=(0, 1), w=24,
            legend="{{hostname}}/{{gpu}}/{{GPU_I_ID}} {{GPU_I_PROFILE}}",
            y_label="MIG instance (hostname/index/GPU_I_ID profile)"))
    )
    d = d.with_row(dashboard.Row("Where it is hot now"))
    d = (
        d.with_panel(table_panel(
            "Node x GPU thermal headroom grid", "Current thermal headroom (slowdown minus core temperature), one row "
            "per node and one column per GPU index (groupingToMatrix over gpu:temperature_headroom:celsius). "
            f"{HEADROOM_COLOURS}", "celsius",
            [q(f"gpu:temperature_headroom:celsius{{{GPU}}}", instant=True, fmt="table")],
            matrix=("hostname", "gpu"), w=12, h=10,
        ).thresholds(HEADROOM_THRESHOLDS))
        .with_panel(bargauge_panel(
            "Closest to slowdown", "The ten GPUs with the least thermal headroom now (bottomk over "
            "gpu:temperature_headroom:celsius, each GPU once however many exporters publish it), labelled "
            f"hostname/GPU index. {HEADROOM_COLOURS}", "celsius",
            [q(f"bottomk(10, {one_per_gpu(f'gpu:temperature_headroom:celsius{{{GPU}}}')})", GPU_LEGEND,
               instant=True)], w=12, h=10, max_val=40,
        ).thresholds(HEADROOM_THRESHOLDS))
    )
    d = d.with_row(dashboard.Row("Throttling and errors"))
    d = (
        d.with_panel(timeseries_panel(
            "Throttle reasons", "Number of GPUs whose clocks are held down, by reason, from the NVML clock "
            "event reasons bitmask: thermal (bits 0x20, 0x40; alert GpuThermalThrottling) and power cap (0x4, 0x80; "
            "alert GpuPowerCapped on the HW power brake, 0x80, alone). Not stacked: a GPU held down for both reasons "
            "is in both lines.", "none",
            [q(f"sum({each_gpu(f'gpu:thermal_throttled:bool{{{GPU}}}')})", "thermal slowdown"),
             q(f"sum({each_gpu(f'gpu:power_capped:bool{{{GPU}}}')})", "power capped")], min_val=0))
        .with_panel(timeseries_panel(
            "Temperature above pool mean", "How far the five GPUs furthest above their pool's (cluster, model) "
            "mean temperature run above it: the controller's hotspot signal (each GPU once however many exporters "
            "publish it; alert GpuHotspot above 10 °C for 15 minutes).", "celsius",
            [q(f"topk(5, {one_per_gpu(f'gpu:temperature_above_pool_mean:celsius{{{GPU}}}')})", GPU_LEGEND)]))
        .with_panel(stat_panel(
            "GPUs with an XID error", "GPUs whose last XID error code is not 0, and those with a fatal one "
            "(a GPU reset or reboot in NVIDIA's Xid catalogue, and 63, 92, 94: docs/metrics.md; alerts "
            "GpuXidErrorFatal and GpuXidError). No data while the "
            "exporter is dark: unknown, not 0.",
            "none",
            [q(f"sum({each_gpu(f'gpu:xid_error:bool{{{GPU}}}')})", "any XID"),
             q(f"sum({each_gpu(f'gpu:xid_fatal:bool{{{GPU}}}')})", "fatal XID")], w=8, h=8)
            .thresholds(thresholds((None, "green"), (1, "red"))))
        .with_panel(table_panel(
            "Last XID per GPU", "Raw last XID code per GPU (gpu:xid_last:code, 0 = none), highest first, each GPU "
            "once however many exporters publish it.", "none",
            [q(f"topk(20, {one_per_gpu(f'gpu:xid_last:code{{{GPU}}}')})", instant=True, fmt="table")], w=16, h=8,
        ).mappings([dm.ValueMap(options={"0": dm.ValueMappingResult(text="none", color="green")})])
            .thresholds(thresholds((None, "green"), (1, "red"))))
    )
    return d
