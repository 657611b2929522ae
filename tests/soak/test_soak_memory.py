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
