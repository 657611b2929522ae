"""Balancer: what the controller did, what it refused, and whether it is healthy.

Actions by type and reason, rejections by the limit that refused them, reconcile duration quantiles from the
histogram, telemetry staleness, the fail-static state, which replica leads and whether its pods' watch works.
A "Secondary scheduler" row covers `gputide schedule` (its own `gputide_scheduler_*` series): pods bound and
unschedulable, pods left pending, failed passes, which replica binds, the nodes with per-GPU facts from
Prometheus, and its watches of pending pods, nodes and bound pods.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    CLUSTER,
    hotspot_annotations,
    new_dashboard,
    q,
    stat_panel,
    thresholds,
    timeseries_panel,
)

UID = "gputide-balancer"


def _duration(quantile: float, histogram: str = "gputide_reconcile_duration_seconds") -> object:
    return q(
        f"histogram_quantile({quantile}, sum by (le) "
        f"(rate({histogram}_bucket{{{CLUSTER}}}[$__rate_interval])))",
        f"p{round(quantile * 100)}",
    )


def per_minute(counter: str, by: str = "") -> str:
    """Events per minute of `counter` (a selector), summed `by` the given labels. Not `increase(...[$__rate_interval])`
    per bar: `$__rate_interval` is the step plus a scrape but at least four scrapes, so wherever the step is under
    three scrapes (45 s at 15 s scrapes: any range under about half a day on a half-width panel) the windows of
    neighbouring bars overlap and one event stood in several bars (three at a 20 s step)."""
    return f"60 * sum{f' by ({by})' if by else ''} (rate({counter}[$__rate_interval]))"


def _watch_failures(title: str, description: str, expr: str, w: int = 6) -> object:
    return stat_panel(title, description, "none", [q(expr, "failures")], w=w).thresholds(
        thresholds((None, "green"), (1, "orange"), (5, "red")))


# The scheduler's series of the replica that binds; a standby's are 0 or stale.
_ON_LEADER = f"and on (cluster, job, instance) (gputide_scheduler_leader{{{CLUSTER}}} == 1)"
# Series of any scheduler process, leading or not (the controller's watch gauges have no scheduler_leader).
_ON_SCHEDULER = f"and on (cluster, job, instance) gputide_scheduler_leader{{{CLUSTER}}}"
# The controller's series of the acting replica: a demoted one keeps its last eviction budget and staleness (as the
# alerts do, skip it; a controller without leader election has no gputide_leader and is kept).
_NOT_STANDBY = f"unless on (cluster, job, instance) (gputide_leader{{{CLUSTER}}} == 0)"


def _leaders_count(title: str, description: str, series: str, legend: str, alarm: str, w: int) -> object:
    """A stat of `series` summed over the schedulers' leading replicas, `alarm`-coloured from 1."""
    panel = stat_panel(title, description, "none", [q(f"sum({series}{{{CLUSTER}}} {_ON_LEADER})", legend)], w=w)
    return panel.thresholds(thresholds((None, "green"), (1, alarm)))


def _scheduler(d: dashboard.Dashboard) -> dashboard.Dashboard:
    """The `gputide schedule` row: stats of its state now, then what it did over time."""
    d = d.with_row(dashboard.Row("Secondary scheduler"))
    d = (
        d.with_panel(stat_panel("Schedulers not led by one replica", "Schedulers (one per cluster and job) where no "
                                "replica or more than one binds pods, from gputide_scheduler_leader: anything but 0 "
                                "is a problem (alert GputideSchedulerNoLeader).", "none",
                                [q(f"count(sum by (cluster, job) (gputide_scheduler_leader{{{CLUSTER}}}) != 1) "
                                   f"or 0 * count(gputide_scheduler_leader{{{CLUSTER}}})", "schedulers")], w=5)
                     .thresholds(thresholds((None, "green"), (1, "red"))))
        .with_panel(_leaders_count("Pods pending (scheduler)", "Pods with schedulerName gputide that the leading "
                                   "replica's last pass left pending because no node fits them "
                                   "(gputide_scheduler_pending_pods; alert GputidePodsUnschedulable after 30 min).",
                                   "gputide_scheduler_pending_pods", "pending", "orange", w=5))
        .with_panel(stat_panel("GPU-facts nodes", "Nodes with fresh per-GPU facts (thermal headroom, GPUs in use) "
                               "from Prometheus at the scheduler's last read (gputide_scheduler_gpu_facts_nodes); 0 "
                               "without --prometheus or while it fails, and pods are then placed without them.",
                               "none", [q(f"max(gputide_scheduler_gpu_facts_nodes{{{CLUSTER}}})", "nodes")], w=5)
                    .thresholds(thresholds((None, "orange"), (1, "green"))))
        .with_panel(_watch_failures("Scheduler watch failures", "Consecutive failed lists or watches of pending "
                                    "pods, nodes or bound pods, the worst over resources and scheduler replicas "
                                    "(gputide_kubernetes_watch_failures); above 0, passes use the last state read.",
                                    f"max(gputide_kubernetes_watch_failures{{{CLUSTER}}} {_ON_SCHEDULER})", w=5))
        .with_panel(_leaders_count("Preemption holds stuck", "Preemption holds the leading replica's last pass kept "
                                   "past the hour for victims stuck terminating on a node that still admits the pod "
                                   "(gputide_scheduler_holds_stuck; alert GputideSchedulerHoldStuck): the log and a "
                                   "PreemptionStuck Event name them.",
                                   "gputide_scheduler_holds_stuck", "stuck", "red", w=4))
    )
    return (
        d.with_panel(timeseries_panel(
            "Scheduler pods by result", "Pods per minute the scheduler bound, and pods a pass found no node for "
            "(gputide_scheduler_pods_total): a pod that keeps waiting counts as unschedulable at every pass.", "opm",
            [q(f"60 * sum by (result) (rate(gputide_scheduler_pods_total{{{CLUSTER}}}[$__rate_interval]))",
               "{{result}}")], min_val=0))
        .with_panel(timeseries_panel(
            "Failed scheduling passes", "Passes per minute that failed because the API server did "
            "(gputide_scheduler_failed_passes_total); pods wait for the next pass (alert "
            "GputideSchedulerPassesFailing).", "opm",
            [q(per_minute(f"gputide_scheduler_failed_passes_total{{{CLUSTER}}}", "pod, instance"),
               "{{pod}} {{instance}}")], min_val=0))
        .with_panel(timeseries_panel(
            "Scheduler leader by replica", "gputide_scheduler_leader per scheduler replica: exactly one should be 1.",
            "none", [q(f"max by (pod, instance) (gputide_scheduler_leader{{{CLUSTER}}})", "{{pod}} {{instance}}")],
            min_val=0, max_val=1))
        .with_panel(timeseries_panel(
            "Scheduler watches", "Consecutive failed lists or watches per resource the scheduler follows (pending "
            "pods, nodes, bound pods), the worst over its replicas (gputide_kubernetes_watch_failures; alert "
            "GputideKubernetesWatchFailing after 15 min).", "none",
            [q(f"max by (resource) (gputide_kubernetes_watch_failures{{{CLUSTER}}} {_ON_SCHEDULER})",
               "{{resource}}")], min_val=0))
        .with_panel(timeseries_panel(
            "Binding latency", "p50, p90 and p99 of the time from a pod's creation to its binding "
            "(gputide_scheduler_binding_latency_seconds; creationTimestamp has whole seconds).", "s",
            [_duration(qt, "gputide_scheduler_binding_latency_seconds") for qt in (0.5, 0.9, 0.99)], min_val=0))
        .with_panel(timeseries_panel(
            "Oldest pending pod", "Age of the oldest pod the leading replica's last pass left pending "
            "(gputide_scheduler_oldest_pending_seconds): how long the longest-waiting pod has waited.", "s",
            [q(f"max(gputide_scheduler_oldest_pending_seconds{{{CLUSTER}}} {_ON_LEADER})", "oldest")], min_val=0))
        .with_panel(timeseries_panel(
            "Preempted pods", "Pods of lower priority the scheduler evicted per minute to make room for a pod that "
            "fit nowhere (gputide_scheduler_preempted_pods_total; never against a PodDisruptionBudget).", "opm",
            [q(per_minute(f"gputide_scheduler_preempted_pods_total{{{CLUSTER}}}"), "evicted")], min_val=0))
        .with_panel(timeseries_panel(
            "Starving pods", "Pods the leading replica's last pass found waiting longer than --starving-after, each "
            "holding the node closest to fitting it as what it asks frees up there (gputide_scheduler_starving_pods).",
            "none", [q(f"max(gputide_scheduler_starving_pods{{{CLUSTER}}} {_ON_LEADER})", "starving")], min_val=0))
    )


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Balancer",
        "The reconcile loop: actions and why, rejections and by which limit, duration, staleness, "
        "fail-static and leadership; the secondary scheduler's binds, pending pods and watches.",
        ["controller"], gpus=False,
    )
    for marker in hotspot_annotations():
        d = d.annotation(marker)
    holding = [dm.ValueMap(options={
        "0": dm.ValueMappingResult(text="acting", color="green"),
        "1": dm.ValueMappingResult(text="holding still", color="red"),
    })]
    d = (
        d.with_panel(stat_panel("Fail-static", "1 while the controller holds still (stale or missing "
                                "telemetry, emergency stop): gputide_fail_static (alert GputideFailStaticTooLong "
                                "after 15 minutes).", "none",
                                [q(f"max(gputide_fail_static{{{CLUSTER}}})", "fail-static")], w=4)
                     .mappings(holding).thresholds(thresholds((None, "green"), (1, "red"))))
        .with_panel(stat_panel("Leases not led by one replica", "Leases (one per shard, in each cluster) that no "
                               "replica or more than one holds, from gputide_leader{lease}: anything but 0 is a "
                               "problem (alert GputideControllerNoLeader).", "none",
                               [q(f"count(sum by (cluster, lease) (gputide_leader{{{CLUSTER}}}) != 1) "
                                  f"or 0 * count(gputide_leader{{{CLUSTER}}})", "leases")], w=4)
                    .thresholds(thresholds((None, "green"), (1, "red"))))
        .with_panel(stat_panel("Telemetry staleness", "Age of the oldest sample the acting replica's last cycle used "
                               "(gputide_telemetry_staleness_seconds). Red from 120 s, the default "
                               "spec.safety.maxTelemetryAgeS: past it the controller holds still (and --stale-after "
                               "can only be shorter) and alert GpuTelemetryStale fires.", "s",
                               [q(f"max(gputide_telemetry_staleness_seconds{{{CLUSTER}}} {_NOT_STANDBY})",
                                  "staleness")], w=4)
                    .thresholds(thresholds((None, "green"), (60, "orange"), (120, "red"))))
        .with_panel(stat_panel("Eviction budget left", "Evictions left in the current window, of the acting replica "
                               "(gputide_eviction_budget_remaining; alert GputideEvictionBudgetExhausted at 0 for 10 "
                               "minutes).", "none",
                               [q(f"min(gputide_eviction_budget_remaining{{{CLUSTER}}} {_NOT_STANDBY})", "budget")],
                               w=4)
                    .thresholds(thresholds((None, "red"), (1, "green"))))
        .with_panel(_watch_failures("Pod watch failures", "Consecutive failed lists or watches of the pods whose "
                                    "owners the planner uses (gputide_kubernetes_watch_failures); above 0, it plans "
                                    "on the last pods it read (alert GputideKubernetesWatchFailing after 15 min).",
                                    f'max(gputide_kubernetes_watch_failures{{{CLUSTER}, resource="pods"}})', w=4))
        .with_panel(stat_panel("GPUs forgotten", "GPUs the controller left out of its plan after holding still 10 "
                               "minutes for them gone from telemetry while their node is still a Kubernetes node "
                               "(gputide_gpus_forgotten, the leader's; the log names them): their exporter is dark "
                               "(alert GpuMissingFromTelemetry). 0 while a replica leads and none is forgotten; "
                               "No data while no replica leads.", "none",
                               [q(f"sum(gputide_gpus_forgotten{{{CLUSTER}}}) "
                                  f"or 0 * sum(gputide_leader{{{CLUSTER}}} == 1)", "forgotten")], w=4)
                    .thresholds(thresholds((None, "green"), (1, "red"))))
    )
    d = (
        d.with_panel(timeseries_panel(
            "Actions by type and reason", "Actions carried out per minute (gputide_actions_total), by type "
            "(migrate, power_limit, taint_node, scale_inference, scale_training) and the reason the planner gave; the "
            "annotations mark each one.", "opm",
            [q(per_minute(f"gputide_actions_total{{{CLUSTER}}}", "type, reason"), "{{type}}: {{reason}}")],
            stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Rejections by limit", "Planned actions the safety chokepoint refused, by the limit that refused "
            "them, per minute (gputide_actions_rejected_total): a steady stream says which setting to tune.", "opm",
            [q(per_minute(f"gputide_actions_rejected_total{{{CLUSTER}}}", "reason"), "{{reason}}")],
            stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Reconcile duration", "p50, p90 and p99 of one reconcile cycle, from the "
            "gputide_reconcile_duration_seconds histogram.", "s",
            [_duration(0.5), _duration(0.9), _duration(0.99)], min_val=0))
        .with_panel(timeseries_panel(
            "Reconciles by result", "Reconcile cycles per second by result: ok, fail_static (held still on "
            "purpose) and error (gputide_reconcile_total).", "ops",
            [q(f"sum by (result) (rate(gputide_reconcile_total{{{CLUSTER}}}[$__rate_interval]))", "{{result}}")],
            stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Fail-static and staleness", "gputide_fail_static (1 = holding still) with the telemetry staleness "
            "that usually causes it.", "s",
            [q(f"max(gputide_telemetry_staleness_seconds{{{CLUSTER}}} {_NOT_STANDBY})", "staleness"),
             q(f"max(gputide_fail_static{{{CLUSTER}}})", "fail-static")], min_val=0)
            .override_by_name("fail-static", [dm.DynamicConfigValue(id_val="unit", value="none"),
                                              dm.DynamicConfigValue(id_val="custom.axisPlacement",
                                                                    value="right")]))
        .with_panel(timeseries_panel(
            "Leader by replica", "gputide_leader per controller replica: exactly one per Lease (shard) should be "
            "1.", "none",
            [q(f"max by (lease, pod, instance) (gputide_leader{{{CLUSTER}}})", "{{lease}} {{pod}} {{instance}}")],
            min_val=0, max_val=1))
        .with_panel(timeseries_panel(
            "Training workers owed back", "Workers gputide took from training jobs and still owes back, by the "
            "planner that took them (gputide_shrunk_workers; standbys report 0): a hotspot shrink is given back "
            "once the node cools, a co-location one once the service has latency slack.", "none",
            [q(f"sum by (cause) (gputide_shrunk_workers{{{CLUSTER}}})", "{{cause}}")], stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Longest training debt", "How long the job owed workers the longest has owed them, by the cause of its "
            "shrink (gputide_shrunk_longest_seconds, timed per job from the first cycle the controller saw it owe; "
            "standbys report 0). Alert GputideTrainingShrunkTooLong at 6 h.", "s",
            [q(f"max by (cause) (gputide_shrunk_longest_seconds{{{CLUSTER}}})", "{{cause}}")], min_val=0))
        .with_panel(timeseries_panel(
            "Safety ledger saves failing", "Failed saves per minute of the safety ledger to the Lease, where a "
            "successor reads it, by reason (gputide_ledger_write_failures_total; alert GputideLedgerWriteFailing): "
            "while they fail the controller evicts nothing (rejected as eviction_budget). Also the ledger entries per "
            "minute cut from a save to fit the annotation's 128 KiB (gputide_ledger_entries_dropped_total): "
            "cooldowns and migrations a successor will not know.", "opm",
            [q(per_minute(f"gputide_ledger_write_failures_total{{{CLUSTER}}}", "reason"), "{{reason}}"),
             q(per_minute(f"gputide_ledger_entries_dropped_total{{{CLUSTER}}}"), "entries dropped")], min_val=0))
    )
    return _scheduler(d)
