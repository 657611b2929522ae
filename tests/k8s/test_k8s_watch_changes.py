"""`ListWatch`'s change handlers (balancer/actuate/k8s_watch.py, module docstring), as client-go's
ResourceEventHandler: `handler(event_type, old, new)` with the cached items, for each change of the cache a watch
event makes and for each key a list after a broken watch adds, changes or removes; never for the first list, nor
for an event or a list that changes no item. Against the fake API server, through the official client."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from fakeapi import FakeKube, node
from kubernetes import client as k8s
from test_k8s_watch import eventually

from balancer.actuate.k8s_watch import ListWatch


def item(obj: dict) -> dict | None:
    """The cached item of a node: its name and pool; a node labelled `hidden` is no item."""
    labels = obj["metadata"].get("labels") or {}
    return None if "hidden" in labels else {"name": obj["metadata"]["name"], "pool": labels.get("pool", "")}


def it(name: str, pool: str = "") -> dict:
    return {"name": name, "pool": pool}


class Heard:
    """A change handler that records what it is told (from the watch's thread)."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, dict | None, dict | None]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, old: dict | None, new: dict | None) -> None:
        with self._lock:
            self.changes.append((kind, old, new))

    def after(self, n: int) -> list[tuple[str, dict | None, dict | None]]:
        with self._lock:
            return self.changes[n:]


@pytest.fixture
def nodes_watch(kube: FakeKube, api):
    """A `ListWatch` of the nodes (items: `item`), 1 s watches, a 20 ms backoff; stopped after the test."""
    core = k8s.CoreV1Api(api)
    lw = ListWatch("nodes", lambda **kw: core.list_node(_preload_content=False, **kw).json(), core.list_node, item,
                   watch_s=1.0, backoff_s=0.02, max_backoff_s=0.02)
    yield lw
    lw.stop()


def synced(lw: ListWatch, heard: Heard | None = None) -> Heard:
    heard = heard or Heard()
    lw.on_change(heard).start()
    eventually(lambda: lw.synced)
    return heard


def told(heard: Heard, n: int, expected: list) -> None:
    """The changes told after the first `n` come to `expected`, and no other follows at once."""
    eventually(lambda: len(heard.after(n)) >= len(expected))
    time.sleep(0.1)
    assert heard.after(n) == expected


def test_watch_events_are_told_as_the_changes_of_the_cache(kube: FakeKube, nodes_watch: ListWatch):
    kube.add(node("a", labels={"pool": "x"}))
    heard = synced(nodes_watch)
    assert heard.changes == []                                   # the first list is told to no one
    kube.add(node("b"))
    told(heard, 0, [("ADDED", None, it("b"))])
    kube.mutate("nodes", "a", "", {"metadata": {"annotations": {"ttl": "0"}}})   # the item does not read it
    kube.mutate("nodes", "a", "", {"metadata": {"labels": {"pool": "y"}}})
    told(heard, 1, [("MODIFIED", it("a", "x"), it("a", "y"))])   # the annotation alone: nothing
    kube.mutate("nodes", "b", "", {"metadata": {"labels": {"hidden": "1"}}})   # a MODIFIED event convert drops
    told(heard, 2, [("DELETED", it("b"), None)])
    kube.mutate("nodes", "b", "", {"metadata": {"labels": {"hidden": None, "pool": "z"}}})   # and keeps again
    told(heard, 3, [("ADDED", None, it("b", "z"))])
    kube.delete("nodes", "b")
    told(heard, 4, [("DELETED", it("b", "z"), None)])
    assert nodes_watch.snapshot()[1] == {"default/a": it("a", "y")} and nodes_watch.lists == 1


def test_a_list_after_410_tells_what_it_added_changed_and_removed_and_nothing_else(
        kube: FakeKube, nodes_watch: ListWatch):
    for name in "abcd":
        kube.add(node(name))
    heard = synced(nodes_watch)

    def meanwhile() -> None:   # while no watch is open, then the history is compacted: 410 Gone, list again
        kube.add(node("e", labels={"pool": "new"}))
        kube.mutate("nodes", "b", "", {"metadata": {"labels": {"pool": "p"}}})
        kube.delete("nodes", "c")
        kube.mutate("nodes", "d", "", {"metadata": {"annotations": {"ttl": "0"}}})   # no change of its item
        kube.compact()

    kube.before("GET", r"/nodes\?.*watch=true", meanwhile)
    eventually(lambda: nodes_watch.lists == 2)
    # the list's keys in its order (by name), then the keys it no longer has
    told(heard, 0, [("MODIFIED", it("b"), it("b", "p")), ("ADDED", None, it("e", "new")), ("DELETED", it("c"), None)])


def test_a_delete_missed_while_the_watch_failed_is_told_by_the_next_list(kube: FakeKube, nodes_watch: ListWatch):
    kube.add(node("a"))
    kube.add(node("b"))
    heard = synced(nodes_watch)
    kube.inject("GET", r"/nodes\?.*watch=true", 500, count=1)
    kube.before("GET", r"/nodes\?.*watch=true", lambda: kube.delete("nodes", "a"))
    eventually(lambda: nodes_watch.lists == 2)
    told(heard, 0, [("DELETED", it("a"), None)])


def test_a_refused_watch_listing_per_backoff_tells_only_what_changed(kube: FakeKube, nodes_watch: ListWatch):
    """A watch that keeps failing lists once per backoff: each list is compared with the cache, so the lists that
    find nothing new tell nothing, and a node added between two of them is told once."""
    kube.add(node("a"))
    kube.inject("GET", r"/nodes\?.*watch=true", 403, count=10_000)   # RBAC granting list, not watch
    heard = synced(nodes_watch)
    eventually(lambda: nodes_watch.lists >= 5)
    assert heard.changes == []
    kube.add(node("b"))
    eventually(lambda: heard.after(0) == [("ADDED", None, it("b"))])
    lists = nodes_watch.lists
    eventually(lambda: nodes_watch.lists >= lists + 5)
    assert heard.changes == [("ADDED", None, it("b"))]


def test_handlers_run_in_order_after_the_change_is_cached_and_before_notify_and_one_that_raises_stops_nothing(
        kube: FakeKube, api, caplog):
    core = k8s.CoreV1Api(api)
    notify, calls = threading.Event(), []

    def first(kind: str, old, new) -> None:
        calls.append(("first", kind, nodes_watch.snapshot()[1].get("default/b"), notify.is_set()))
        raise RuntimeError("a handler's bug")

    def second(kind: str, old, new) -> None:
        calls.append(("second", kind, new, notify.is_set()))

    nodes_watch = ListWatch("nodes", lambda **kw: core.list_node(_preload_content=False, **kw).json(),
                            core.list_node, item, watch_s=1.0, notify=notify, on_change=first)
    assert nodes_watch.on_change(second) is nodes_watch
    kube.add(node("a"))
    try:
        nodes_watch.start()
        eventually(lambda: nodes_watch.synced)
        notify.clear()
        with caplog.at_level(logging.ERROR, logger="balancer.actuate.k8s_watch"):
            kube.add(node("b"))
            eventually(lambda: notify.is_set())
        assert calls == [("first", "ADDED", it("b"), False), ("second", "ADDED", it("b"), False)]
        assert "a change handler failed on ADDED" in caplog.text
        kube.add(node("c"))                                  # the watch goes on: no failure, no list again
        eventually(lambda: len(calls) == 4)
        assert (nodes_watch.lists, nodes_watch.failures) == (1, 0)
    finally:
        nodes_watch.stop()
