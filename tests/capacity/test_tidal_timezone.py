"""The tidal scenario's gputide forecaster reads days in the policy's `forecast.timezone`, like `gputide run`'s."""

from __future__ import annotations

from dataclasses import replace

from balancer import config
from balancer.app import scenarios, tidal
from balancer.audit import JsonlAudit


def _forecaster_timezone(tmp_path, timezone: str | None) -> str:
    sim, _events, _days = scenarios.build("tidal", days=1)
    policy = config.BalancerPolicy()
    if timezone is not None:
        policy = replace(policy, forecast=replace(policy.forecast, timezone=timezone))
    ctx = scenarios.PolicyContext(policy=policy, audit=JsonlAudit(tmp_path / "audit.jsonl"))
    seen = {}
    real = tidal.DemandForecaster

    def spy(*args, **kwargs):
        seen["tz"] = kwargs.get("timezone", "UTC")
        return real(*args, **kwargs)

    tidal.DemandForecaster = spy
    try:
        tidal.GputideTidal(sim, ctx)
    finally:
        tidal.DemandForecaster = real
    return seen["tz"]


def test_policy_timezone_reaches_the_forecaster(tmp_path):
    assert _forecaster_timezone(tmp_path, "America/New_York") == "America/New_York"


def test_default_is_utc(tmp_path):
    assert _forecaster_timezone(tmp_path, None) == "UTC"
