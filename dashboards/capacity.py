"""Tidal Capacity: how inference demand tracks its forecast, and where the GPUs went.

Per service ($service), demand vs the forecaster's p50 with the p50-p90 band; inference vs training GPUs stacked,
the controller's loans (inference GPUs lent to training) and reclaims as annotations, and SLO attainment with the
multi-window burn rate of the Google SRE workbook.

The forecast is a set of quantiles per service, so demand and forecast are drawn per service, one panel each (a
panel repeated for every service $service selects): quantiles do not add, the sum of the services' p90s is not the
p90 of their total (their peaks seldom coincide), and the fleet-wide band this panel once drew by summing them looked
like a forecast of the fleet's demand that no model made.

Services are named from recording rules (service:inference_controller_name:info, service:inference_slo_name:info), so
what came before those rules were loaded (the upgrade that added them) has no recorded name: the demand there is drawn
under its bare `service` where the rule names it so (no namesake in another namespace of its cluster), and a namesake's
(team-a/vllm) is not drawn; the SLO attainment and burn-rate lines are not drawn at all (their name counts the
namespaces of two series sets, pasted into five queries). $service lists from that time only the names the controller
forecasts. A 30-day view is partly blank so for 30 days after the upgrade.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    CLUSTER,
    action_annotation,
    counter_annotation,
    new_dashboard,
    q,
    query_variable,
    timeseries_panel,
)

UID = "gputide-tidal-capacity"
# A service is named as the controller names it (balancer.telemetry.serving.read_services), so that its demand, its
# forecast and its GPU target are one line each under one name: the `service` label alone (a Deployment's name),
# `namespace/service` where that name is found in two namespaces of a cluster (team-a/vllm and team-b/vllm: their
# profiles are named so, and the controller's gauges, gputide_forecast_* and gputide_capacity_target_gpus, carry that
# name in their `service` label; a `namespace` label on them is the controller's scrape target's). `$service` holds
# such names. The demand selected by the bare `service` label matched no forecast of team-a/vllm and added team-a's
# and team-b's demand into one line "vllm".
SERVICE = f'{CLUSTER}, service=~"$service"'   # the controller's own series, named by it
# Demand per (cluster, namespace, service), each series once: an HA pair read without deduplication or two scrape
# jobs publish it twice, and the controller reads the higher (balancer/app/capacity_run.py), where a sum doubled it.
DEMAND = f"max by (cluster, namespace, service) (gputide_inference_demand_rps{{{CLUSTER}}})"
# The names are recorded (rules/gputide-recording.yaml, gputide-slo group), one series per (cluster, namespace,
# service) with the name in NAME: the demand's as the controller names it (CONTROLLER_NAMES), and each SLO series'
# (SLO_NAMES), the namespaces of the demand and of the last hour's SLO series counted, so team-a's and team-b's chat
# are never two lines both named chat. Each query here pasted the PromQL that works the name out (a count of
# namespaces per name, twice per series it names: 1,900 characters a burn-rate line) and `$service` ran it at every
# step of a subquery over the time range (43,000 steps over 30 days). A name is joined on the series' identity, one
# per identity (_table: two names for one failed the range query), and `$service` selects by it.
NAME = "controller_service"
CONTROLLER_NAMES = "service:inference_controller_name:info"
SLO_NAMES = "service:inference_slo_name:info"
# An SLO series is one service by (cluster, namespace, service) (rules/gputide-recording.yaml's gputide-slo group,
# balancer.telemetry.slo_rules.SERVICE_IDENTITY): a Deployment's name can recur in two namespaces of a cluster, each
# its own service with its own budget. The SLO panels keep every series apart (no sum) and name it in this label as
# the controller names the service in its cluster (SLO_NAMES): team-a/chat and team-b/chat where chat is in two
# namespaces there, chat where it is in one (and for counters without a namespace, the simulated fleet's); `$service`
# selects a line by that name alone, as it selects the demand, so `vllm` (a cluster's only vllm) never also draws
# another cluster's team-a/vllm. The cluster then leads the name where the series has one ("c1: team-a/vllm"): two
# clusters' team-a/vllm are two lines told apart.
SLO_NAME = "qualified_service"
SERVICE_REGEX = r'/\bservice="([^"]+)"/'   # the `service` of each series query_result lists

# The SLO the burn rate is measured against: 99 % of requests under their latency target, the objective of the
# burn-rate alerts (rules/gputide-alerts.yaml, and `gputide slo-rules`' default). latencySloSeconds is a p99 target,
# so a service sitting at it has 1 % of its requests over: at 99.9 % it read 10x, a burn that is no burn.
SLO_TARGET = 0.99


def _capacity(cls: str) -> str:
    """gputide_capacity_gpus of one class, over the controllers (a standby reports 0)."""
    return f'sum(gputide_capacity_gpus{{{CLUSTER}, class="{cls}"}})'


def _table(names: str) -> str:
    """One name per (cluster, namespace, service) from the table `names`, those `$service` selects (value 1).

    Its newest, so a restarted Prometheus's last name (no stale marker: it lingers the lookback's 5 minutes) yields to
    the renamed one; two servers read without deduplication and renaming one evaluation apart are one of theirs, not
    two names (a many-to-many join failed the whole range query). Selected after the choice, so a line is never
    drawn under both names."""
    newest = f"topk by (cluster, namespace, service) (1, timestamp({names}{{{CLUSTER}}}))"
    chosen = f'{names}{{{CLUSTER}, {NAME}=~"$service"}} and on (cluster, namespace, service, {NAME}) {newest}'
    return f"max by (cluster, namespace, service, {NAME}) ({chosen})"


def _with_name(expr: str, table: str) -> str:
    """`expr` (one series per (cluster, namespace, service)) with NAME from `table` (one series of value 1 each)."""
    return f"({expr}) * on (cluster, namespace, service) group_left ({NAME}) ({table})"


def _named(expr: str) -> str:
    """`expr` (one series per (cluster, namespace, service)) with its SLO_NAME: the controller's name of the service
    (`$service` selects by it), led by the series' cluster where it has one."""
    joined = f'label_join({_with_name(expr, _table(SLO_NAMES))}, "{SLO_NAME}", ": ", "cluster", "{NAME}")'
    dropped = f'label_replace({joined}, "{NAME}", "", "", "")'
    return f'label_replace({dropped}, "{SLO_NAME}", "$1", "{SLO_NAME}", ": (.*)")'


# `$service` lists the names seen over the dashboard's time range, as the old label_values did (a series API call over
# the range): query_result is one instant query at the range's end, so a service that stopped reporting within it
# (or a name that changed, team-a/vllm once team-b's vllm is gone) was not listed, and under All its panel was never
# drawn. The recorded names are read over the range (each name kept), and the controller's forecast gauges add the
# names it forecasts. Grafana fills in $__range (whole seconds) in a variable's query, refreshed on each time range
# change (query_variable).
SERVICES = (f'group by (service) (label_replace(last_over_time({CONTROLLER_NAMES}{{{CLUSTER}}}[$__range]), '
            f'"service", "$1", "{NAME}", "(.*)") or last_over_time(gputide_forecast_for_now{{{CLUSTER}}}[$__range]))')


def _demand() -> str:
    """Each service's demand under the controller's name (`$service` selects by it), its clusters' added; an unknown
    one (NaN) left out of the sum. A series with no recorded name (before the rule was loaded, or the evaluation
    before it records a new one) is named by its bare `service` where it is the only namespace of that name in its
    cluster at that step, as the rule names it (the same count), and not otherwise: never under a name the rule does
    not give it, and never where the table has a name for it, chosen or not (`$service` selects one name a line)."""
    raw = f'group by (cluster, namespace, service) (gputide_inference_demand_rps{{{CLUSTER}, service=~"$service"}})'
    alone = f"{raw} and on (cluster, service) count by (cluster, service) ({raw}) == 1"
    bare = f'label_replace({alone}, "{NAME}", "$1", "service", "(.*)") unless on (cluster, namespace, service) ' \
           f"{CONTROLLER_NAMES}{{{CLUSTER}}}"
    named = _with_name(DEMAND, f"{_table(CONTROLLER_NAMES)} or {bare}")
    return f'sum by (service) (label_replace({named}, "service", "$1", "{NAME}", "(.*)") >= 0)'


def _per_cluster(series: str) -> str:
    """A controller's gauge `series` per service: each cluster's once (a scrape job's copy, an HA pair's), the
    clusters' added (select one cluster where a service runs in several)."""
    return f"sum by (service) (max by (cluster, service) ({series}))"


def _burn(short: str, long: str) -> str:
    """Per service (cluster, namespace, service), the lower of the burn rates over the windows `short` and `long`:
    above an alert's factor exactly when both are (the multi-window alerts of rules/gputide-alerts.yaml, matched on
    the same identity: the comparison matches all three labels)."""
    ratio = "service:inference_slo_violations:ratio_rate{}{{" + CLUSTER + "}} / " + f"{1 - SLO_TARGET:g}"
    return _named(f"({ratio.format(short)} <= {ratio.format(long)}) or {ratio.format(long)}")


def _fill_between(lower: str, upper: str) -> list[dm.DynamicConfigValue]:
    return [dm.DynamicConfigValue(id_val="custom.fillBelowTo", value=lower),
            dm.DynamicConfigValue(id_val="custom.fillOpacity", value=25),
            dm.DynamicConfigValue(id_val="custom.lineWidth", value=0)]


def build() -> dashboard.Dashboard:
    d = new_dashboard(
        UID, "gputide / Tidal Capacity",
        "Inference demand vs its forecast, the inference/training split, loans and reclaims, SLO attainment.",
        ["capacity", "forecast", "slo"], gpus=False,
    ).with_variable(query_variable(
        "service", "Service", f"query_result({SERVICES})",
        "Inference services as the controller names them (its profiles, its forecast and target gauges): the "
        "`service` label of gputide_inference_demand_rps, namespace/service where a cluster has that name in two "
        "namespaces; every name seen over the time range, and those the controller forecasts. Demand vs forecast "
        "draws one panel per service selected.").regex(SERVICE_REGEX))
    d = d.annotation(action_annotation("GPU loans to training", "blue",
                                       {"scale_inference": ("loan",), "scale_training": ("loan",)})).annotation(
        action_annotation("GPU reclaims for inference", "orange",
                          {"scale_inference": ("reclaim",), "scale_training": ("reclaim",)})).annotation(
        # quota lent to a training queue beyond what its Jobs hold, given back to inference (docs/metrics.md)
        counter_annotation("Kueue quota corrected", "#8e8e8e",
                           [f"gputide_kueue_quota_corrections_total{{{CLUSTER}}}"], "queue"))
    demand = timeseries_panel(
        "Demand vs forecast: $service", "One service's offered load (gputide_inference_demand_rps, what the "
        "forecaster is fed: the simulated fleet's, or the serving rules' from vLLM) against what the forecaster "
        "predicted for that moment one horizon earlier: the service's median and its p50-p90 band "
        "(gputide_forecast_for_now), so forecast and outcome line up in time. A calibrated forecast has demand above "
        "the p90 line about one step in ten. One panel per service ($service; the panel repeats): the forecast is "
        "a quantile per service, and quantiles do not add (the sum of the services' p90s is not the p90 of their "
        "total, their peaks seldom coincide), so no fleet-wide band is drawn. A service is named as the controller "
        "names it (its profile, its gauges): namespace/service where a cluster has its name in two namespaces, so "
        "team-a/vllm's demand is drawn against team-a/vllm's forecast, never with team-b's added; a demand series "
        "published twice (an HA pair, two scrape jobs) counts once, as the controller reads it. Forecasts are per "
        "cluster: where one service runs in several clusters, select one ($cluster), or its lines add the clusters' "
        "demand and their quantiles alike; a cluster whose demand is unknown (NaN: no requests seen in its window, "
        "which the controller holds for) is left out of the sum, where it blanked every cluster's demand, and the "
        "line has a gap only while no cluster's demand is known.", "reqps",
        [q(_demand(), "demand"),
         q(_per_cluster('gputide_forecast_for_now{' + SERVICE + ', quantile="0.5"}'), "forecast p50"),
         q(_per_cluster('gputide_forecast_for_now{' + SERVICE + ', quantile="0.9"}'), "forecast p90")],
        w=24, h=9, min_val=0,
    ).override_by_name("forecast p90", _fill_between("forecast p50", "forecast p90")).repeat(
        "service").repeat_direction("v")
    d = d.with_panel(demand)
    d = (
        d.with_panel(timeseries_panel(
            "GPUs by class", "GPUs the controller counts as inference, training and idle (gputide_capacity_gpus), "
            "stacked to the fleet it plans. The training GPUs are split into the training pool's own and those "
            "loaned to it (inference GPUs lent to training, class loaned, which the controller counts within "
            "training).", "none",
            [q(_capacity("inference"), "inference"),
             q(f"{_capacity('training')} - {_capacity('loaned')}", "training (own)"),
             q(_capacity("loaned"), "loaned to training"),
             q(_capacity("idle"), "idle")],
            stack=True, min_val=0))
        .with_panel(timeseries_panel(
            "GPUs the forecast asks for", "Inference GPUs each service needs for its forecast demand "
            "(gputide_capacity_target_gpus) against what it holds. The targets gap while capacity shifting holds "
            "(gputide_capacity_holding: a service's demand unknown or its pods unattributed) and while the "
            "controller holds still: no target is decided then.", "none",
            [q(_per_cluster(f"gputide_capacity_target_gpus{{{SERVICE}}}"), "{{service}} target"),
             q(_capacity("inference"), "inference held")], min_val=0))
        .with_panel(timeseries_panel(
            "SLO attainment (1h)", "Share of requests served within their latency SLO over the last hour, "
            f"per service. Target: {SLO_TARGET:.0%} (latencySloSeconds is a p99 target). From "
            "gputide_inference_requests_total and "
            "gputide_inference_slo_violations_total (the simulated fleet publishes them) or, serving with vLLM, from "
            "the rules gputide slo-rules writes. A service is its cluster, namespace and name, as the SLO alerts "
            "see it: one line each, named as the controller names it in its cluster (namespace/service where the "
            "cluster has the name in two namespaces, else the name, as $service lists it) after its cluster "
            "(c1: team-a/vllm), so two namespaces' or two clusters' services of one name are lines told apart.",
            "percentunit",
            [q(_named(f"1 - service:inference_slo_violations:ratio_rate1h{{{CLUSTER}}}"), "{{" + SLO_NAME + "}}")],
            max_val=1))
        .with_panel(timeseries_panel(
            "SLO burn rate", f"Error-budget burn rate per service against a {SLO_TARGET:.0%} SLO (1 spends the "
            "budget exactly over the SLO window): latencySloSeconds is a p99 target, so a service at its target "
            "burns at 1 (against 99.9 % it would read 10). As the burn-rate alerts read it: each alert needs both its "
            "windows above its factor for one service, so each line is the lower of the two. Pages: fast, 5m and 1h, "
            "InferenceSloBurnRateFast above 14.4; slow, 30m and 6h, InferenceSloBurnRateSlow above 6. Tickets: 2h "
            "and 1d, InferenceSloBurnRate1d above 3; 6h and 3d, InferenceSloBurnRate3d above 1. None waits a `for`. "
            "A service on vLLM has its own objective (gputide slo-rules --objective, 99 % by default). One line per "
            "cluster, namespace and service, the identity the alerts use, named cluster: name as the attainment "
            "lines.", "none",
            [q(_burn("5m", "1h"), "{{" + SLO_NAME + "}} fast (5m and 1h)"),
             q(_burn("30m", "6h"), "{{" + SLO_NAME + "}} slow (30m and 6h)"),
             q(_burn("2h", "1d"), "{{" + SLO_NAME + "}} 1d ticket (2h and 1d)"),
             q(_burn("6h", "3d"), "{{" + SLO_NAME + "}} 3d ticket (6h and 3d)")],
            min_val=0))
        .with_panel(timeseries_panel(
            "Forecast error", "Rolling mean absolute error over mean demand per service and horizon "
            "(gputide_forecast_error_ratio).", "percentunit",
            [q(f"gputide_forecast_error_ratio{{{SERVICE}}}", "{{service}} {{horizon}}")], w=24, min_val=0))
    )
    return d
