"""What the HPA reader (balancer/actuate/k8s_hpa_reads.py) counts as watched, and what it makes of objects it cannot
read (audit a9): a gap in its lists or a recreated HPA is watched anew, its times are monotonic, and an odd object
is unknown, never an exception that holds the controller's whole cycle."""

from __future__ import annotations

import logging
import time

from balancer.actuate.k8s_hpa_reads import KubernetesHpaWants
from balancer.actuate.k8s_time import rfc3339

WALL = 1_800_000_000.0


class Listed:
    """Stands in for the reader's API: each list answers the items `items` holds then."""

    list_horizontal_pod_autoscaler_for_all_namespaces = None

    def __init__(self, *items: object) -> None:
        self.items, self.autoscaling = list(items), self

    def __call__(self, _what: str, _fn: object) -> dict:
        return {"items": self.items}


class Clocks:
    """A monotonic clock and a wall clock, each moved on its own."""

    def __init__(self) -> None:
        self.mono, self.wall = 1000.0, WALL

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += seconds


def hpa(utilization: int, uid: str = "a", scaled: float = WALL - 86400.0, name: str = "chat") -> dict:
    """10 replicas whose CPU reads `utilization` of an 80% target (20: 3 asked for)."""
    metric = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                        "averageUtilization": 80}}}
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": name}, "minReplicas": 1, "maxReplicas": 20,
                     "metrics": [metric]},
            "status": {"currentReplicas": 10, "desiredReplicas": 10, "lastScaleTime": rfc3339(scaled),
                       "currentMetrics": [{"type": "Resource", "resource": {
                           "name": "cpu", "current": {"averageUtilization": utilization}}}]}}


def reader(listed: Listed, clocks: Clocks) -> KubernetesHpaWants:
    r = KubernetesHpaWants(None, ttl_s=5.0, clock=lambda: clocks.mono, wall=lambda: clocks.wall)
    r.api = listed
    return r


def watch(r: KubernetesHpaWants, clocks: Clocks, seconds: float) -> dict | None:
    """Call it once a ttl for `seconds`; its last answer."""
    answer = r()
    for _ in range(int(seconds // 5)):
        clocks.advance(5.0)
        answer = r()
    return answer


def test_a_reader_not_called_for_longer_than_its_window_watches_anew():
    """History was forgotten only when a call found the lists failing: a reader not called for 405 s counted its old
    history as a window watched whole, while the HPA asked for 13 in the gap, and a loan counted 3 of its 10."""
    clocks, listed = Clocks(), Listed(hpa(20))
    r = reader(listed, clocks)
    assert watch(r, clocks, 400)["ns/chat"][0] == 3
    clocks.advance(405.0)   # no call: what it asked for meanwhile is not seen
    n, why = r()["ns/chat"]
    assert n == 10 and "not yet watched whole" in why
    assert watch(r, clocks, 300)["ns/chat"][0] == 3   # watched a whole window since


def test_a_recreated_hpa_is_watched_anew():
    """History was kept by namespace/name: an HPA deleted and created again (a new uid) read as watched whole, while
    the controller starts its window anew at its replicas."""
    clocks, listed = Clocks(), Listed(hpa(20, uid="a"))
    r = reader(listed, clocks)
    assert watch(r, clocks, 400)["ns/chat"][0] == 3
    listed.items = [hpa(20, uid="b")]
    assert watch(r, clocks, 10)["ns/chat"][0] == 10
    assert watch(r, clocks, 300)["ns/chat"][0] == 3


def test_its_times_are_monotonic_and_only_last_scale_time_is_wall_clock():
    """A wall clock stepped back an hour stopped its lists (the last one 'in the future') and stretched its windows;
    its own times are now the monotonic clock's, and only status.lastScaleTime is compared with the wall clock."""
    assert KubernetesHpaWants(None).clock is time.monotonic
    clocks, listed = Clocks(), Listed(hpa(20))
    r = reader(listed, clocks)
    assert watch(r, clocks, 400)["ns/chat"][0] == 3
    clocks.wall -= 3600.0
    listed.items = [hpa(100)]   # 13 asked for now: seen, since it lists on
    assert watch(r, clocks, 10)["ns/chat"][0] == 13
    listed.items = [hpa(20, scaled=clocks.wall - 400.0)]
    assert watch(r, clocks, 100)["ns/chat"][0] == 10   # 13 asked within its window: its 10 kept
    assert watch(r, clocks, 300)["ns/chat"][0] == 3   # the window past, its last scale long ago by the wall clock
    listed.items = [hpa(20, scaled=clocks.wall - 60.0)]   # a minute ago by the wall clock: new pods perhaps unread
    n, why = watch(r, clocks, 5)["ns/chat"]
    assert n == 10 and "without readings" in why


def test_an_hpa_of_an_odd_shape_is_unknown_and_the_cycle_goes_on(caplog):
    """A field of the wrong type raised out of the reader, and the controller's whole cycle held fail-static: such an
    HPA reads as its replicas (the others as before); one whose target cannot be read (a list item not an object, a
    spec not one) makes the whole answer None (every service lends nothing: the one it scales is not known), logged
    once."""
    clocks = Clocks()
    odd = hpa(20, name="odd")
    odd["spec"]["minReplicas"] = None
    none_metric = hpa(20, name="metric")
    none_metric["spec"]["metrics"] = [None]
    listed = Listed(hpa(20), odd, none_metric)
    r = reader(listed, clocks)
    got = watch(r, clocks, 400)
    assert got["ns/chat"][0] == 3
    assert got["ns/odd"][0] == 10 and got["ns/odd"][1].startswith("unreadable")
    assert got["ns/metric"][0] == 10 and got["ns/metric"][1].startswith("unreadable")
    broken = hpa(20, name="broken")
    broken["spec"] = ["x"]
    for items in ([hpa(20), "junk"], [hpa(20), broken]):
        listed.items = items
        with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_hpa_reads"):
            caplog.clear()
            assert watch(r, clocks, 10) is None
        assert sum("unreadable" in rec.getMessage() for rec in caplog.records) == 1
        listed.items = [hpa(20)]
        assert watch(r, clocks, 5) is not None


def test_a_list_whose_items_are_not_a_list_is_odd_and_its_recovery_is_logged(caplog):
    """`{"items": 5}` raised TypeError out of the reader (the cycle held fail-static); an odd list stopped every loan
    with one warning and nothing said once it read again (audit a10)."""
    clocks = Clocks()

    class NotAList(Listed):
        def __call__(self, _what: str, _fn: object) -> dict:
            return {"items": self.items[0]}

    listed = NotAList(5)
    r = reader(listed, clocks)
    assert watch(r, clocks, 10) is None
    listed.items = [[hpa(20)]]
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_hpa_reads"):
        watch(r, clocks, 10)
    assert any("readable again" in rec.getMessage() for rec in caplog.records)


def test_each_hpa_s_recommendation_is_made_once_a_call(monkeypatch):
    """A call that listed made every HPA's recommendation twice (its history, then its answer): now once a call, a
    list's and another's, one that raises (an odd metric) included, and so is its answer."""
    import balancer.actuate.k8s_hpa_reads as reads
    import balancer.actuate.k8s_hpa_wants as wants

    made: list[str] = []
    real = wants.recommendation

    def counted(h: dict, now: float) -> tuple:
        made.append(h["metadata"]["name"])
        return real(h, now)

    monkeypatch.setattr(wants, "recommendation", counted)
    monkeypatch.setattr(reads, "recommendation", counted, raising=False)   # the old reader's own import
    clocks, odd = Clocks(), hpa(20, name="metric")
    odd["spec"]["metrics"] = [None]
    listed = Listed(hpa(20), odd)
    r = reader(listed, clocks)
    for step in (5.0, 2.0, 3.0, 5.0):   # calls that list, and one within the ttl that does not
        made.clear()
        clocks.advance(step)
        got = r()
        assert sorted(made) == ["chat", "metric"]
        assert got["ns/metric"][0] == 10 and got["ns/metric"][1].startswith("unreadable (AttributeError")
    listed.items = [hpa(20), "junk"]   # an odd list: no answer, the HPAs it holds remembered all the same
    made.clear()
    clocks.advance(5.0)
    assert r() is None and made == ["chat"]
