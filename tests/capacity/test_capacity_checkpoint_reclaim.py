"""Reclaims land on checkpoints: a job that loses its work since its checkpoint on a resize (no checkpoint on
SIGTERM) is shrunk right after a checkpoint when the forecast needs its GPUs before the next one."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from balancer.plan.capacity_plan import checkpoint_periods, checkpoint_reclaim_s, plan_capacity
from tests.capacity.settled_state import settled
from tests.capacity.test_capacity_planner import POLICY, forecast, inference_target, job, training_sizes, view

PERIOD = 1800.0
# the p99 rises to 90 req/s 20 minutes from now: beyond the reclaim lead (warm-up 5 min + margin 10 min), within
# the 30-minute checkpoint period that starts now
RISE = forecast([30, 30, 90, 90, 90, 90])


def _with_periods(v, **periods):
    """A settled state that has seen each named job's last checkpoint at -since and a period before it."""
    base = settled(v)
    known = {j.name: (v.time - j.since_checkpoint_s, periods[j.name]) for j in v.jobs if j.name in periods}
    return replace(base, checkpoints=MappingProxyType(known))


def test_periods_are_learned_from_the_time_since_checkpoint_each_cycle():
    seen = checkpoint_periods(view(3, 30.0, jobs=[job("a", 10, since=100.0)], now=0.0), {})
    assert seen == {"a": (-100.0, 0.0)}  # one checkpoint seen: no period yet
    # the same checkpoint read a cycle later, with a few seconds of jitter: not a new one
    seen = checkpoint_periods(view(3, 30.0, jobs=[job("a", 10, since=145.0)], now=60.0), seen)
    assert seen == {"a": (-100.0, 0.0)}
    seen = checkpoint_periods(view(3, 30.0, jobs=[job("a", 10, since=20.0)], now=1720.0), seen)
    assert seen == {"a": (1700.0, 1800.0)}
    # a job that loses nothing on a resize (0 s since its checkpoint: it saves on SIGTERM) is not tracked
    assert checkpoint_periods(view(3, 30.0, jobs=[job("b", 10, since=0.0)], now=0.0), {}) == {}


def test_a_job_just_past_its_checkpoint_gives_now_what_the_forecast_needs_before_its_next():
    v = view(3, 30.0, jobs=[job("train-a", 10, since=60.0)])
    d = plan_capacity(v, {"chat": RISE}, POLICY, _with_periods(v, **{"train-a": PERIOD}))
    assert inference_target(d, 3) == 9
    assert training_sizes(d) == {"train-a": 4}
    assert "just checkpointed" in next(a.reason for a in d.actions if a.kind == "scale_inference")
    assert checkpoint_reclaim_s(v, None, {"train-a": (-60.0, PERIOD)}) == PERIOD - 60.0


def test_mid_period_or_without_a_learned_period_the_reclaim_waits_for_the_lead():
    mid = view(3, 30.0, jobs=[job("train-a", 10, since=900.0)])  # half-way: the rollback is already half a period
    assert plan_capacity(mid, {"chat": RISE}, POLICY, _with_periods(mid, **{"train-a": PERIOD})).actions == ()
    fresh = view(3, 30.0, jobs=[job("train-a", 10, since=60.0)])  # one checkpoint seen: its period is unknown
    assert plan_capacity(fresh, {"chat": RISE}, POLICY, settled(fresh)).actions == ()


def test_only_the_job_a_reclaim_would_shrink_first_counts():
    # the low-priority job is shrunk first and is mid-period: the high-priority job's fresh checkpoint buys nothing
    jobs = [job("low", 10, prio=0, since=900.0), job("high", 10, prio=5, since=60.0)]
    v = view(3, 30.0, jobs=jobs)
    assert plan_capacity(v, {"chat": RISE}, POLICY, _with_periods(v, low=PERIOD, high=PERIOD)).actions == ()
    # the low-priority job just checkpointed: it gives the GPUs now, the high-priority job keeps its own
    jobs = [job("low", 10, prio=0, since=60.0), job("high", 10, prio=5, since=900.0)]
    v = view(3, 30.0, jobs=jobs)
    d = plan_capacity(v, {"chat": RISE}, POLICY, _with_periods(v, low=PERIOD, high=PERIOD))
    assert training_sizes(d) == {"low": 4}


def test_a_checkpoint_read_the_instant_it_is_taken_is_remembered_and_its_period_learned():
    # a trainer that checkpoints on the controller's cycle reads 0 s since its checkpoint on that cycle: the job is
    # still the one tracked (before, it was dropped there and every period was forgotten before it was learned)
    seen: dict = {}
    for now in range(0, 4000, 60):
        seen = checkpoint_periods(view(3, 30.0, jobs=[job("a", 10, since=float(now % 1800))], now=float(now)), seen)
    assert seen == {"a": (3600.0, 1800.0)}
