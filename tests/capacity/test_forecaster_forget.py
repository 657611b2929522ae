"""The loop's forecaster forgets a service no snapshot has shown for a day: its history, model and last forecast
were kept for ever, so a controller running for months held every service it ever saw (deleted, renamed)."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster

DAY = 86400.0


def snap(t: float, *names: str):
    """What ServiceForecaster reads of a snapshot: its time, each service's demand, those unknown and pods (none)."""
    return SimpleNamespace(time=t, services={n: SimpleNamespace(demand_rps=10.0) for n in names}, demand_unknown={},
                           workloads_by_owner={}, placements={})


def feed(fc: ServiceForecaster, start: float, end: float, *names: str) -> None:
    for t in range(int(start), int(end), 600):
        fc(snap(float(t), *names))


def test_a_service_gone_for_a_day_is_forgotten_and_one_still_seen_is_kept():
    online = DemandForecaster(model="persistence", step_s=600.0, min_history=2)
    fc = ServiceForecaster(online, 3600.0)
    feed(fc, 0, 6 * 3600, "chat", "old")
    assert set(online.services()) == {"chat", "old"} and "old" in fc.last
    feed(fc, 6 * 3600, 6 * 3600 + DAY - 600, "chat")          # "old" unseen for just under a day: kept
    assert "old" in online.services()
    feed(fc, 6 * 3600 + DAY - 600, 6 * 3600 + DAY + 1200, "chat")
    assert online.services() == ["chat"]
    assert "old" not in fc.last and "old" not in fc.seeded and "old" not in fc.seen
    assert "chat" in fc.last


def test_a_forgotten_service_that_comes_back_is_seeded_again_from_its_history():
    asked = []

    def history(name, now):
        asked.append(name)
        idx = pd.to_datetime([now - 1800, now - 1200, now - 600], unit="s", utc=True)
        return pd.Series([5.0, 6.0, 7.0], index=idx)

    online = DemandForecaster(model="persistence", step_s=600.0, min_history=2)
    fc = ServiceForecaster(online, 3600.0, history=history)
    feed(fc, 0, 3600, "chat", "old")
    feed(fc, 3600, 3600 + DAY + 1200, "chat")
    assert asked == ["chat", "old"]
    out = fc(snap(3600 + DAY + 1800, "chat", "old"))
    assert asked == ["chat", "old", "old"] and "old" in out
