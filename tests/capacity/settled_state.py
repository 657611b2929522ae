"""A capacity state that has watched every service of a view long enough: last changed long ago, demand read
flat. A fresh `CapacityState()` is a new process's (or a new leader's): it holds loans and sheds until the minimum
hold has passed from its first sighting and two demand readings give a slope; a test about what a settled
planner does starts from this instead."""

from __future__ import annotations

from types import MappingProxyType

from balancer.plan.capacity import CapacityState, CapacityView


def settled(view: CapacityView, *, ago_s: float = 1e6) -> CapacityState:
    names = [s.profile.name for s in view.services]
    return CapacityState(last_change=MappingProxyType({n: view.time - ago_s for n in names}),
                         last_demand=MappingProxyType({s.profile.name: (view.time, s.demand_rps, 0.0)
                                                       for s in view.services}))
