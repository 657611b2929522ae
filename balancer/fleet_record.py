"""What the fleet looks like, into the controller's metrics, once per planning cycle (`FleetRecorder`).

From the snapshot (`balancer.fleet_usage`): GPUs by class, fragmentation and unallocatable GPUs per GPU model,
training jobs waiting (for how long is measured from the first cycle that saw them wait, so it restarts with the
controller or a new term as leader: `restart`), and the workers gputide owes training jobs it shrank, with how long
the job owing the longest has owed (per job, from the first cycle that saw it owe, restarted likewise: shrinks of
different jobs that follow one another do not add up to one long debt). When a
forecaster is configured: its rolling error (`rolling_error(service, horizon)`) and what it forecast for now
(`forecast_for(service, time, horizon)`), when it offers them. What only a capacity planner knows, GPUs on loan,
the GPUs each service's forecast asks for, why it holds and for which services' unknown demand, is read from the
planner state (`loaned_gpus`, `capacity_targets`, `capacity_holding`, `demand_held`) when the planner keeps it there;
the shrinks owed from its `shrunk` and `colocation.shrunk`. A held cycle (fail-static) records none of it: its
forecast series go absent and the fleet reads unknown (`hold`). A failure while recording is logged and never stops
the loop.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from balancer.fleet_usage import fleet_usage, owed_workers
from balancer.forecast.service import horizon_label
from balancer.metrics import ControllerMetrics
from balancer.model import ClusterSnapshot, Forecast
from balancer.plan.capacity_plan import forecast_peak

log = logging.getLogger(__name__)


class FleetRecorder:
    """Sets the fleet gauges of `metrics` from each planned cycle's snapshot and planner state."""

    def __init__(self, metrics: ControllerMetrics) -> None:
        self.metrics = metrics
        self.waiting_since: dict[str, float] = {}   # training job -> when a cycle first saw it wait
        self.owed_since: dict[tuple[str, str], float] = {}   # (cause, job) -> when a cycle first saw it owed workers

    def restart(self) -> None:
        """A new term as leader: the training-wait and owed-worker clocks start again, as in a new process."""
        self.waiting_since = {}
        self.owed_since = {}

    def record(self, snap: ClusterSnapshot, state: Any, forecasts: Mapping[str, Forecast] | None, forecaster: Any,
               horizon_s: float, now: float) -> None:
        """Capacity split, fragmentation, waiting training jobs, owed workers and forecast error into the metrics."""
        m = self.metrics
        try:
            usage = fleet_usage(snap)
            split = dict(usage.capacity, loaned=int(getattr(state, "loaned_gpus", 0) or 0))
            m.set_capacity(split, getattr(state, "capacity_targets", None))
            m.set_capacity_holding(getattr(state, "capacity_holding", frozenset()))
            m.set_inference_demand_unknown(getattr(state, "demand_held", frozenset()))
            m.set_fragmentation(usage.fragmentation)
            self.waiting_since = {j: self.waiting_since.get(j, now) for j in usage.waiting_jobs}
            m.set_training_waiting({j: now - t for j, t in self.waiting_since.items()})
            self._owed(snap, state, now)
        except Exception:  # the gauges must never stop the controller
            log.exception("recording fleet metrics failed")
        try:   # apart: a fleet gauge that failed above must not leave the forecast's frozen too
            self._forecast_series(forecasts or {}, forecaster, horizon_s, snap.time)
        except Exception:
            log.exception("recording forecast metrics failed")

    def hold(self, forecaster: Any, horizon_s: float) -> None:
        """A held cycle (fail-static): no forecast and no fleet it read. Its forecast series are a cycle's without a
        forecast (absent; the history still unread is the forecaster's to say), and the fleet's gauges read unknown
        (`ControllerMetrics.fleet_unknown`): before, both kept the last planned cycle's values, a dashboard showing a
        forecast and a fleet as current while the controller was blind. The waiting and owed clocks are kept, and so
        is the forecast's rolling error (the forecaster's, over past cycles: cleared, short holds reset
        GputideForecastErrorHigh's `for`)."""
        try:
            self.metrics.fleet_unknown()
        except Exception:  # the gauges must never stop the controller
            log.exception("clearing fleet metrics for a hold failed")
        try:   # apart, as in `record`: a fleet gauge that failed must not leave the forecast's frozen too
            self._forecast_series({}, forecaster, horizon_s, math.nan, keep_error=True)   # no service: no `now` read
        except Exception:
            log.exception("clearing forecast metrics for a hold failed")

    def _owed(self, snap: ClusterSnapshot, state: Any, now: float) -> None:
        """Workers owed per cause, and how long the longest-owing job of each cause has owed them."""
        co = getattr(getattr(state, "colocation", None), "shrunk", None) or {}
        owed = owed_workers(snap, getattr(state, "shrunk", None) or {}, co)
        self.owed_since = {(c, j): self.owed_since.get((c, j), now) for c, jobs in owed.items() for j in jobs}
        longest: dict[str, float] = {}
        for (cause, _), since in self.owed_since.items():
            longest[cause] = max(longest.get(cause, 0.0), now - since)
        self.metrics.set_shrunk_workers({c: sum(jobs.values()) for c, jobs in owed.items()}, longest)

    def _forecast_series(self, forecasts: Mapping[str, Forecast], forecaster: Any, horizon_s: float,
                         now: float, keep_error: bool = False) -> None:
        """This cycle's forecasts, their rolling error, what was forecast for `now` and the fallbacks serving, for the
        services forecast this cycle only: a cycle without a forecast (the forecaster failed, or is off, or a hold)
        clears them rather than leaving the last ones frozen, and a deleted service's series go.

        The demand forecast is the largest over [now, now + horizon_s], the window the capacity planner reads
        (`capacity_plan.forecast_peak`): measured from `issued_at` (a step before the current bucket), the gauge
        missed the last step of the planner's horizon, and a forecast kept from an earlier cycle showed buckets
        already past."""
        label = horizon_label(horizon_s)
        self.metrics.set_forecast_demand({(name, f"{q:g}", label): forecast_peak(f, q, now, horizon_s)
                                          for name, f in forecasts.items() for q in f.quantiles})
        fallbacks = getattr(forecaster, "fallbacks", None)
        # a model that failed: persistence serves (logged by the forecaster)
        self.metrics.set_forecast_fallback({k: v for k, v in (fallbacks() if fallbacks else {}).items()
                                            if k[0] in forecasts})
        unseeded = getattr(forecaster, "unseeded", None)   # history unread: no forecast, the planner holds
        self.metrics.set_forecast_history_waiting(unseeded() if unseeded else ())
        rolling_error = getattr(forecaster, "rolling_error", None)
        if rolling_error is not None and not keep_error:
            self.metrics.set_forecast_error({(name, label): rolling_error(name, label) for name in forecasts})
        forecast_for = getattr(forecaster, "forecast_for", None)
        if forecast_for is not None:
            self.metrics.set_forecast_for_now({(name, f"{q:g}", label): v for name in forecasts
                                               for q, v in forecast_for(name, now, label).items()})
