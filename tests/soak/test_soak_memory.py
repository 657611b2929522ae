"""The soak's memory check measures the process fairly: RSS is read once garbage is collected and freed memory given
back (`settled_rss_mib`), and the in-test Kubernetes API drops what an API server would (`KubeMirror.settle`: its
watch history and old Events), so neither reads as the controller's growth."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from balancer.app.soak import load_fake_kube
from balancer.app.soak_checks import MemoryTrend, rss_mib, settled_rss_mib
from balancer.app.soak_harness import KubeMirror
from balancer.fleet import scaled_fleet
from balancer.sim import SimCluster


class _Cycle:
    """Garbage only the cycle collector frees: a reference cycle holding a large buffer."""

    def __init__(self, mib: int) -> None:
        self.me, self.buffer = self, bytearray(mib * 1048576)


def test_settled_rss_does_not_count_garbage_the_collector_has_not_reached_yet():
    gc.disable()
    try:
        _Cycle(64)   # unreachable at once, but alive until a collection
        raw = rss_mib()
        settled = settled_rss_mib()
    finally:
        gc.enable()
    assert raw - settled > 48


def test_the_memory_trend_samples_settled_rss():
    trend = MemoryTrend()
    gc.disable()
    try:
        _Cycle(64)
        raw = rss_mib()
        trend.sample(0.0)
    finally:
        gc.enable()
    assert raw - trend.samples[0][1] > 48


@pytest.fixture
def mirror():
    fake = load_fake_kube()
    if fake is None:
        pytest.skip("the in-test Kubernetes API (tests/k8s/fakeapi.py) is not in this checkout")
    kube = fake()
    sim = SimCluster(scaled_fleet(16, name="t"), seed=1, step_s=60.0, start_time=1_000_000.0)
    yield KubeMirror(kube, None, sim)
    kube.close()


def event(k: int) -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"node-{k}.{k:x}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": f"node-{k}"}, "reason": "GputideTainted", "message": "hot"}


def test_settle_keeps_the_newest_events_and_a_bounded_watch_history(mirror):
    kube = mirror.kube
    for cycle in range(30):   # a month of cycles in miniature: Events posted and objects changed every cycle
        for k in range(10):
            kube.add(event(cycle * 10 + k))
        mirror.settle(events_kept=25, history_kept=40)
        assert len(kube._history) <= 40
    events = sorted(name for plural, _, name in kube.objects if plural == "events")
    assert len(events) == 25
    assert set(events) == {event(k)["metadata"]["name"] for k in range(275, 300)}   # the newest
    assert sum(plural == "nodes" for plural, _, _ in kube.objects) == 4   # nothing else dropped
    assert kube._expired_below == kube._history[0].rv - 1   # a watch from before what is kept is told 410


def _trend(rss: list[float], days: float = 1.0) -> MemoryTrend:
    trend = MemoryTrend(max_mib_per_day=8.0)
    trend.samples = [(days * k / (len(rss) - 1), mib) for k, mib in enumerate(rss)]
    return trend


def test_a_one_off_step_late_in_a_short_run_is_not_read_as_a_leak():
    rss = [650.0] * 72 + [660.0] * 8   # 10 MiB taken once, in the last tenth (least squares: 9.1 MiB/day)
    trend = _trend(rss)
    slope = trend.finish(cycle=80)
    assert slope < 1.0
    assert trend.check.held


def test_a_steady_leak_is_still_caught():
    rss = [650.0 + 10.0 * k / 79 + (0.7 if k % 3 == 0 else -0.4) for k in range(80)]   # 10 MiB/day plus noise
    trend = _trend(rss)
    slope = trend.finish(cycle=80)
    assert 9.0 < slope < 11.0
    assert len(trend.check.breaches) == 1


def test_a_leak_that_begins_late_in_a_long_run_is_caught_by_the_last_day():
    """7 days, flat until day 5.5, then 40 MiB/day: the whole run's median slope reads about 2 MiB/day (review r2);
    the last day fitted alone reads the leak."""
    days = np.linspace(0.0, 7.0, 500)
    rss = list(650.0 + 40.0 * np.clip(days - 5.5, 0.0, None) + np.where(np.arange(500) % 3 == 0, 0.7, -0.4))
    trend = _trend(rss, days=7.0)
    slope = trend.finish(cycle=500)
    assert slope < 8.0   # the whole run alone would have passed it
    assert [m for _, m in trend.check.breaches] == [trend.check.breaches[0][1]]
    assert "over the last day" in trend.check.breaches[0][1]


def test_a_flat_long_run_holds():
    trend = _trend(list(650.0 + np.where(np.arange(500) % 3 == 0, 0.7, -0.4)), days=7.0)
    trend.finish(cycle=500)
    assert trend.check.held and "last day +0.00" in trend.check.detail


JITTER_MIB = 0.25   # settled RSS between cycles: a few hundred KiB either way


def _soak(days: float, growth, *, seed: int, samples: int | None = None) -> MemoryTrend:
    """A soak's samples, one per 20-minute cycle (plus the 4 quiet ones at the end) unless told: 650 MiB, the growth
    given (a function of simulated days) and seeded Gaussian jitter, injected rather than read from this process."""
    n = samples or round(days * 72) + 4
    t = np.linspace(0.0, days, n)
    rss = 650.0 + growth(t) + np.random.default_rng(seed).normal(0.0, JITTER_MIB, n)
    trend = MemoryTrend(max_mib_per_day=8.0)
    trend.samples = list(zip(t.tolist(), rss.tolist(), strict=True))
    return trend


def _onset(days: float, fraction_of_window: float) -> float:
    """The simulated day a fraction of the way into what `MemoryTrend` judges (after its 25% warm-up)."""
    return days * (0.25 + 0.75 * fraction_of_window)


def test_a_steady_leak_in_jitter_breaches():
    trend = _soak(1.0, lambda t: 10.0 * t, seed=11)
    slope = trend.finish(cycle=76)
    assert 9.0 < slope < 11.0
    assert [m for _, m in trend.check.breaches] == [f"RSS grows {slope:.2f} MiB per simulated day after warm-up"]


@pytest.mark.parametrize(("days", "mib_per_day"), [(7.0, 10.0), (1.0, 16.0)])
def test_a_leak_that_begins_40_percent_into_the_window_breaches_over_the_whole_window(days, mib_per_day):
    """It spans 60% of the window: more than half of the short-lag pairs, so their median reads it. A short run's
    jitter dilutes the reading more (pairs of 1-day soak samples are at most 2.3 h apart), hence its steeper leak."""
    start = _onset(days, 0.4)
    trend = _soak(days, lambda t: mib_per_day * np.clip(t - start, 0.0, None), seed=12)
    slope = trend.finish(cycle=500)
    assert 8.0 < slope <= mib_per_day
    assert any(m.endswith("after warm-up") for _, m in trend.check.breaches)


def test_a_one_off_step_mid_run_is_not_read_as_a_leak():
    """6 MiB taken once at 60% of a 1-day soak (an arena, a cache filled once): the whole window's Theil-Sen slope
    read 9-10 MiB/day; the step lifts only the few short-lag pairs that straddle it."""
    trend = _soak(1.0, lambda t: np.where(t >= 0.6, 6.0, 0.0), seed=13)
    slope = trend.finish(cycle=76)
    assert slope < 3.0
    assert trend.check.held


def test_a_step_within_the_last_day_of_a_long_run_is_not_read_as_a_leak():
    """8 MiB taken once at day 6.5 of 7: the last day fitted alone by Theil-Sen read about 9.5 MiB/day."""
    trend = _soak(7.0, lambda t: np.where(t >= 6.5, 8.0, 0.0), seed=14)
    trend.finish(cycle=508)
    assert trend.check.held, trend.check.breaches
    assert "last day" in trend.check.detail   # the last day was judged alone, and held


@pytest.mark.parametrize("days", [1.0, 7.0])
def test_a_flat_run_in_jitter_holds(days):
    trend = _soak(days, lambda t: 0.0 * t, seed=15)
    slope = trend.finish(cycle=508)
    assert abs(slope) < 2.0
    assert trend.check.held


def test_a_leak_from_day_5_of_7_breaches_over_the_last_day():
    """10 MiB/day from day 5: 38% of the window after warm-up, too little for its median, all of the last day."""
    trend = _soak(7.0, lambda t: 10.0 * np.clip(t - 5.0, 0.0, None), seed=16)
    slope = trend.finish(cycle=508)
    assert slope < 8.0
    assert len(trend.check.breaches) == 1 and trend.check.breaches[0][1].endswith("over the last day")
