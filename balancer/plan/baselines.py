"""The two capacity baselines gputide is measured against, run in the same simulator with the same bookkeeping.

* **static** -- what most clusters do: every inference service permanently holds the GPUs its own peak needs
  (``ServiceCapacity.home_replicas``: the peak demand plus the same headroom gputide uses), training gets whatever
  is left. Nothing moves with the tide, so the night's idle inference GPUs stay idle.
* **reactive** -- a Kubernetes HorizontalPodAutoscaler on current utilisation, without a forecast.
  Utilisation is offered load over the replicas' SLO-safe capacity; the desired count is
  ``ceil(replicas * utilisation / target)`` (= ``ceil(demand / (capacity * target))``), skipped inside the HPA's
  10% tolerance. Scale-ups act at once; scale-downs go through the HPA's *downscale stabilisation window*
  (5 minutes by default): the count applied is the highest recommendation of the window, so a service shrinks
  only after 5 minutes of lower demand. The GPUs it frees are loaned to training at once and reclaimed (by the
  same least-cost preemption as gputide) when it grows again -- but only after the utilisation has already
  risen, so new replicas are still warming up when the demand arrives.

Both return a `CapacityDecision` built with `balancer.plan.capacity_plan.apply_targets`, so the three policies differ
only in how they set replica targets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from balancer.model import ScaleInference
from balancer.plan.capacity import CapacityDecision, CapacityPolicy, CapacityState, CapacityView
from balancer.plan.capacity_plan import apply_targets, capacity_split

DEFAULT_POLICY = CapacityPolicy()


def plan_static(view: CapacityView, policy: CapacityPolicy = DEFAULT_POLICY) -> CapacityDecision:
    """Hold every service at its peak allotment; hand the rest of the fleet to training."""
    new, reasons = {}, {}
    for s in view.services:
        p = s.profile
        new[p.name] = min(max(p.home_replicas, p.min_replicas), p.max_replicas)
        reasons[p.name] = f"static: hold the {new[p.name]} replicas the service's own peak needs"
    actions, notes = apply_targets(view, new, policy, reasons, {})
    targets = {s.profile.name: new[s.profile.name] * s.profile.gpus_per_replica for s in view.services}
    return CapacityDecision(
        actions=tuple(actions),
        split=capacity_split(view, targets),
        targets=MappingProxyType(targets),
        state=CapacityState(),
        notes=tuple(notes),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactivePolicy:
    target_utilisation: float = 1 / 1.15  # the same headroom gputide keeps above its forecast
    tolerance: float = 0.1  # HPA --horizontal-pod-autoscaler-tolerance
    stabilisation_s: float = 300.0  # HPA behavior.scaleDown.stabilizationWindowSeconds default


@dataclass(frozen=True, slots=True)
class ReactiveState:
    """Per service: the (time, recommendation) pairs inside the downscale stabilisation window."""

    history: Mapping[str, tuple[tuple[float, int], ...]] = field(default_factory=lambda: MappingProxyType({}))


def hpa_recommendation(
    demand_rps: float, replicas: int, rps_per_replica: float, policy: ReactivePolicy
) -> int:
    """The HPA's raw desired replica count for the current utilisation (tolerance applied)."""
    if replicas <= 0:
        return math.ceil(demand_rps / (rps_per_replica * policy.target_utilisation)) if demand_rps > 0 else 0
    ratio = demand_rps / (replicas * rps_per_replica) / policy.target_utilisation
    if abs(ratio - 1.0) <= policy.tolerance:
        return replicas
    return math.ceil(replicas * ratio - 1e-9)


def plan_reactive(
    view: CapacityView,
    policy: ReactivePolicy,
    state: ReactiveState,
    capacity_policy: CapacityPolicy = DEFAULT_POLICY,
) -> tuple[CapacityDecision, ReactiveState]:
    """One HPA sync per service, then the GPU moves it implies (shrink training to grow, loan what it frees)."""
    new, reasons, gains = {}, {}, {}
    history = dict(state.history)
    for s in view.services:
        p = s.profile
        raw = hpa_recommendation(s.demand_rps, s.replicas, p.rps_per_replica, policy)
        raw = min(max(raw, p.min_replicas), p.max_replicas)
        window = tuple((t, r) for t, r in history.get(p.name, ()) if view.time - t < policy.stabilisation_s)
        window += ((view.time, raw),)
        history[p.name] = window
        stabilised = max(r for _, r in window)
        desired = raw if raw >= s.replicas else min(s.replicas, stabilised)
        new[p.name] = desired
        util = s.demand_rps / max(s.replicas * p.rps_per_replica, 1e-9)
        reasons[p.name] = f"reactive: utilisation {util:.2f} vs target {policy.target_utilisation:.2f}"
        gains[p.name] = max(0.0, s.demand_rps - s.replicas * p.rps_per_replica)
    actions, notes = apply_targets(view, new, capacity_policy, reasons, gains)
    targets = {s.profile.name: new[s.profile.name] * s.profile.gpus_per_replica for s in view.services}
    decision = CapacityDecision(
        actions=tuple(actions),
        split=capacity_split(view, targets),
        targets=MappingProxyType(targets),
        state=CapacityState(),
        notes=tuple(notes),
    )
    return decision, ReactiveState(MappingProxyType(history))


def scaled_services(decision: CapacityDecision) -> dict[str, int]:
    """Service -> new replica count, for the actions of a decision (handy in tests and summaries)."""
    return {a.service: a.replicas for a in decision.actions if isinstance(a, ScaleInference)}
