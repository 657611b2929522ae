"""The controller's own Prometheus metrics (docs/metrics.md section 3), on an injectable CollectorRegistry.

`ControllerMetrics(registry)` creates every `gputide_` series the reconcile loop updates; tests pass a fresh
`CollectorRegistry()` and read values back with `registry.get_sample_value(...)`. Nothing here starts a server:
`gputide run --metrics-port` does that in the CLI.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

FAIL_STATIC_REASONS = ("stale_telemetry", "missing_telemetry", "invalid_telemetry", "telemetry_unavailable",
                       "emergency_stop")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.reconcile_duration = Histogram(
            "gputide_reconcile_duration_seconds", "Time one reconcile cycle took.", registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.reconcile_total = Counter("gputide_reconcile", "Reconcile cycles by result.", ["result"], registry=r)
        self.last_reconcile = Gauge("gputide_last_reconcile_timestamp_seconds",
                                    "When the last reconcile cycle finished.", registry=r)
        self.actions = Counter("gputide_actions", "Actions carried out, by type and reason.", ["type", "reason"],
                               registry=r)
        self.rejected = Counter("gputide_actions_rejected", "Actions refused, by the limit that refused them.",
                                ["reason"], registry=r)
        self.fail_static = Gauge("gputide_fail_static", "1 while the controller holds still.", registry=r)
        self.fail_static_info = Gauge("gputide_fail_static_info", "1 for the current fail-static reason.",
                                      ["reason"], registry=r)
        self.staleness = Gauge("gputide_telemetry_staleness_seconds", "Age of the oldest sample used.", registry=r)
        self.leader = Gauge("gputide_leader", "1 on the replica that acts.", registry=r)
        self.eviction_budget = Gauge("gputide_eviction_budget_remaining", "Evictions left in the current window.",
                                     registry=r)
        self.forecast_demand = Gauge("gputide_forecast_demand", "Forecast demand (req/s).",
                                     ["service", "quantile", "horizon"], registry=r)
        for result in ("ok", "fail_static", "error"):
            self.reconcile_total.labels(result=result)

    def set_fail_static(self, reason: str | None) -> None:
        self.fail_static.set(1 if reason else 0)
        for r in {*FAIL_STATIC_REASONS, *([reason] if reason else [])}:
            self.fail_static_info.labels(reason=r).set(1 if r == reason else 0)
