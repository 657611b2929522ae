"""The controller's own Prometheus metrics (docs/metrics.md section 3), on an injectable CollectorRegistry.

`ControllerMetrics(registry)` creates every `gputide_` series the reconcile loop updates; tests pass a fresh
`CollectorRegistry()` and read values back with `registry.get_sample_value(...)`. Nothing here starts a server:
`gputide run --metrics-port` does that in the CLI.

Besides the loop's own state (durations, actions, fail-static, leader ...) the controller reports what it sees
in the fleet: GPUs by class, fragmentation, waiting training jobs, computed from a `ClusterSnapshot` by
`balancer.fleet_usage`.

Labelled counters start every label value the controller can count at 0 (`gputide_actions_total` every (type,
reason) pair of `balancer.action_labels.action_label_pairs`, rejections every limit, reconcile results), so
`increase()` and `rate()` see the first increment; a series created at its first increment starts at 1 and reads
as no change. `gputide_actuation_errors_total` starts every (type, outcome, code) of
`balancer.actuation_codes.error_label_triples` at 0: its code, whatever the actuator saw, is mapped into that fixed
set as it is counted (`ActuationErrors`), so the series stay few and each code's first error is an increase.

Labelled gauges are replaced as a whole each cycle (`_LabelledGauge.set_all`), so a service or GPU model that
disappears stops being reported instead of freezing at its last value.

The registry also serves prometheus_client's `process_` series (`process_start_time_seconds` for the alerts).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector
from prometheus_client import Counter as PromCounter

from balancer import catalog, safety
from balancer.action_labels import action_label_pairs
from balancer.actuation_codes import error_code, error_label_triples
from balancer.errors import SafetyViolation
from balancer.fleet_usage import SHRINK_CAUSES

TELEMETRY_ERROR = "telemetry_error"   # reading telemetry raised something other than a TelemetryError
FAIL_STATIC_REASONS = ("stale_telemetry", "missing_telemetry", "invalid_telemetry", "telemetry_unavailable",
                       TELEMETRY_ERROR, "emergency_stop")
CAPACITY_CLASSES = ("inference", "training", "loaned", "idle")
# gputide_hpa_reads_unusable{reason}: no HPA list yet, none listed for three ttls, one HPA's target unreadable
HPA_UNUSABLE = ("unlisted", "stale", "odd")
EXCLUSION_SCOPES = ("target", "workload")   # gputide_migration_exclusions{scope}: `balancer.plan.planner.exclusions`
STALE_PLAN = "stale_plan"   # the loop's own rejections: the fleet changed between planning and acting,
NOT_LEADER = "not_leader"   # the Lease was lost mid-cycle (another replica may act now),
SHUTTING_DOWN = "shutting_down"   # SIGTERM came mid-cycle: only the action in progress was finished


def rejection_reasons() -> tuple[str, ...]:
    """Every `gputide_actions_rejected_total{reason}` value: each safety limit's reason, and the loop's own."""
    found, todo = set(), [SafetyViolation]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if isinstance(getattr(cls, "reason", None), str) and cls.__module__.startswith(safety.__name__):
            found.add(cls.reason)
    return tuple(sorted(found | {STALE_PLAN, NOT_LEADER, SHUTTING_DOWN}))
WAITING_OVER_S = {"0h": 0.0, "4h": 4 * 3600.0}
# a cycle that plans only takes well under a second; one that acts takes each action's time on top, up to
# `--action-deadline` (3 to 10 minutes) each: the quantiles must tell a minute's cycle from an hour's, not read 10 s
RECONCILE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


def oldest_age(snapshot: object, source: object) -> float:
    """The oldest sample age one telemetry reading measured: its snapshot's, else the one its source measured before
    refusing the reading (`oldest_sample_age_s`, where the source keeps one), else NaN (unknown, never a stale
    value from an earlier reading)."""
    if snapshot is not None:
        age = np.asarray(getattr(snapshot, "sample_age_s", ()), dtype=float)
        return float(age.max()) if age.size and np.isfinite(age).all() else math.nan
    return float(getattr(source, "oldest_sample_age_s", math.nan))


class _LabelledGauge:
    """A labelled Gauge whose children are replaced as a whole, so vanished label sets disappear."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge, self._keys = gauge, set()

    def set_all(self, values: Mapping[tuple[str, ...], float]) -> None:
        for key in self._keys - set(values):
            self.gauge.remove(*key)
        for key, value in values.items():
            self.gauge.labels(*key).set(value)
        self._keys = set(values)


class WatchGauges:
    """`gputide_kubernetes_watch_synced` and `_failures` per followed resource, for any gputide process that
    follows Kubernetes objects by watch (the controller, the secondary scheduler); read at each scrape."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.synced = Gauge("gputide_kubernetes_watch_synced", "1 once the first list of a Kubernetes resource "
                            "followed by watch has succeeded.", ["resource"], registry=registry)
        self.failures = Gauge(
            "gputide_kubernetes_watch_failures", "Consecutive failed lists or watches of a followed Kubernetes "
            "resource (0 while its watch delivers); meanwhile the last known state is used.", ["resource"],
            registry=registry)

    def follow(self, resource: str, synced: Callable[[], bool], failures: Callable[[], int]) -> None:
        """Report a watch's state (`ListWatch.synced`, `.failures`)."""
        self.synced.labels(resource).set_function(lambda: float(synced()))
        self.failures.labels(resource).set_function(lambda: float(failures()))


class ShardGauges:
    """What the shard a controller runs (`gputide run --shard`) owns: a GPU node labelled for no shard, or for one that
    does not run, is left alone by every shard, and GputideGpuNodeInNoShard finds it against the exporters'
    hostnames."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.count = _LabelledGauge(Gauge("gputide_shard_nodes", "Nodes the shard this controller runs owns (those "
                                          "its selector matches in the latest reading, and a dark one it held last), "
                                          "by shard; no series unsharded or on a replica that does not lead.",
                                          ["shard"], registry=registry))
        self.info = _LabelledGauge(Gauge("gputide_shard_node_info", "1 for each node the shard this controller runs "
                                         "owns (as gputide_shard_nodes counts them), by shard and node.",
                                         ["shard", "node"], registry=registry))

    def own(self, shard: str | None, nodes: Collection[str]) -> None:
        """The nodes shard `shard` owns (`ShardedSource.shard_nodes`, held or not: the shard's, not this reading's);
        None: no shard (unsharded, or a replica that stopped leading), no series. A shard that owns none says 0."""
        self.count.set_all({} if shard is None else {(shard,): float(len(set(nodes)))})
        self.info.set_all({} if shard is None else {(shard, node): 1.0 for node in set(nodes)})


class ActuationErrors:
    """`gputide_actuation_errors_total`, every (type, outcome, code) the controller can count created at 0; `labels`
    maps the actuator's code into that set (`balancer.actuation_codes.error_code`)."""

    def __init__(self, counter: PromCounter) -> None:
        self.counter = counter
        for kind, outcome, code in error_label_triples():
            counter.labels(type=kind, outcome=outcome, code=code)

    def labels(self, *, type: str, outcome: str, code: str) -> PromCounter:
        return self.counter.labels(type=type, outcome=outcome, code=error_code(outcome, code))


def _one_each(names: Collection[str], caller: str) -> dict[tuple[str], float]:
    """A series at 1 for each name: a string is refused, since iterated it would label a series per character."""
    if isinstance(names, str):
        raise TypeError(f"{caller}: a collection of names, not the string {names!r}")
    return {(n,): 1.0 for n in names}


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        # process_start_time_seconds (and the other process_ series; none off Linux): GputideKueueQuotaUntold
        # tells a counter of a process started within the hour from one scraped an hour without counting.
        ProcessCollector(registry=r)
        self.reconcile_duration = Histogram(
            "gputide_reconcile_duration_seconds", "Time one reconcile cycle took.", registry=r,
            buckets=RECONCILE_BUCKETS_S)
        self.reconcile_total = PromCounter("gputide_reconcile", "Reconcile cycles by result.", ["result"],
                                           registry=r)
        self.last_reconcile = Gauge("gputide_last_reconcile_timestamp_seconds",
                                    "When the last reconcile cycle finished.", registry=r)
        self.actions = PromCounter("gputide_actions", "Actions carried out, by type and reason.", ["type", "reason"],
                                   registry=r)
        self.rejected = PromCounter("gputide_actions_rejected", "Actions refused, by the limit that refused them.",
                                    ["reason"], registry=r)
        self.actuation_errors = ActuationErrors(PromCounter(
            "gputide_actuation_errors", "Accepted actions the actuator could not carry out, by action type, outcome "
            "(retry: temporary, failed: permanent) and code (HTTP status, transport, deadline, refused, unknown, "
            "other).",
            ["type", "outcome", "code"], registry=r))
        self.unknown_outcomes = PromCounter(
            "gputide_actuation_unknown_outcomes", "Failed actions that may have been carried out all the same (a "
            "write got no answer), by action type: counted against the safety budgets.", ["type"], registry=r)
        self.fail_static = Gauge("gputide_fail_static", "1 while the controller holds still.", registry=r)
        self.fail_static_info = Gauge("gputide_fail_static_info", "1 for the current fail-static reason.",
                                      ["reason"], registry=r)
        self.staleness = Gauge("gputide_telemetry_staleness_seconds", "Age of the oldest sample this cycle's "
                               "telemetry reading measured, held or not; NaN when it measured none (see "
                               "gputide_fail_static_info for why it held).", registry=r)
        self.health_unknown = Gauge(
            "gputide_gpus_health_unknown", "GPUs lacking XID or memory-health series the rest of the fleet "
            "publishes: kept from new work (never a migration target); NaN where the source cannot tell.", registry=r)
        self.forgotten = _LabelledGauge(Gauge(
            "gputide_gpus_forgotten", "GPUs forgotten (out of the plan) after holding still for them gone from "
            "telemetry, while their node is still a Kubernetes node, by node.", ["node"], registry=r))
        self.shard = ShardGauges(r)
        self._leader = Gauge("gputide_leader", "1 on the replica that acts, by the Lease it elects on (empty without "
                             "leader election).", ["lease"], registry=r)
        self.leader = self._leader.labels(lease="")
        self.eviction_budget = Gauge("gputide_eviction_budget_remaining", "Evictions left in the current window.",
                                     registry=r)
        self.forecast_demand = _LabelledGauge(Gauge("gputide_forecast_demand", "Forecast demand (req/s).",
                                                    ["service", "quantile", "horizon"], registry=r))
        self.capacity_holding = _LabelledGauge(Gauge(
            "gputide_capacity_holding", "1 while capacity shifting holds, by reason (unattributed_pods: a profiled "
            "service's pods have no owner; inference_demand_unknown: a profiled service's demand is unknown, NaN or "
            "no series while its pods run, while thermal relief goes on).", ["reason"], registry=r))
        self.inference_demand_unknown = _LabelledGauge(Gauge(
            "gputide_inference_demand_unknown", "1 for each profiled inference service whose unknown demand capacity "
            "shifting holds for this cycle (its demand NaN, or no serving series at all while its pods run); no "
            "series for the others.", ["service"], registry=r))
        self.hpa_reads_unusable = _LabelledGauge(Gauge(
            "gputide_hpa_reads_unusable", "1 while the HPAs read for capacity loans are unusable, so no service lends "
            "a replica, by the reason (unlisted: no list yet; stale: none listed for three ttls; odd: an HPA whose "
            "target cannot be read); 0 for the others.", ["reason"], registry=r))
        self.forecast_for_now = _LabelledGauge(Gauge(
            "gputide_forecast_for_now", "Demand (req/s) forecast for now when now was `horizon` ahead: plotted against "
            "the demand now, forecast and outcome line up in time.", ["service", "quantile", "horizon"], registry=r))
        self.forecast_error = _LabelledGauge(Gauge(
            "gputide_forecast_error_ratio", "Rolling MAE of the p50 forecast over mean demand.",
            ["service", "horizon"], registry=r))
        self.forecast_fallback = _LabelledGauge(Gauge(
            "gputide_forecast_fallback", "1 while persistence serves in place of a failed forecast model (auto's "
            "candidates included), per service and model.", ["service", "model"], registry=r))
        self.forecast_history_waiting = _LabelledGauge(Gauge(
            "gputide_forecast_history_waiting", "1 while a service's demand history could not be read from Prometheus "
            "(asked again each cycle), or holds less than its model's daily season plus the horizon: it has no "
            "forecast meanwhile, and the capacity planner holds it.", ["service"],
            registry=r))
        self.capacity = Gauge("gputide_capacity_gpus", "GPUs by class: inference, training, loaned (inference GPUs "
                              "lent to training, part of training), idle.", ["class"], registry=r)
        self.capacity_target = _LabelledGauge(Gauge(
            "gputide_capacity_target_gpus", "GPUs the forecast asks for, per inference service.", ["service"],
            registry=r))
        self.fragmentation = _LabelledGauge(Gauge(
            "gputide_fragmentation_ratio", "Fragmented share of idle GPUs (FGD's measure against the workload mix).",
            ["modelName"], registry=r))
        self.unallocatable = _LabelledGauge(Gauge(
            "gputide_unallocatable_gpus", "Idle GPU capacity, in GPUs, that the workload mix cannot use.",
            ["modelName"], registry=r))
        self.training_waiting = Gauge("gputide_training_waiting_jobs",
                                      "Training jobs waiting to run, for longer than `over`.", ["over"], registry=r)
        self.shrunk_workers = Gauge(
            "gputide_shrunk_workers", "Workers gputide took from training jobs and still owes back, by the planner "
            "that took them (hotspot, colocation).", ["cause"], registry=r)
        self.shrunk_longest = Gauge(
            "gputide_shrunk_longest_seconds", "How long the job owed workers the longest (by the cause of its "
            "shrink) has owed them, since the first cycle this controller saw it owe; 0 when none is owed.",
            ["cause"], registry=r)
        self.exclusions = Gauge(
            "gputide_migration_exclusions", "Migrations the planner holds back after refusals, by scope: target, "
            "(workload, node) pairs the actuator refused as a target, or the safety guard kept off as full at "
            "maxConcurrentMigrationsPerNode until it no longer counts the node full (moved elsewhere meanwhile); "
            "workload, workloads not moved at all (the safety guard's other refusals, the actuator's other failures).",
            ["scope"], registry=r)
        self.watches = WatchGauges(r)
        for result in ("ok", "fail_static", "error"):
            self.reconcile_total.labels(result=result)
        for kind, reason in action_label_pairs():   # a first action then reads as an increase, not a new series at 1
            self.actions.labels(type=kind, reason=reason)
        for reason in rejection_reasons():   # known label values start at 0, so rate() and panels see them
            self.rejected.labels(reason=reason)
        for kind in dict.fromkeys(kind for kind, _ in action_label_pairs()):
            self.unknown_outcomes.labels(type=kind)
        for cls in CAPACITY_CLASSES:
            self.capacity.labels(cls).set(0)
        for over in WAITING_OVER_S:
            self.training_waiting.labels(over).set(0)
        self.set_shrunk_workers({})
        self.set_exclusions({})

    def standby(self) -> None:
        """A replica that stopped acting (it lost its Lease) stops reporting what it saw while it acted: fail-static,
        capacity, forecasts, fragmentation, waiting jobs, owed workers and held-back migrations go back to empty and
        the GPUs of unknown health to NaN (it reads no telemetry), and a shard's nodes go (another replica leads it
        now), so alerts and dashboard sums count the leader only, not also the frozen values of a former one. Its
        staleness and eviction budget stay (the dashboards and alerts skip a standby's)."""
        self.set_fail_static(None)
        self.health_unknown.set(math.nan)
        self.forgotten.set_all({})
        self.set_capacity({}, {})
        self.set_capacity_holding(())
        self.set_inference_demand_unknown(())
        self.set_hpa_reads_unusable(None)
        self.set_forecast_demand({})
        self.set_forecast_for_now({})
        self.set_forecast_error({})
        self.set_forecast_fallback({})
        self.set_forecast_history_waiting(())
        self.set_fragmentation({})
        self.set_training_waiting({})
        self.set_shrunk_workers({})
        self.set_exclusions({})
        self.shard.own(None, ())

    def fleet_unknown(self) -> None:
        """A held cycle (fail-static) plans on no reading: what planned cycles report of the fleet is not shown as if
        current while the controller is blind. The capacity split and the waiting-job counts read NaN (unknown, as the
        GPUs of unknown health during a hold); the capacity targets, fragmentation and unallocatable GPUs per model
        go absent (the forecast series go with the forecast: `FleetRecorder.hold`). What gputide owes, holds back and
        holds stays: a hold gives no worker back (`shrunk_workers`), forgets no refusal (`exclusions`), and moves no
        capacity (`capacity_holding`: cleared, a hold of a minute or two every few minutes reset
        GputideCapacityHolding's `for` and kept it from firing while nothing was decided for an hour)."""
        self.set_capacity(dict.fromkeys(CAPACITY_CLASSES, math.nan), {})
        self.set_fragmentation({})
        for over in WAITING_OVER_S:
            self.training_waiting.labels(over).set(math.nan)

    def follow_watch(self, resource: str, synced: Callable[[], bool], failures: Callable[[], int]) -> None:
        self.watches.follow(resource, synced, failures)

    def set_fail_static(self, reason: str | None) -> None:
        self.fail_static.set(1 if reason else 0)
        for r in {*FAIL_STATIC_REASONS, *([reason] if reason else [])}:
            self.fail_static_info.labels(reason=r).set(1 if r == reason else 0)

    def set_reading(self, snapshot: object, source: object, held: bool) -> None:
        """One telemetry reading, held on or not: the staleness of what it measured (`oldest_age`: NaN when it
        measured none) and, on one acted on, the GPUs of unknown health its source saw (`health_unknown`, where
        the source keeps it; NaN where it cannot tell, and during a hold), and the GPUs its source has forgotten while
        their node is still listed, by node (`forgotten`, held or not: the source's state, not this reading's), and,
        of a shard's source, the nodes the shard owns (`ShardedSource.shard_nodes`, likewise)."""
        self.staleness.set(oldest_age(snapshot, source))
        unknown = None if held else getattr(source, "health_unknown", None)
        self.health_unknown.set(math.nan if unknown is None else len(unknown))
        self.forgotten.set_all({(node,): float(n) for node, n in
                                Counter((getattr(source, "forgotten", None) or {}).values()).items()})
        self.shard.own(*(getattr(source, "shard_nodes", None) or (None, ())))   # a shard's source alone

    def set_capacity(self, split: Mapping[str, float], targets: Mapping[str, float] | None = None) -> None:
        """`split`: GPUs per class (missing classes read 0); `targets`: GPUs per service (None: leave as is)."""
        for cls in CAPACITY_CLASSES:
            self.capacity.labels(cls).set(float(split.get(cls, 0)))
        if targets is not None:
            self.capacity_target.set_all({(name,): float(v) for name, v in targets.items()})

    def set_fragmentation(self, by_model: Mapping[str, Mapping[str, float]]) -> None:
        """`by_model` is keyed by catalogue key; the label is the modelName the exporters publish, so the dashboards'
        `$model` variable (label_values of `modelName` on the GPU series) selects these series too."""
        name = {m: spec.model_name if (spec := catalog.CATALOGUE.get(m)) else m for m in by_model}
        self.fragmentation.set_all({(name[m],): v["fragmentation_ratio"] for m, v in by_model.items()})
        self.unallocatable.set_all({(name[m],): v["unallocatable_gpus"] for m, v in by_model.items()})

    def set_capacity_holding(self, reasons: Collection[str]) -> None:
        """The capacity planner's hold reasons this cycle (`PlannerState.capacity_holding`: both when a demand is
        unknown and pods are unattributed), a series each; none: the gauge has no series. A string is refused: it
        was the comma-joined form once, and iterated it would label a series per character."""
        self.capacity_holding.set_all(_one_each(reasons, "set_capacity_holding"))

    def set_inference_demand_unknown(self, services: Collection[str]) -> None:
        """The profiled services whose unknown demand the capacity planner holds for this cycle
        (`PlannerState.demand_held`), a series each; the rest, and services gone, have none. Before, only the
        recorded NaN told, so a service whose series were gone altogether (every vLLM scrape lost) was named by no
        alert."""
        self.inference_demand_unknown.set_all(_one_each(services, "set_inference_demand_unknown"))

    def set_hpa_reads_unusable(self, reason: str | None) -> None:
        """Why the HPA reader's last answer was unusable for loans (`HPA_UNUSABLE`; "" usable: every reason
        0), set at each of its reads; None: no series (no reader read, or a standby, which reads none)."""
        self.hpa_reads_unusable.set_all({} if reason is None else {(r,): float(r == reason) for r in HPA_UNUSABLE})

    def set_forecast_demand(self, values: Mapping[tuple[str, str, str], float]) -> None:
        """{(service, quantile, horizon): req/s} forecast for the coming horizon, every service of this cycle's
        forecasts: a service no longer forecast (deleted, renamed) loses its series instead of keeping them frozen."""
        self.forecast_demand.set_all({k: float(v) for k, v in values.items()})

    def set_forecast_for_now(self, values: Mapping[tuple[str, str, str], float]) -> None:
        """{(service, quantile, horizon): req/s} of the forecasts issued one horizon ago for now."""
        self.forecast_for_now.set_all({k: float(v) for k, v in values.items() if math.isfinite(v)})

    def set_forecast_error(self, errors: Mapping[tuple[str, str], float]) -> None:
        """{(service, horizon): ratio}; NaN ratios (nothing scored yet) are left out."""
        self.forecast_error.set_all({k: float(v) for k, v in errors.items() if math.isfinite(v)})

    def set_forecast_fallback(self, fallbacks: Mapping[tuple[str, str], str]) -> None:
        """{(service, model): error} of the models persistence serves in place of now; the rest go back to absent."""
        self.forecast_fallback.set_all({k: 1.0 for k in fallbacks})

    def set_forecast_history_waiting(self, services: Iterable[str]) -> None:
        """The services whose demand history waits to be read (`ServiceForecaster.unseeded`); the rest go absent."""
        self.forecast_history_waiting.set_all({(s,): 1.0 for s in services})

    def set_training_waiting(self, waiting_s: Mapping[str, float]) -> None:
        """{job: seconds it has waited so far} -> the count per `over` threshold."""
        for over, threshold in WAITING_OVER_S.items():
            self.training_waiting.labels(over).set(sum(1 for s in waiting_s.values() if s >= threshold))

    def set_shrunk_workers(self, owed: Mapping[str, int], longest_s: Mapping[str, float] | None = None) -> None:
        """Workers owed back per cause (`fleet_usage.shrunk_workers`) and how long the longest-owing job of each cause
        has owed (seconds); a cause missing reads 0."""
        for cause in SHRINK_CAUSES:
            self.shrunk_workers.labels(cause).set(float(owed.get(cause, 0)))
            self.shrunk_longest.labels(cause).set(float((longest_s or {}).get(cause, 0.0)))

    def set_exclusions(self, counts: Mapping[str, int]) -> None:
        """{scope: how many} the planner's memory of refusals holds back (`EXCLUSION_SCOPES`; a scope missing
        reads 0)."""
        for scope in EXCLUSION_SCOPES:
            self.exclusions.labels(scope).set(float(counts.get(scope, 0)))

    def elect_on(self, lease: str) -> None:
        """Label gputide_leader with the Lease this replica elects on: shards of one job elect on their own Leases,
        and GputideControllerNoLeader tells them apart by it."""
        self._leader.remove("")
        self.leader = self._leader.labels(lease=lease)
