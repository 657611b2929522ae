"""Balancer: what the controller did, what it refused, and whether it is healthy.

Actions by type and reason, rejections by the limit that refused them, reconcile duration quantiles from the
histogram, telemetry staleness, the fail-static state, which replica leads and whether its pods' watch works.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import CLUSTER, new_dashboard, q, stat_panel, thresholds, timeseries_panel

UID = "gputide-balancer"


def _duration(quantile: float) -> object:
    return q(
        f"histogram_quantile({quantile}, sum by (le) "
        f"(rate(gputide_reconcile_duration_seconds_bucket{{{CLUSTER}}}[$__rate_interval])))",
        f"p{round(quantile * 100)}",
    )


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Balancer",
        "The reconcile loop: actions and why, rejections and by which limit, duration, staleness, "
        "fail-static and leadership.",
        ["controller"],
    )
    holding = [dm.ValueMap(options={
        "0": dm.ValueMappingResult(text="acting", color="green"),
        "1": dm.ValueMappingResult(text="holding still", color="red"),
    })]
    d = (
        d.with_panel(stat_panel("Fail-static", "1 while the controller holds still (stale or missing "
                                "telemetry, emergency stop): gputide_fail_static.", "none",
                                [q(f"max(gputide_fail_static{{{CLUSTER}}})", "fail-static")])
                     .mappings(holding).thresholds(thresholds((None, "green"), (1, "red"))))
        .with_panel(stat_panel("Leader replicas", "Replicas that currently act (gputide_leader); anything "
                               "but 1 is a problem.", "none",
                               [q(f"sum(gputide_leader{{{CLUSTER}}})", "leaders")])
                    .thresholds(thresholds((None, "red"), (1, "green"), (2, "red"))))
        .with_panel(stat_panel("Telemetry staleness", "Age of the oldest sample the last cycle used "
                               "(gputide_telemetry_staleness_seconds).", "s",
                               [q(f"max(gputide_telemetry_staleness_seconds{{{CLUSTER}}})", "staleness")])
                    .thresholds(thresholds((None, "green"), (60, "orange"), (180, "red"))))
        .with_panel(stat_panel("Eviction budget left", "Evictions left in the current window "
                               "(gputide_eviction_budget_remaining).", "none",
                               [q(f"min(gputide_eviction_budget_remaining{{{CLUSTER}}})", "budget")])
                    .thresholds(thresholds((None, "red"), (1, "green"))))
        .with_panel(stat_panel("Pod watch failures", "Consecutive failed lists or watches of the pods whose "
                               "owners the planner uses (gputide_kubernetes_watch_failures); above 0, it plans "
                               "on the last pods it read (alert GputideKubernetesWatchFailing after 15 min).",
                               "none",
                               [q(f'max(gputide_kubernetes_watch_failures{{{CLUSTER}, resource="pods"}})',
                                  "failures")])
                    .thresholds(thresholds((None, "green"), (1, "orange"), (5, "red"))))
    )
    d = (
        d.with_panel(timeseries_panel(
            "Actions by type and reason", "Actions carried out per interval (gputide_actions_total), by type "
            "(migrate, throttle, scale_inference, scale_training, ...) and the reason the planner gave.", "none",
            [q(f"sum by (type, reason) (increase(gputide_actions_total{{{CLUSTER}}}[$__rate_interval]))",
               "{{type}}: {{reason}}")], bars=True, stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "Rejections by limit", "Planned actions the safety chokepoint refused, by the limit that refused "
            "them (gputide_actions_rejected_total): a steady stream says which setting to tune.", "none",
            [q(f"sum by (reason) (increase(gputide_actions_rejected_total{{{CLUSTER}}}[$__rate_interval]))",
               "{{reason}}")], bars=True, stack=True, min_val=0))
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
            [q(f"max(gputide_telemetry_staleness_seconds{{{CLUSTER}}})", "staleness"),
             q(f"max(gputide_fail_static{{{CLUSTER}}})", "fail-static")], min_val=0)
            .override_by_name("fail-static", [dm.DynamicConfigValue(id_val="unit", value="none"),
                                              dm.DynamicConfigValue(id_val="custom.axisPlacement",
                                                                    value="right")]))
        .with_panel(timeseries_panel(
            "Leader by replica", "gputide_leader per controller replica: exactly one should be 1.", "none",
            [q(f"max by (pod, instance) (gputide_leader{{{CLUSTER}}})", "{{pod}} {{instance}}")],
            min_val=0, max_val=1))
    )
    return d
