"""Usage & Chargeback: GPU-hours and energy per namespace per day, for pay-per-use billing.

`namespace:gpu_seconds:rate1m` is GPU-seconds per second (GPUs held) and `namespace:gpu_energy:joules_rate1m`
is watts. A bill integrates them over time: a subquery samples the rule once a minute (`[1d:1m]`), so each
point stands for one minute and `sum_over_time(...) / 60` is GPU-hours, `sum_over_time(...) * 60 / 3.6e6` kWh.
A minute that the namespace held nothing has no sample and adds nothing.

Not `avg_over_time(...[1d]) * 24`: the average is over the samples that exist, and a namespace's series exists
only while it holds a GPU, so one GPU held for one hour of a day averaged 1 and billed 24 GPU-hours. Not
`sum_over_time(...[1d])` without a step either: that counts rule evaluations, whose interval (the server's
evaluation_interval) a dashboard does not know. No counter of GPU-seconds or of attributed joules exists to
take `increase()` of (attribution changes while a GPU's energy counter runs), so the one-minute subquery is the
cheapest exact form: 1440 points per namespace per day, whatever the scrape or rule interval.

Accuracy: the rule is the share held at the instant it is evaluated (not averaged over the last minute, which
billed one GPU-minute more than each stretch held), so a hold is billed to within a minute either way; on
Prometheus 2.x (closed range) a sample exactly on a bar's edge is counted in both bars.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.common import CLUSTER, new_dashboard, q, table_panel, timeseries_panel

UID = "gputide-chargeback"

# Each subquery point is one minute of the rule's value: GPUs x 1 min is 1/60 GPU-hour, W x 60 s is J.
GPU_HOURS = "/ 60"
KWH = "* 60 / 3.6e6"


def _integral(rule: str, window: str, to_unit: str) -> str:
    """Per namespace, the integral over `window` of a per-namespace rate rule, one point a minute."""
    return f"sum by (namespace) (sum_over_time({rule}{{{CLUSTER}}}[{window}:1m])) {to_unit}"


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Usage & Chargeback",
        "GPU-hours and energy (kWh) per namespace per day.",
        ["chargeback", "usage"], gpus=False,
    ).time("now-7d", "now")
    gpu_hours = timeseries_panel(
        "GPU-hours per namespace per day", "GPU-hours each namespace held in the day ending at each bar: "
        "namespace:gpu_seconds:rate1m (GPUs held) summed once a minute, / 60.", "suffix: GPU-h",
        [q(_integral("namespace:gpu_seconds:rate1m", "1d", GPU_HOURS), "{{namespace}}")],
        w=24, bars=True, stack=True, min_val=0).interval("1d")
    energy = timeseries_panel(
        "Energy per namespace per day", "kWh attributed to each namespace in the day ending at each bar: "
        "namespace:gpu_energy:joules_rate1m (W) summed once a minute, x 60 s / 3.6e6.", "kwatth",
        [q(_integral("namespace:gpu_energy:joules_rate1m", "1d", KWH), "{{namespace}}")],
        w=24, bars=True, stack=True, min_val=0).interval("1d")
    d = d.with_panel(gpu_hours).with_panel(energy)
    d = (
        d.with_panel(table_panel(
            "GPU-hours per namespace over the selected range", "Total GPU-hours per namespace over the "
            "dashboard's time range, for the invoice: namespace:gpu_seconds:rate1m summed once a minute, / 60.",
            "suffix: GPU-h",
            [q(_integral("namespace:gpu_seconds:rate1m", "$__range", GPU_HOURS),
               instant=True, fmt="table")]))
        .with_panel(table_panel(
            "Energy per namespace over the selected range", "Total kWh attributed to each namespace over the "
            "dashboard's time range: namespace:gpu_energy:joules_rate1m (W) summed once a minute, x 60 s / 3.6e6.",
            "kwatth",
            [q(_integral("namespace:gpu_energy:joules_rate1m", "$__range", KWH),
               instant=True, fmt="table")]))
        .with_panel(timeseries_panel(
            "GPUs held per namespace", "GPUs attributed to each namespace now (namespace:gpu_allocated:count). Not "
            "stacked: a GPU pods of two namespaces share counts in each.",
            "none", [q(f"sum by (namespace) (namespace:gpu_allocated:count{{{CLUSTER}}})", "{{namespace}}")],
            min_val=0))
        .with_panel(timeseries_panel(
            "Power per namespace", "Power attributed to each namespace (namespace:gpu_power:watts_sum).",
            "watt", [q(f"sum by (namespace) (namespace:gpu_power:watts_sum{{{CLUSTER}}})", "{{namespace}}")],
            stack=True, min_val=0))
    )
    return d
