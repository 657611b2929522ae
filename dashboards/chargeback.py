"""Usage & Chargeback: GPU-hours and energy per namespace per day, for pay-per-use billing.

`namespace:gpu_seconds:rate1m` is GPU-seconds per second (i.e. GPUs held); its average over a day times 24 is
GPU-hours that day. `namespace:gpu_energy:joules_rate1m` is watts; its daily average times 86400 / 3.6e6 is
kWh. Averages, not sums, so the figures do not depend on the scrape or rule interval.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.common import CLUSTER, new_dashboard, q, table_panel, timeseries_panel

UID = "gputide-chargeback"

KWH_PER_WATT_DAY = 86400 / 3.6e6


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Usage & Chargeback",
        "GPU-hours and energy (kWh) per namespace per day.",
        ["chargeback", "usage"],
    ).time("now-7d", "now")
    gpu_hours = timeseries_panel(
        "GPU-hours per namespace per day", "GPU-hours each namespace held in the day ending at each bar: "
        "daily mean of namespace:gpu_seconds:rate1m x 24.", "suffix: GPU-h",
        [q(f"sum by (namespace) (avg_over_time(namespace:gpu_seconds:rate1m{{{CLUSTER}}}[1d])) * 24",
           "{{namespace}}")], w=24, bars=True, stack=True, min_val=0).interval("1d")
    energy = timeseries_panel(
        "Energy per namespace per day", "kWh attributed to each namespace in the day ending at each bar: "
        "daily mean of namespace:gpu_energy:joules_rate1m (W) x 86400 / 3.6e6.", "kwatth",
        [q(f"sum by (namespace) (avg_over_time(namespace:gpu_energy:joules_rate1m{{{CLUSTER}}}[1d])) "
           f"* {KWH_PER_WATT_DAY:g}", "{{namespace}}")], w=24, bars=True, stack=True, min_val=0).interval("1d")
    d = d.with_panel(gpu_hours).with_panel(energy)
    d = (
        d.with_panel(table_panel(
            "GPU-hours per namespace over the selected range", "Total GPU-hours per namespace over the "
            "dashboard's time range, for the invoice.", "suffix: GPU-h",
            [q(f"sum by (namespace) (avg_over_time(namespace:gpu_seconds:rate1m{{{CLUSTER}}}[$__range])) "
               "* $__range_s / 3600", instant=True, fmt="table")]))
        .with_panel(table_panel(
            "Energy per namespace over the selected range", "Total kWh attributed to each namespace over the "
            "dashboard's time range.", "kwatth",
            [q(f"sum by (namespace) (avg_over_time(namespace:gpu_energy:joules_rate1m{{{CLUSTER}}}[$__range])) "
               "* $__range_s / 3.6e6", instant=True, fmt="table")]))
        .with_panel(timeseries_panel(
            "GPUs held per namespace", "GPUs attributed to each namespace now (namespace:gpu_allocated:count).",
            "none", [q(f"sum by (namespace) (namespace:gpu_allocated:count{{{CLUSTER}}})", "{{namespace}}")],
            stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Power per namespace", "Power attributed to each namespace (namespace:gpu_power:watts_sum).",
            "watt", [q(f"sum by (namespace) (namespace:gpu_power:watts_sum{{{CLUSTER}}})", "{{namespace}}")],
            stack=True, min_val=0))
    )
    return d
