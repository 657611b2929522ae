"""A service whose pods still run with no serving series at all (every scrape of it lost; the capacity planner holds
for it when profiled) is a gap, not a service gone: the forecaster keeps its history and model, as for a NaN demand.
Before, only `demand_unknown` kept a service seen, and one without series for a day was forgotten while it ran."""

from __future__ import annotations

from types import SimpleNamespace

from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster

DAY = 86400.0
POD = SimpleNamespace(name="inference/chat-0")


def snap(t: float, gap: str | None):
    """chat with demand, or in its gap: NaN (`demand_unknown`), no series with its pod placed, or gone altogether."""
    running = gap != "gone"
    return SimpleNamespace(time=t, services={} if gap else {"chat": SimpleNamespace(demand_rps=10.0)},
                           demand_unknown={"chat": "stalled"} if gap == "nan" else {},
                           workloads_by_owner={"chat": (POD,)} if running else {},
                           placements={POD.name: (0,)} if running else {})


def after_a_day(gap: str) -> list[str]:
    online = DemandForecaster(model="persistence", step_s=600.0, min_history=2)
    fc = ServiceForecaster(online, 3600.0)
    for t in range(0, 6 * 3600, 600):
        fc(snap(float(t), None))
    for t in range(6 * 3600, int(6 * 3600 + DAY + 1200), 600):
        fc(snap(float(t), gap))
    return online.services()


def test_a_running_service_without_series_for_a_day_is_kept_as_a_nan_one_and_a_gone_one_forgotten():
    assert after_a_day("nan") == ["chat"]
    assert after_a_day("no series") == ["chat"]
    assert after_a_day("gone") == []
