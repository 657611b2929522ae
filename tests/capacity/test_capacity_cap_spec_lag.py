"""`_capped` takes spec.replicas only with the most they may lag (review of capacity_loop). A default lag of 0 read a
spec.replicas sampled before the cap was met as a raise of the HPA's maxReplicas (`CapBelief.raised_by`), ending a
belief just learned: a caller that forgot the lag asked again in vain and counted the cap met afresh, silently. The
one caller, `plan_with_capacity`, passes `safety.maxTelemetryAgeS`; a caller with specs and no lag now fails at
once, and one without specs (no spec.replicas read) needs none."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from balancer.plan.capacity import CapacityView, ServiceCapacity, ServiceView
from balancer.plan.capacity_loop import _capped
from balancer.plan.planner import CapBelief

CHAT = ServiceCapacity(name="chat", rps_per_replica=10.0, max_replicas=8)
BELIEF = {"chat": CapBelief(2, 1000.0)}   # capped at 2, met at t=1000


def view(replicas: int = 2) -> CapacityView:
    chat = ServiceView(profile=CHAT, demand_rps=30.0, replicas=replicas)
    return CapacityView(time=1060.0, free=MappingProxyType({}), services=(chat,), jobs=(), inference_gpus=replicas,
                        training_gpus=0, total_gpus=8)


def test_spec_replicas_without_their_lag_are_refused():
    # spec.replicas 3 read at 1060, a minute after the cap was met: with a lag of 0 (the old default) that read as a
    # raise and the belief ended; the real lag (maxTelemetryAgeS, 120 s) puts the sample maybe before the cap
    with pytest.raises(TypeError, match="spec_lag_s"):
        _capped(view(), BELIEF, 300.0, 7200.0, specs={"chat": 3})
    with pytest.raises(TypeError, match="spec_lag_s"):
        _capped(view(), BELIEF, 300.0, 7200.0, specs={})
    _, kept, _ = _capped(view(), BELIEF, 300.0, 7200.0, specs={"chat": 3}, spec_lag_s=120.0)
    assert kept == BELIEF
    _, kept, _ = _capped(view(), BELIEF, 300.0, 7200.0, specs={"chat": 3}, spec_lag_s=0.0)   # chosen, not forgotten
    assert kept == {}
    # no spec.replicas read: no lag to give
    _, kept, _ = _capped(view(), BELIEF, 300.0, 7200.0)
    assert kept == BELIEF
