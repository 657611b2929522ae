"""Fragmentation & Utilisation: are the GPUs we pay for doing work, and can new jobs still fit?

Allocated vs used vs idle GPUs, GPUs no pending request can use (unallocatable), the fragmented share of idle
GPUs per model (the FGD paper's measure) and the per-model SM activity with its spread (pool imbalance).

The counts are of the selected GPUs ($cluster, $node, $model), each GPU once: all of them (gpu:temperature:celsius),
those holding a workload (gpu_pod:attribution:share, each GPU once: class:gpu_count:sum counts a GPU shared by two
classes in both, and its sum let the allocated share pass 100 %) and the rest (idle). They once read the cluster's
rules alone, so picking a node or a model changed the used GPUs and nothing else: a node's SM activity over the whole
cluster's allocation.

A dark exporter is No data (a gap), not an idle fleet. The allocated count falls back to 0 only where
cluster:gpu_allocated:count is 0, which the rules decide at the instant they read the join table (0 where the
exporter reports GPUs and none holds one, no series where it reports none): the total comes from another rule group,
evaluated at another moment, so a fallback on it (`0 * <total>`, as the panels once had) drew a dark fleet as an
idle one for up to an interval. A node gone dark in a lit cluster can still read 0 allocated for that interval.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.common import CLUSTER, GPUS, MODEL, each_gpu, new_dashboard, q, stat_panel, timeseries_panel

UID = "gputide-fragmentation"

# The selected GPUs ($cluster, $node, $model), each once however many exporters publish it.
SELECTED = each_gpu(f"gpu:temperature:celsius{{{GPUS}}}")
TOTAL = f"count({SELECTED})"
# The selected GPUs that hold a workload: 0 only where cluster:gpu_allocated:count says the exporter reports GPUs
# and none holds one at this instant (decided with the join table, see the module docstring), so a dark exporter
# stays No data; then only where a selected GPU is still reported (a dark node in a lit cluster).
ALLOCATED = (f"count(max by (cluster, UUID) (gpu_pod:attribution:share{{{CLUSTER}}}) and on (cluster, UUID) "
             f"{SELECTED}) or (0 * sum(cluster:gpu_allocated:count{{{CLUSTER}}}) and on () {TOTAL})")
SM_ACTIVE = each_gpu(f"gpu:sm_active:ratio{{{GPUS}}}")   # each GPU once, as TOTAL counts them
IDLE = f"{TOTAL} - ({ALLOCATED})"
# The selected GPUs per workload class (class:gpu_count:sum's count, of the GPUs $node and $model select: the rule is
# per cluster), and the idle ones as class idle, No data while the exporter is dark as ALLOCATED is.
BY_CLASS = (f"count by (workload_class) (max by (cluster, UUID, workload_class) "
            f"(gpu_pod:attribution:share{{{CLUSTER}}}) and on (cluster, UUID) {SELECTED}) "
            f'or label_replace({IDLE}, "workload_class", "idle", "", "")')
# Per model, each selected GPU once (model:gpu_sm_active:ratio_avg / _stddev's sums, of the nodes $node selects).
SM_BY_MODEL = f"max by (cluster, modelName, UUID) (gpu:sm_active:ratio{{{GPUS}}})"
# The controller's per-model gauges: it plans the whole cluster, by GPU model, and publishes no node.
CONTROLLER_SCOPE = " Per GPU model, from the controller, for the whole cluster: $node does not narrow it."


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Fragmentation & Utilisation",
        "Allocated vs used vs idle GPUs, unallocatable GPUs and fragmentation by GPU model.",
        ["utilisation", "fragmentation"],
    )
    d = (
        d.with_panel(stat_panel("Allocated share", "Selected GPUs attributed to a workload over all selected GPUs.",
                                "percentunit",
                                [q(f"({ALLOCATED}) / {TOTAL}", "allocated")], w=8))
        .with_panel(stat_panel("Used share", "SM-busy GPU equivalents (sum of SM activity) over all GPUs: "
                               "the work actually done.", "percentunit",
                               [q(f"avg({SM_ACTIVE})", "used")], w=8))
        .with_panel(stat_panel("Unallocatable GPUs", "Idle GPUs that no pending request can use "
                               "(gputide_unallocatable_gpus)." + CONTROLLER_SCOPE, "none",
                               [q(f"sum(gputide_unallocatable_gpus{{{MODEL}}})", "unallocatable")], w=8))
    )
    d = (
        d.with_panel(timeseries_panel(
            "Allocated vs used vs idle GPUs", "All GPUs, those attributed to a workload (allocated), their "
            "SM-busy equivalent (used = sum of SM activity) and the unattributed ones (idle). The gap between "
            "allocated and used is waste inside jobs; idle is waste between them.", "none",
            [q(TOTAL, "total"),
             q(ALLOCATED, "allocated"),
             q(f"sum({SM_ACTIVE})", "used (SM-busy equivalents)"),
             q(IDLE, "idle")], w=24, min_val=0))
        .with_panel(timeseries_panel(
            "Fragmentation by GPU model", "Share of idle GPUs that are fragmented - partly used GPUs or "
            "nodes that cannot host a typical request (gputide_fragmentation_ratio)." + CONTROLLER_SCOPE,
            "percentunit",
            [q(f"gputide_fragmentation_ratio{{{MODEL}}}", "{{modelName}}")], min_val=0, max_val=1))
        .with_panel(timeseries_panel(
            "Unallocatable GPUs by model", "Idle GPUs no pending request can use, per model "
            "(gputide_unallocatable_gpus)." + CONTROLLER_SCOPE, "none",
            [q(f"gputide_unallocatable_gpus{{{MODEL}}}", "{{modelName}}")], stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "GPUs by workload class", "The selected GPUs per workload class from the attribution join (as "
            "class:gpu_count:sum counts them, of the GPUs $node and $model select), those holding none as idle. On "
            "a real cluster the pods come "
            "from the kubelet or dcgm-exporter, which do not "
            "know their class: they show as unknown, and the Tidal Capacity dashboard's GPUs by class "
            "(gputide_capacity_gpus, from the controller) splits them. Not stacked: a GPU pods of two classes share "
            "counts in each.", "none",
            [q(BY_CLASS, "{{workload_class}}")], min_val=0))
        .with_panel(timeseries_panel(
            "SM activity by model (mean and spread)", "Mean SM activity per GPU model and its standard "
            "deviation across the pool, of the GPUs $node and $model select (model:gpu_sm_active:ratio_avg and "
            "_stddev, per node); a wide spread is an imbalanced pool.", "percentunit",
            [q(f"avg by (cluster, modelName) ({SM_BY_MODEL})", "{{modelName}} mean"),
             q(f"stddev by (cluster, modelName) ({SM_BY_MODEL})", "{{modelName}} stddev")], min_val=0))
    )
    return d
