"""Tidal capacity shifting for the live controller (`gputide run` with ``capacity.enabled``): the pieces that
know about files, Prometheus and time, around the pure `balancer.plan.capacity_loop.plan_with_capacity`.

* `load_profiles(path)`: the inference services the planner may resize, from a ``ServiceProfiles`` YAML file
  (what one replica sustains within the SLO, its warm-up, bounds, GPU models). Every mistake is an `InputError`
  naming the file, the field, the value and what is allowed (exit code 2)::

      apiVersion: gputide/v1alpha1
      kind: ServiceProfiles
      services:
        - name: llm-chat             # the `service` label of gputide_inference_demand_rps
          rpsPerReplica: 30          # req/s one replica serves within its latency SLO
          warmupSeconds: 300         # a new replica serves nothing for this long
          minReplicas: 2             # at least 1 (at 0 no pod reports its demand)
          maxReplicas: 40
          gpusPerReplica: 1
          gpuModels: [H100-SXM]      # optional: the models its pods may run on
          homeReplicas: 24           # optional: its static allotment (what its own peak needs)
          latencySloSeconds: 2       # optional (0.5): its p99 SLO; latency pressure = p99 / this

* `PrometheusDemandHistory`: a service's past demand from Prometheus (one range query per service, cached), which
  seeds the forecaster and the burst tracker the first time the controller sees the service, so a restarted
  controller forecasts from the first cycle instead of after days of watching. A query that failed is asked again
  on later cycles (`balancer.forecast.service.HistorySeeds`) until it is answered.
* `RiseTracker`: the demand the controller observed each cycle over a trailing window, and the burst allowance
  learned from it (shared with the simulator's tidal scenario).
* `CapacityLoopPlanner`: the loop's planner callable: observes demand, learns bursts, calls the pure planner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from string import Template
from typing import Any

import numpy as np
import pandas as pd

from balancer import catalog
from balancer.config import SLO_RANGE_S, BalancerPolicy, number_as_text
from balancer.errors import GputideError, InputError
from balancer.forecast.service import HistorySeeds
from balancer.model import ClusterSnapshot, Forecast, Plan
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.capacity_plan import rise_allowance
from balancer.plan.planner import PlannerState
from balancer.telemetry.promapi import MAX_POINTS
from balancer.telemetry.slo_rules import service_name
from balancer.yamlfile import expect_kind, read_yaml

log = logging.getLogger(__name__)
# the higher of a service's series, as the live reading takes it (`serving.read_services`): copies of its series
# (an HA pair read without deduplication, two scrape jobs) are one demand, which a sum counted twice
DEFAULT_DEMAND_QUERY = 'max(gputide_inference_demand_rps{$selector})'

# YAML key -> (ServiceCapacity field, type, lowest allowed, highest allowed, required): one bound each way, so every
# refusal of a number says "from LO to HI" (the lows and highs lived in three tables, and rpsPerReplica 0 said
# "> 0", 1e-9 "from 1e-06 to 1e+09" and 2e9 "up to 1e+09"). The fields something is divided by have a real low:
# demand / rpsPerReplica is a replica count, p99 / latencySloSeconds a latency pressure, and `rpsPerReplica:
# 1.0e-320` passed `> 0` and the division overflowed in the planner (OverflowError).
_FIELDS: dict[str, tuple[str, type, float, float, bool]] = {
    "name": ("name", str, 0, 0, True),
    "rpsPerReplica": ("rps_per_replica", float, 1e-6, 1e9, True),
    "warmupSeconds": ("warmup_s", float, 0, 86_400, False),
    "minReplicas": ("min_replicas", int, 1, 100_000, False),   # 0: see `_value`
    "maxReplicas": ("max_replicas", int, 1, 100_000, False),
    "gpusPerReplica": ("gpus_per_replica", int, 1, 64, False),
    "gpuModels": ("models", list, 0, 0, False),
    "homeReplicas": ("home_replicas", int, 0, 100_000, False),
    "latencySloSeconds": ("slo_latency_s", float, *SLO_RANGE_S, False),
}


def _value(item: Mapping[str, Any], key: str, where: str, file: str) -> Any:
    _attr, kind, low, high, _ = _FIELDS[key]
    value = item[key]
    if kind is str:
        if not isinstance(value, str) or not value.strip():
            raise InputError(file, where, value, "a non-empty string")
        return service_name(value.strip(), file, where)   # it goes into PromQL matchers and Kubernetes calls
    if kind is list:
        if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
            raise InputError(file, where, value, "a non-empty list of GPU model names, e.g. [H100-SXM]")
        return frozenset(catalog.get(m, file=file, field=where).key for m in value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    # finite before any float(): float() of a 400-digit integer overflows
    finite = number and (math.isfinite(value) if isinstance(value, float) else abs(value) < 1e300)
    ok = finite and (kind is float or float(value).is_integer())
    if not ok or not low <= value <= high:
        what = "an integer" if kind is int else "a number"
        allowed = f"{what} from {low:g} to {high:g}" if math.isfinite(high) else f"{what} at least {low:g}"
        if key == "minReplicas" and ok and value == 0:   # scale to zero: no vLLM pod, no demand series
            allowed += (" (a service at 0 replicas has no vLLM pod to report its demand, so the controller could "
                        "never see it to bring it back)")
        raise InputError(file, where, value, allowed, number_as_text(value, integer=kind is int))
    return kind(value)


def profiles_from_dict(doc: Any, file: str) -> dict[str, ServiceCapacity]:
    doc = expect_kind(doc, file, "ServiceProfiles", "apiVersion, kind, services")
    items = doc.get("services")
    if not isinstance(items, list) or not items:
        raise InputError(file, "services", items, "a non-empty list of services")
    out: dict[str, ServiceCapacity] = {}
    for i, item in enumerate(items):
        path = f"services[{i}]"
        if not isinstance(item, Mapping):
            raise InputError(file, path, item, "a mapping with name and rpsPerReplica")
        unknown = sorted((k for k in item if k not in _FIELDS), key=str)  # YAML keys may be ints, None, booleans
        if unknown:
            raise InputError(file, f"{path}.{unknown[0]}", item[unknown[0]], "one of the fields " + ", ".join(_FIELDS))
        kwargs = {}
        for key, (attr, _kind, _low, _high, required) in _FIELDS.items():
            if key in item:
                kwargs[attr] = _value(item, key, f"{path}.{key}", file)
            elif required:
                raise InputError(file, f"{path}.{key}", None, "a required field")
        if kwargs.get("min_replicas", 1) > kwargs.get("max_replicas", 1_000_000):
            raise InputError(file, f"{path}.minReplicas", kwargs["min_replicas"],
                             f"at most maxReplicas ({kwargs['max_replicas']})")
        if kwargs.get("home_replicas", 0) > kwargs.get("max_replicas", 1_000_000):
            raise InputError(file, f"{path}.homeReplicas", kwargs["home_replicas"],
                             f"at most maxReplicas ({kwargs['max_replicas']})")
        if kwargs["name"] in out:
            raise InputError(file, f"{path}.name", kwargs["name"], "a name no other service in the file has")
        out[kwargs["name"]] = ServiceCapacity(**kwargs)
    return out


def service_query(template: str, service: str, cluster: str | None = None) -> str:
    """A per-service PromQL template filled in: ``$service`` is the service's name, ``$namespace`` its namespace
    ("" for a bare name), ``$cluster`` the controller's ``--cluster`` ("" without) and ``$selector`` the label
    matchers for them (``service="vllm", namespace="team-a"`` for the qualified ``team-a/vllm``,
    ``service="chat"`` for a bare ``chat``, with ``, cluster="eu-1"`` under ``--cluster eu-1``: a Prometheus that
    holds several clusters would otherwise sum one service's demand over all of them)."""
    namespace, _, name = service.rpartition("/")
    selector = (f'service="{name}"' + (f', namespace="{namespace}"' if namespace else "")
                + (f', cluster="{cluster}"' if cluster else ""))
    return Template(template).safe_substitute(service=name, namespace=namespace, cluster=cluster or "",
                                              selector=selector)


def load_profiles(path: str) -> dict[str, ServiceCapacity]:
    return profiles_from_dict(read_yaml(path, "service profiles"), str(path))


class PrometheusDemandHistory:
    """`history(service, now)`: the service's demand over the last `days` from Prometheus (`source.demand_history`
    with `query`, a template over ``$service``, ``$namespace`` and ``$selector``: `service_query`), at `step_s`; None
    when Prometheus has nothing or fails (the controller then learns from what it observes). Cached per service for
    `CACHE_S`, so the forecaster and the burst tracker seeding a service in one cycle share one query; a query that
    failed is not cached past its cycle (asked again at a later `now`, after Prometheus came back, it gets its history),
    and nothing is kept longer (a controller running for months does not hold every service's two weeks of demand).

    Calling it answers None both where Prometheus has no data and where the query failed; `read` raises the
    failure (`GputideError`), which is what the forecaster and the burst tracker ask (`HistorySeeds`: a service
    is seeded once its query was answered, asked again while it fails). A failure is logged once (a warning) until
    the service's history is read; later tries are logged at debug and the read that ends it at info."""

    CACHE_S = 600.0

    def __init__(self, source: Any, query: str = DEFAULT_DEMAND_QUERY, days: float = 14.0,
                 step_s: float = 300.0, cluster: str | None = None) -> None:
        self.source, self.query, self.days, self.step_s, self.cluster = source, query, days, step_s, cluster
        self.cache: dict[str, tuple[float, pd.Series | None]] = {}   # service -> (when asked, its history)
        # service -> (failed tries in a row, when last tried, its error): until its history is read (a day at most)
        self.failing: dict[str, tuple[int, float, GputideError]] = {}

    def __call__(self, service: str, now: float) -> pd.Series | None:
        try:
            return self.read(service, now)
        except GputideError:
            return None

    def read(self, service: str, now: float) -> pd.Series | None:
        """The service's history, None where Prometheus has none; raises `GputideError` where the query failed
        (asked once per `now`: the same failure is raised again without asking)."""
        self.cache = {k: v for k, v in self.cache.items() if 0.0 <= now - v[0] < self.CACHE_S}
        self.failing = {k: v for k, v in self.failing.items() if 0.0 <= now - v[1] < 86400.0}
        if service in self.cache:
            return self.cache[service][1]
        tries, last, error = self.failing.get(service, (0, math.nan, None))
        if error is not None and last == now:
            raise error
        promql = service_query(self.query, service, self.cluster)
        # Prometheus answers at most 11,000 points per series: a long history at a fine step is cut to that
        start = max(now - self.days * 86400.0, now - (MAX_POINTS - 1) * self.step_s)
        try:
            y = self.source.demand_history(promql, start, now, self.step_s)
        except GputideError as exc:
            self.failing[service] = (tries + 1, now, exc.with_traceback(None))
            (log.debug if tries else log.warning)("no demand history for %s (%s), failed %d time(s), asked again "
                                                  "next cycle: %s", service, promql, tries + 1, exc)
            raise
        self.failing.pop(service, None)
        if y is not None and not np.isfinite(y.to_numpy(float)).any():
            y = None
        self.cache[service] = (now, y)
        log.info("demand history for %s: %s%s", service,
                 "none" if y is None else f"{int(np.isfinite(y.to_numpy(float)).sum())} samples",
                 f" (after {tries} failed queries)" if tries else "")
        return y


class RiseTracker:
    """A service's demand as the controller observed it each cycle, over the trailing `window_s`, and the burst
    allowance learned from it (`balancer.plan.capacity_plan.rise_allowance`), recomputed every `every_s`."""

    def __init__(self, lead_s: float, window_s: float, cap: float, every_s: float = 600.0) -> None:
        self.lead_s, self.window_s, self.cap, self.every_s = lead_s, window_s, cap, every_s
        self.t: list[float] = []
        self.y: list[float] = []
        self.value, self.computed_at = 0.0, -math.inf

    def observe(self, t: float, y: float) -> None:
        self.t.append(float(t))
        self.y.append(float(y))

    def seed(self, history: pd.Series, every_s: float | None = None) -> None:
        """Past demand (a series with a UTC DatetimeIndex) before the first observation. With `every_s`, it is
        interpolated onto that grid first (the controller's cycle): history stored at a step longer than the
        burst lead has no two samples within one lead, and would teach no burst at all."""
        ok = np.isfinite(history.to_numpy(float))
        t = history.index[ok].as_unit("s").asi8.astype(float)
        y = history.to_numpy(float)[ok]
        if every_s and t.size >= 2:
            grid = np.arange(t[0], t[-1] + 1e-9, every_s)
            t, y = grid, np.interp(grid, t, y)
        self.t[:0] = t.tolist()
        self.y[:0] = y.tolist()
        self.computed_at = -math.inf   # learned again at the next `allowance`

    def allowance(self, now: float) -> float:
        if now - self.computed_at >= self.every_s:
            cut = int(np.searchsorted(self.t, now - self.window_s))
            if cut > len(self.t) // 2:  # trim in bulk, not every cycle
                del self.t[:cut], self.y[:cut]
                cut = 0
            self.value = rise_allowance(np.asarray(self.t[cut:]), np.asarray(self.y[cut:]), self.lead_s, self.cap)
            self.computed_at = now
        return self.value


class CapacityLoopPlanner:
    """The reconcile loop's planner with tidal capacity shifting (`Reconciler(planner=...)`)."""

    def __init__(self, profiles: Mapping[str, ServiceCapacity], capacity_policy: CapacityPolicy, interval_s: float,
                 history: Callable[[str, float], pd.Series | None] | None = None, sharded: bool = False) -> None:
        # jobs are suspended only when the snapshot lists suspended jobs (`plan_with_capacity`): a Job at
        # parallelism 0 has no pods, so a source that sees the cluster through its pods alone could not resume it
        self.profiles, self.interval_s, self.history = dict(profiles), interval_s, history
        self.policy = capacity_policy
        self.sharded = sharded   # `gputide run --shard`: a service with no replica in the shard is no shard's
        self.rises: dict[str, RiseTracker] = {}
        self.seeds = HistorySeeds(history)   # a failed history query is asked again on later cycles

    def bursts(self, snapshot: ClusterSnapshot) -> dict[str, float]:
        out = {}
        names = [name for name in snapshot.services if name in self.profiles]
        pasts = self.seeds.take(names, snapshot.time)
        for name in names:
            st, prof = snapshot.services[name], self.profiles[name]
            tracker = self.rises.get(name)
            if tracker is None:
                # a scale-up decided now serves from the next cycle's warm-up end: the lead a burst must be met in
                tracker = self.rises[name] = RiseTracker(prof.warmup_s + self.interval_s, self.policy.burst_window_s,
                                                         self.policy.max_burst)
            past = pasts.get(name)
            if past is not None:   # before the first demand observed (a seed read after failed queries comes late)
                until = tracker.t[0] if tracker.t else snapshot.time
                tracker.seed(past[past.index.as_unit("s").asi8 < until], every_s=self.interval_s)
            if math.isfinite(st.demand_rps):
                tracker.observe(snapshot.time, st.demand_rps)
            out[name] = tracker.allowance(snapshot.time)
        return out

    def __call__(self, snapshot: ClusterSnapshot, forecasts: Mapping[str, Forecast] | None, policy: BalancerPolicy,
                 state: PlannerState | None = None) -> tuple[Plan, PlannerState]:
        return plan_with_capacity(snapshot, forecasts, policy, state, profiles=self.profiles,
                                  capacity_policy=self.policy, bursts=self.bursts(snapshot), sharded=self.sharded)
