"""`ListWatch.seen`, the version a relist must not go back behind (k8s_watch's module docstring: never older), is
kept when a list's answer carries no `metadata.resourceVersion`: it used to become "0", and the next relist asked
for "not older than 0", any state (audit a1 of 925226c). Real API servers set it; a proxy or an aggregated API may
not."""

from __future__ import annotations

from fakeapi import pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_watch import ListCache, ListWatch
from balancer.actuate.kubernetes import _Api


def test_a_list_without_a_resource_version_keeps_what_the_cache_had_seen() -> None:
    calls: list[dict] = []

    def list_call(**kwargs) -> dict:
        calls.append(kwargs)
        return {"items": []} if len(calls) == 1 else {"metadata": {"resourceVersion": "9"}, "items": []}

    lw = ListWatch("pods", list_call, None, lambda o: o)
    lw.seen = "7"   # what the cache had shown
    assert lw._relist() == "7" and lw.seen == "7"
    assert lw._relist() == "9" and lw.seen == "9"
    assert [c.get("resource_version") for c in calls] == ["7", "7"]
    assert all(c.get("resource_version_match") == "NotOlderThan" for c in calls)


def test_a_first_list_without_one_watches_from_any_version() -> None:
    lw = ListWatch("pods", lambda **kwargs: {"items": []}, None, lambda o: o)
    assert lw._relist() == "0" and lw.seen is None   # the next list is a first one again: at "0"


def test_a_list_cache_without_a_watch_never_lists_back_in_time() -> None:
    """`ListCache`'s own lists (`gputide run --once`, or before its watch syncs) each ask for a state not older than
    the one before. They all used to list at "0": an API server whose watch cache lags serves that from any older
    state, and a pod the controller had seen (or seen gone) came back as it was."""
    calls: list[dict] = []
    now = {"pods": ["default/b"], "rv": "5"}   # etcd: b, written at version 5
    behind = {"pods": [], "rv": "3"}           # a lagging watch cache, still before b

    def list_call(**kwargs) -> dict:
        calls.append(kwargs)
        at = behind if kwargs.get("resource_version") == "0" else now
        return {"metadata": {"resourceVersion": at["rv"]},
                "items": [{"metadata": {"namespace": "default", "name": p.split("/")[1]}} for p in at["pods"]]}

    cache = ListCache("pods", list_call, None, lambda o: o["metadata"]["name"], ttl_s=0.0)
    behind.update(now)   # the first list, at "0", happens to be current
    assert cache.current() == {"default/b": "b"} and cache.seen == "5"
    behind.update(pods=[], rv="3")   # the next request lands on the lagging API server
    assert cache.current() == {"default/b": "b"}
    assert calls[-1] == {"resource_version": "5", "resource_version_match": "NotOlderThan"}


def test_a_list_cache_turning_to_its_watch_never_goes_back_behind_its_own_lists(kube) -> None:
    """The watch's first list (at "0") comes after the cache's own lists showed newer: it is asked not older than
    those (`ListWatch.not_older_than`). It used to go back behind them the moment the watch synced (audit a4)."""
    api = _Api(kube.client(), 1, 0.0, lambda _s: None, 10.0)
    core = api.core
    cache = ListCache("pods", lambda **kw: api("list pods", core.list_pod_for_all_namespaces, **kw),
                      core.list_pod_for_all_namespaces, lambda o: o["metadata"]["name"], ttl_s=0.0, watch=True,
                      watch_s=1.0)
    start = cache.watch.start
    cache.watch.start = lambda: cache.watch   # its first list has not answered yet
    try:
        kube.add(pod("a", gpus=1))
        assert cache.current() == {"default/a": "a"}
        behind = kube.cache_state()
        kube.add(pod("b", gpus=1))
        assert cache.current() == {"default/a": "a", "default/b": "b"}   # its own list, not older than the first
        kube.hold_cache(behind)   # the watch's first list reaches an API server still before b
        kube.inject("GET", r"/pods\?.*watch=true", 500, count=10_000)   # and no event brings b back after it
        cache.watch.start = start
        cache.watch.start()
        eventually(lambda: cache.watch.synced)
        assert cache.current() == {"default/a": "a", "default/b": "b"}
    finally:
        cache.close()


def test_a_reader_listing_faster_than_the_watch_delays_its_first_list_once_only() -> None:
    """Every list of the watch overtaken by a reader's newer one (`ttl_s=0`, a busy cluster): it lists again once
    for the newest, then keeps its answer, and syncs. Asked again each time, it would never sync."""
    calls: list[dict] = []
    lw: ListWatch

    def list_call(**kwargs) -> dict:
        calls.append(kwargs)
        lw.not_older_than(str(10 + len(calls)))   # meanwhile the reader's own list answered, newer
        return {"metadata": {"resourceVersion": str(len(calls))}, "items": []}

    lw = ListWatch("pods", list_call, None, lambda o: o)
    lw._relist()
    assert lw.synced and len(calls) == 2 and calls[1]["resource_version"] == "11"
