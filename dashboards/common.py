"""Shared building blocks: variables, selectors and panel factories used by every gputide dashboard.

A dashboard module only says *what* to show (title, PromQL, unit, description); this module decides *how*,
so every panel gets the same datasource reference, the same label filters and a unit and description, which
is what `dashboards.lint` checks.

GPUs x time heatmaps: Grafana's heatmap panel with `calculate: false` takes time series as they come and
treats every numeric field as one row of cells ("rows frame", ordinal y axis). One series per GPU
(legend `hostname/gpu`) therefore draws one row per GPU and one column per time step, the colour being the
value - exactly a GPUs x time image. `format: heatmap` would instead sort series by an `le` label and
de-accumulate them as histogram buckets, which is wrong for per-GPU gauges.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from grafana_foundation_sdk.builders import bargauge, dashboard, heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import prometheus as pm

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Label filters, by the label set each family of normalised series carries (docs/metrics.md section 2).
# GPU: the per-GPU series on a dashboard with the $gpu variable (new_dashboard(per_gpu=True)), down to the GPU
# index; GPUS: the same series where a dashboard counts the GPUs of its nodes and models and has no $gpu.
GPUS = 'cluster=~"$cluster", hostname=~"$node", modelName=~"$model"'
GPU = f'{GPUS}, gpu=~"$gpu"'
NODE = 'cluster=~"$cluster", hostname=~"$node"'
MODEL = 'cluster=~"$cluster", modelName=~"$model"'
CLUSTER = 'cluster=~"$cluster"'

GPU_LEGEND = "{{hostname}}/{{gpu}}"

# The runbooks the alerts link (rules/gputide-alerts.yaml runbook_url); a panel whose description names an alert links
# its runbook, so the operator the alert sent to the dashboard is one click from what to do.
RUNBOOKS = "https://github.com/gputide/gputide/blob/main/docs/runbooks.md"
_ALERT = re.compile(r"\b(?:Gpu|Gputide|InferenceSlo)[A-Z][A-Za-z0-9]+\b")  # digits: InferenceSloBurnRate1d


def each_gpu(series: str) -> str:
    """`series` (a per-GPU series with the `GPU` filter) once per GPU: two exporters, or one exporter under two
    hostnames, can publish one GPU at once (rules/gputide-recording.yaml), so a count, sum or mean over GPUs takes
    the max by UUID first, as the recording rules' fleet figures do."""
    return f"max by (cluster, UUID) ({series})"


def one_per_gpu(series: str) -> str:
    """`series` (per-GPU, with the `GPU` filter) with one of its copies per GPU, labels kept (a GPU two exporters
    publish comes once in a top ten, under one of its hostnames): for topk / bottomk of GPUs."""
    return f"topk by (cluster, UUID) (1, {series})"


# Grafana's Prometheus variable editor's query types: label_values (1) and query_result (3), which it opens the query
# string as (it is the string Grafana runs).
_QUERY_TYPE = {"label_values": 1, "query_result": 3}


def query_variable(name: str, label: str, query: str, description: str) -> dashboard.QueryVariable:
    # allValue ".*" also matches an absent label, so a single-cluster Prometheus without a `cluster`
    # label still shows everything.
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query({"qryType": _QUERY_TYPE.get(query.partition("(")[0], 1), "query": query,
                "refId": "PrometheusVariableQueryEditor-VariableQuery"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.NATURAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )


def variables(*, per_gpu: bool = False, gpus: bool = True) -> list:
    """The variables of a gputide dashboard: datasource and cluster; node and GPU model where its panels read GPU
    series (`gpus`: a dashboard of the controller's series has no node to narrow, and a selector there that no panel
    reads looks like a filter and filters nothing); and, on a dashboard with per-GPU panels (`per_gpu`), the GPU:
    each chained on the ones before it, so a node lists its own GPUs."""
    per_gpu_variables = [query_variable(
        "gpu", "GPU",
        'label_values(gpu:temperature:celsius{cluster=~"$cluster", hostname=~"$node", modelName=~"$model"}, gpu)',
        "GPU index on its node (dcgm-exporter's `gpu` label, as nvidia-smi numbers them): pick a node first to "
        "narrow the per-GPU panels to one board; on All nodes, index 0 is every node's first GPU.",
    )] if per_gpu else []
    gpu_variables = [
        query_variable(
            "node", "Node", 'label_values(gpu:temperature:celsius{cluster=~"$cluster"}, hostname)',
            "GPU nodes (the normalised `hostname` label).",
        ),
        query_variable(
            "model", "GPU model",
            'label_values(gpu:temperature:celsius{cluster=~"$cluster", hostname=~"$node"}, modelName)',
            "GPU models (dcgm-exporter's `modelName`).",
        ),
    ]
    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"),
        query_variable(
            "cluster", "Cluster", "label_values(gpu:temperature:celsius, cluster)",
            "Clusters (the `cluster` label; empty on a single-cluster Prometheus).",
        ),
        *(gpu_variables if gpus else []),
        *per_gpu_variables,
    ]


def new_dashboard(uid: str, title: str, description: str, tags: list[str], *,
                  per_gpu: bool = False, gpus: bool = True) -> dashboard.Dashboard:
    builder = (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gputide", *tags])
        .editable()
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
    )
    for var in variables(per_gpu=per_gpu, gpus=gpus):
        builder = builder.with_variable(var)
    return builder


def action_annotation(name: str, colour: str, actions: Mapping[str, tuple[str, ...]]) -> dashboard.AnnotationQuery:
    """A marker, titled `name`, wherever the controller carried out one of `actions` within the interval: {type:
    reasons} of `gputide_actions_total{type, reason}` (no reasons: every reason of that type; the reasons are
    balancer.action_labels.reason_label's). One event per (type, reason); its text is the type and reason (build.py
    adds the title, text and tag fields that the SDK's AnnotationQuery does not carry).

    The controller starts every (type, reason) series at 0 (balancer.metrics), so increase() sees a first action;
    a series born above 0 within the interval (a controller restarted that acted before its first scrape) marks
    one too."""
    selectors = [f'gputide_actions_total{{{CLUSTER}, type="{t}"' + (f', reason=~"{"|".join(r)}"}}' if r else "}")
                 for t, r in actions.items()]
    return counter_annotation(name, colour, selectors, "type, reason")


def counter_annotation(name: str, colour: str, selectors: list[str], by: str) -> dashboard.AnnotationQuery:
    """A marker, titled `name`, wherever one of the counters `selectors` grew within the interval (or was born above
    0 there), one event per value of the labels `by`, which make its text (joined by ': ') and its last one its tag
    (build.py reads them off the query's outer `sum by`)."""
    counted = [f"increase({s}[$__rate_interval]) > 0" for s in selectors]
    born = [f"({s} > 0 unless {s} offset $__rate_interval)" for s in selectors]
    return (
        dashboard.AnnotationQuery().name(name).datasource(DATASOURCE).enable(True).icon_color(colour)
        .expr(f"sum by ({by}) ({' or '.join(counted + born)})")
    )


def hotspot_annotations() -> list[dashboard.AnnotationQuery]:
    """The controller's hotspot actions, one family per colour, on the dashboards an operator watches for heat, so
    that a temperature drop gputide caused is told from one that happened by itself. The colours differ from the
    Tidal Capacity dashboard's loans (blue) and reclaims (orange). A training job's heat shrink and regrow are
    the `scale_training` actions labelled `hotspot` and `give_back` (the tide's loans and reclaims and co-location's
    resizes are not heat)."""
    return [
        action_annotation("Pod migrations", "purple", {"migrate": ()}),
        action_annotation("Power caps (throttle / give back)", "red", {"power_limit": ()}),
        action_annotation("Hot taints (taint / renew / untaint)", "yellow", {"taint_node": ()}),
        action_annotation("Training shrunk / regrown for heat", "green", {"scale_training": ("hotspot", "give_back")}),
    ]


def q(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False, fmt: str = "") -> prometheus.Dataquery:
    target = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    target = target.legend_format(legend or "__auto")
    target = target.instant() if instant else target.range()
    if fmt:
        target = target.format(pm.PromQueryFormat(fmt))
    return target


def _targets(builder, queries):
    for i, query in enumerate(queries):
        builder = builder.with_target(query.ref_id(chr(ord("A") + i)))
    return builder


def runbook_links(description: str) -> list[dashboard.DashboardLink]:
    """A link to the runbook of each alert `description` names, in order."""
    return [dashboard.DashboardLink(f"Runbook: {alert}").type(dm.DashboardLinkType.LINK)
            .url(f"{RUNBOOKS}#{alert.lower()}").target_blank(True)
            for alert in dict.fromkeys(_ALERT.findall(description))]


def _common(builder, title: str, description: str, unit: str, w: int, h: int):
    builder = builder.title(title).description(description).unit(unit).datasource(DATASOURCE).span(w).height(h)
    links = runbook_links(description)
    return builder.links(links) if links else builder


def timeseries_panel(title: str, description: str, unit: str, queries, *, w: int = 12, h: int = 8,
                     stack: bool = False, bars: bool = False, min_val: float | None = None,
                     max_val: float | None = None) -> timeseries.Panel:
    panel = _common(timeseries.Panel(), title, description, unit, w, h)
    panel = _targets(panel, queries).legend(
        cb.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
    )
    if stack:
        panel = panel.stacking(cb.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(60)
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
    if min_val is not None:
        panel = panel.min(min_val)
    if max_val is not None:
        panel = panel.max(max_val)
    return panel


def gpu_heatmap_panel(title: str, description: str, unit: str, expr: str, *, scheme: str = "Turbo",
                      colours: tuple[float, float | None] = (0, None), w: int = 12, h: int = 10,
                      legend: str = GPU_LEGEND, y_label: str = "GPU (hostname/index)") -> heatmap.Panel:
    """One row per GPU (or per series `legend` names, e.g. a MIG instance), one column per time step (see the
    module docstring). `colours` is the value at each end of the colour scale (None: the data's highest). Fixed
    ends keep a colour meaning one value: fitted to the data, as Grafana does by default, a cool fleet's warmest GPU
    at 45 °C was drawn in the colour of heat, and a fleet with every GPU idle in the colour of busy."""
    panel = _common(heatmap.Panel(), title, description, unit, w, h)
    low, high = colours
    scale = (heatmap.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme(scheme)
             .scale(hm.HeatmapColorScale.LINEAR).steps(64).min(low))
    return (
        panel.with_target(q(expr, legend))
        .calculate(False)
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.UNKNOWN))
        .color(scale if high is None else scale.max(high))
        .y_axis(heatmap.YAxisConfig().axis_label(y_label))
        .cell_values(heatmap.CellValues().unit(unit))
        .cell_gap(0)
        # Keep zero-valued cells (an idle GPU is information, not noise); the default hides values <= 1e-9.
        .filter_values(heatmap.FilterValueRange().le(-1e308))
        .show_legend()
        .mode(common.TooltipDisplayMode.SINGLE)
    )



def stat_panel(title: str, description: str, unit: str, queries, *, w: int = 6, h: int = 4) -> stat.Panel:
    panel = _common(stat.Panel(), title, description, unit, w, h)
    return _targets(panel, queries).graph_mode(common.BigValueGraphMode.AREA).reduce_options(
        cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)
    )


def bargauge_panel(title: str, description: str, unit: str, queries, *, w: int = 8, h: int = 10,
                   max_val: float | None = None) -> bargauge.Panel:
    panel = _common(bargauge.Panel(), title, description, unit, w, h)
    panel = _targets(panel, queries).orientation(common.VizOrientation.HORIZONTAL).display_mode(
        common.BarGaugeDisplayMode.GRADIENT
    ).reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    if max_val is not None:
        panel = panel.max(max_val)
    return panel


def table_panel(title: str, description: str, unit: str, queries, *, w: int = 12, h: int = 10,
                matrix: tuple[str, str] | None = None) -> table.Panel:
    """A table of instant values; `matrix=(row_label, column_label)` pivots it into a grid (e.g. node x GPU)."""
    panel = _common(table.Panel(), title, description, unit, w, h)
    panel = _targets(panel, queries).cell_options(
        common.TableColoredBackgroundCellOptions(mode=common.TableCellBackgroundDisplayMode.GRADIENT)
    )
    if matrix:
        row, column = matrix
        panel = panel.with_transformation(dm.DataTransformerConfig(
            id_val="groupingToMatrix",
            options={"rowField": row, "columnField": column, "valueField": "Value"},
        ))
    else:
        panel = panel.with_transformation(dm.DataTransformerConfig(
            id_val="organize", options={"excludeByName": {"Time": True}},
        ))
    return panel


def thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return dashboard.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=v, color=c) for v, c in steps]
    )
