"""List once, then watch: a cache of API objects kept current by the API server's change events.

Listing every running pod in the cluster each planning cycle costs the API server a full list per cycle and
still leaves ownership up to a TTL old. `ListWatch` does what client-go's reflector does, with the official
client's `kubernetes.watch.Watch`:

1. **List** (served from the API server's watch cache, `resourceVersion=0`) and replace the whole cache with it;
   the list's `metadata.resourceVersion` is where the watch starts.
2. **Watch** from there (`allowWatchBookmarks`, server-side `timeoutSeconds`), applying each ADDED, MODIFIED and
   DELETED event to the cache, and carrying the last resourceVersion seen (bookmarks included) into the next
   watch when this one ends.
3. **410 Gone** (the history the watch needs was compacted): list again. **Any other failure** (connection
   refused, 5xx, 403): wait with exponential backoff (1 s doubling to 60 s) and list again, so a lost event can
   never stay lost.

**Never older.** A list again (3.) asks for a state not older than the last resourceVersion the cache showed
(`resourceVersion=<it>`, `resourceVersionMatch=NotOlderThan`), as client-go's reflector relists: still served from
the watch cache, but one that has reached it. It used to list at `resourceVersion=0`, which an API server whose watch
cache lags (not the watch's, behind the same address) serves from any older state: the cache went back in time, a
binding it had shown vanished, and the scheduler, which had stopped assuming it once shown (`k8s_sched_reads`),
bound another pod onto its GPUs (tests/k8s/test_k8s_sched_relist_lag.py). When the API server cannot serve that
(504 "Too large resource version": its cache did not catch up in time; a 410 Gone, which only an `Exact` list should
get, is taken the same way) the list is consistent (no resourceVersion: from etcd), as the reflector's fallback.
The first list stays at "0", cheap (every replica lists each resource as it starts): it may lag as any watch may,
but behind nothing this cache showed, and the scheduler keeps its own bindings until the cache shows them
(`k8s_sched_reads`).

`convert(obj)` turns an object into the cached item (None drops it): the cache holds items, not raw objects, so
readers pay nothing per event. Readers get `snapshot()`: the generation (bumped on every change) and a copy of the
items, consistent at one point in time. Until the first list has succeeded `synced` is False and the reader
should ask the API itself (`KubernetesWorkloads` does); after that a broken watch leaves the last known state in
place while it reconnects, like a reflector's store.

The watch runs in one daemon thread, started by `start()` and ended by `stop()` (it closes the open stream).

**Caught up.** Nothing here says the cache holds a change written a moment ago. A watch that stalls without an
error (a half-open connection: no byte until the read timeout, `watch_s` + 30 s) keeps `failures` at 0; an event
proves nothing of the changes written before it but not sent yet, the stream may stall next; and a stream that
ends with no error may have been closed early by a proxy, a load balancer or the API server, before the change
was sent. (`mark()` and `past(mark)` used to count a stream begun after a write and ended with no error as having
sent it: the scheduler dropped a binding the cache did not show, and bound another pod onto its GPUs.) A reader
that must know reads the object back: the scheduler's bindings the bound-pod cache has not shown (`k8s_sched_reads`).

**Change notification**, as client-go's ResourceEventHandler (OnAdd, OnUpdate, OnDelete): each handler given to
`on_change(handler)` (or the constructor's `on_change=`) is called as `handler(event_type, old, new)` after each
change of the items, where `old` and `new` are the cached items (`convert(obj)`, not the raw objects) and
`event_type` says what the cache did: "ADDED" (`old` is None), "MODIFIED" (both set) or "DELETED" (`new` is None).

- It is the cache's change, not the event's name: a MODIFIED event whose object `convert` now drops is reported
  DELETED, and one it now keeps ADDED (client-go's FilteringResourceEventHandler does the same). An event that
  leaves the item equal (a status heartbeat the item does not read, a new resourceVersion alone) changes nothing and
  is reported to no one, nor is a DELETED of what the cache does not hold.
- A list after the first (after 410 Gone or a failed watch) is compared key by key with the items it replaces:
  each key it adds or changes is reported, in the list's order, then each it removes, so what changed while no
  watch was open is told like any other change; what it lists unchanged is not reported.
- The first list is not reported: it is what `snapshot()` holds once `synced` is True.

Handlers run in the watch thread, in the order they were registered, after the change is in the items (a handler's
`snapshot()` sees it) and before `notify` is set; they should be quick. One that raises is logged, and the other
handlers and the watch go on.

`ListCache` is what a reader holds: the `ListWatch` once it has synced, and before that (or without a watch, as
`gputide run --once` reads, or when even the first list has not succeeded yet) a list of its own at most once per
`ttl_s`, each after the first not older than the one before (as a relist: never older). Running pods, nodes,
PodDisruptionBudgets and the Jobs gputide suspended are each read through one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3

from balancer.actuate.kubernetes import ApiException, k8s_watch  # the one module that imports the client
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]
GONE = 410
Change = Callable[[str, Any, Any], None]   # a change handler: (event_type, old item, new item), module docstring


def change_type(old: Any, new: Any) -> str:
    """The event type of the change of one key's item from `old` to `new` (None: none)."""
    return "ADDED" if old is None else "DELETED" if new is None else "MODIFIED"


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(event_type, old, new) for each key that replacing the items `before` by `after` adds or changes, in the
    order of `after`, then for each it removes, in the order of `before`."""
    out = [(change_type(old, new), old, new) for key, new in after.items() if (old := before.get(key)) != new]
    return out + [("DELETED", old, None) for key, old in before.items() if key not in after]


def unavailable(exc: Exception) -> bool:
    """Whether a list's failure says the API server cannot serve the resourceVersion asked for: 410 Gone (compacted),
    or 504 "Too large resource version" (its watch cache has not reached it), as client-go's reflector tells them
    (`isExpiredError`, `isTooLargeResourceVersionError`)."""
    status = int(getattr(exc, "status", 0) or 0)
    return status == GONE or status == 504 and "too large resource version" in str(exc).lower()


def list_not_older(what: str, list_call: Callable[..., Json], seen: str | None, selectors: dict[str, str]) -> Json:
    """The first list (`seen` None) at "0", from the watch cache; a later one not older than `seen`, and consistent
    when the API server cannot serve that (module docstring: never older)."""
    if seen is None:
        return list_call(resource_version="0", **selectors)
    try:
        return list_call(resource_version=seen, resource_version_match="NotOlderThan", **selectors)
    except (ApiException, ActuationError) as exc:
        if not unavailable(exc):
            raise
        log.info("%s: no list at resourceVersion %s or newer (%s): listing consistently", what, seen, exc)
    return list_call(**selectors)


def listed_version(listed: Json, seen: str | None) -> str | None:
    """The resourceVersion a list answered at; `seen` when it has none (a proxy's, an aggregated API's): "0" would
    let the next list go back in time."""
    version = (listed.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else seen


def object_key(obj: Json) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def converted(listed: Json, convert: Callable[[Json], Any | None]) -> dict[str, Any]:
    """`convert(obj)` by `namespace/name` of a list's items, less those it turns into None."""
    out = {}
    for obj in listed.get("items") or []:
        item = convert(obj)
        if item is not None:
            out[object_key(obj)] = item
    return out


class ListWatch:
    """A cache of `convert(obj)` by `namespace/name`, kept current by a list and then a watch (module docstring).

    `list_call(**kwargs) -> Json` lists (with retries, raising `ActuationError`); `watch_fn` is the generated
    client's list function the watch streams from (e.g. `CoreV1Api.list_pod_for_all_namespaces`); `selectors`
    (field_selector, label_selector) go to both; `notify` (an Event) is set after every change; `on_change`, a first
    change handler (more with the method `on_change`; the module docstring says when they are called).
    """

    def __init__(self, what: str, list_call: Callable[..., Json], watch_fn: Callable[..., Any],
                 convert: Callable[[Json], Any | None], *, selectors: dict[str, str] | None = None,
                 watch_s: float = 300.0, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 notify: threading.Event | None = None, on_change: Change | None = None) -> None:
        self.what, self.list_call, self.watch_fn, self.convert = what, list_call, watch_fn, convert
        self.notify = notify  # set after every change of the items (a reader waiting for work wakes up)
        self._handlers: tuple[Change, ...] = () if on_change is None else (on_change,)
        self.selectors = dict(selectors or {})
        self.watch_s, self.backoff_s, self.max_backoff_s = watch_s, backoff_s, max_backoff_s
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}
        self._generation = 0
        self._synced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: k8s_watch.Watch | None = None
        self.lists = 0        # lists made (the first, and one after each expiry or failure)
        self.seen: str | None = None   # the last resourceVersion the items showed (a list, an event, a bookmark)
        self.failures = 0     # consecutive failures (0 while the watch is healthy)
        self.streams = 0      # watch streams begun

    # ---- reader side ----------------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced

    @property
    def generation(self) -> int:
        """Bumped on every change of the items."""
        return self._generation

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        """(generation, a copy of the items), consistent at one instant."""
        with self._lock:
            return self._generation, dict(self._items)

    def on_change(self, handler: Change) -> ListWatch:
        """Call `handler(event_type, old, new)` after each change of the items from now on, after the handlers
        given before it (module docstring: what is reported, and from which thread)."""
        self._handlers = (*self._handlers, handler)
        return self

    def start(self) -> ListWatch:
        """Start the watch thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"watch {self.what}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the watch thread: its stream closed, at most `timeout_s` waited. Closed again each 0.1 s while the
        thread lives: a stream opening as it was stopped (the client's `Watch.stream` clears its stop flag as it
        begins, and has no response to close yet) would otherwise wait for its next event, up to `watch_s` (r1)."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        while True:
            w = self._watch
            if w is not None:
                w.stop()
                resp = getattr(w, "_resp", None)  # unblock a stream waiting for its next event
                if resp is not None:
                    resp.close()
            if self._thread is None or not self._thread.is_alive() or time.monotonic() >= deadline:
                return
            self._thread.join(min(0.1, max(deadline - time.monotonic(), 0.0)))

    # ---- the reflector --------------------------------------------------------------------------------------

    def _run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                version = self._follow(version)
                self.failures = 0
                continue
            except ApiException as exc:
                if exc.status == GONE:
                    log.info("%s: watch expired (%s), listing again", self.what, exc.reason)
                    version = None
                    continue
                err = f"{exc.status} {exc.reason}"
            except (ActuationError, urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                err = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001 - the reflector outlives any one bad answer or closed stream
                if self._stop.is_set():   # stop() closed the stream under the reader
                    return
                log.exception("%s: unexpected failure", self.what)
                err = f"{type(exc).__name__}: {exc}"
            if self._stop.is_set():
                return
            self.failures += 1
            version = None  # whatever was missed meanwhile is only in a new list
            wait = min(self.backoff_s * 2 ** (self.failures - 1), self.max_backoff_s)
            log.warning("%s: watch failed (%s), keeping the last state of %d objects; listing again in %.1f s",
                        self.what, err, len(self._items), wait)
            self._stop.wait(wait)

    def _relist(self) -> str:
        """List and replace the items (`lists` counts one, whatever list calls it took). When a reader showed newer
        while the list was in flight (`not_older_than`), list once more, not older than that."""
        asked = self.seen
        listed = list_not_older(self.what, self.list_call, asked, self.selectors)
        with self._lock:
            moved = self.seen != asked
        if moved:
            listed = list_not_older(self.what, self.list_call, self.seen, self.selectors)
        items = converted(listed, self.convert)
        with self._lock:
            before, first = self._items, not self._synced
            self._items, self._generation = items, self._generation + 1
            self.seen = listed_version(listed, self.seen)
            self._synced = True
        self.lists += 1
        self._changed([] if first or not self._handlers else changes(before, items))
        return self.seen or "0"

    def not_older_than(self, version: str | None) -> None:
        """Until its first list has answered, list not older than `version`: what a `ListCache`'s own lists showed
        its reader meanwhile. Its first list, at "0", could go back behind that as the reader turns to this cache
        (audit a4 of 6f47571); one already asked is asked again, once: a reader listing faster than a list answers
        (`ttl_s=0`, a busy cluster's version moving every time) must not keep the watch from syncing; what the
        second answer lacks, the watch's events from its version bring."""
        with self._lock:
            if not self._synced and version:
                self.seen = version

    def _follow(self, version: str) -> str:
        """One watch from `version` until the server ends it; returns the last resourceVersion seen."""
        self._watch = w = k8s_watch.Watch()
        if self._stop.is_set():   # stopped while it listed: `stop()` found no stream to close
            return version
        self.streams += 1
        try:
            for event in w.stream(self.watch_fn, resource_version=version, allow_watch_bookmarks=True,
                                  timeout_seconds=max(int(self.watch_s), 1),
                                  _request_timeout=(10.0, self.watch_s + 30.0), **self.selectors):
                self.failures = 0  # the watch delivers
                obj = event.get("raw_object") or {}
                version = self.seen = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(event["type"], obj)
                if self._stop.is_set():
                    break
        finally:
            self._watch = None
        return version

    def _apply(self, kind: str, obj: Json) -> None:
        key = object_key(obj)
        item = self.convert(obj) if kind != "DELETED" else None
        with self._lock:
            old = self._items.get(key)
            if item is not None:
                if old == item:  # a status change that does not change the item
                    return
                self._items[key] = item
            elif self._items.pop(key, None) is None:
                return
            self._generation += 1
        self._changed([(change_type(old, item), old, item)])

    def _changed(self, told: list[tuple[str, Any, Any]]) -> None:
        """The items changed: each handler hears of each change in `told` (module docstring), then `notify`."""
        handlers = self._handlers
        for kind, old, new in told:
            for handler in handlers:
                try:
                    handler(kind, old, new)
                except Exception:  # noqa: BLE001 - a handler's bug is its own: the cache and the others go on
                    log.exception("%s: a change handler failed on %s", self.what, kind)
        if self.notify is not None:
            self.notify.set()


class ListCache:
    """`convert(obj)` by `namespace/name` for a reader: from `ListWatch` once its first list has succeeded (with
    `watch`), else from a list of its own at most once per `ttl_s` (module docstring).

    `current()` is None until a list has answered, then `view(items)` of the last good answer (the items
    themselves without a `view`): a failed list is logged and leaves it in place, as stale metadata is safer than
    none. It is the same object until an item changes, so `view` runs once per change, not per call, and `version`
    (bumped on every change) lets a reader memoise what it derives from it in turn.

    Each list of its own after the first is not older than the one before, and its watch's first list not older
    than them (module docstring: never older). On an API server whose watch cache lags, such a list costs a 504
    (after the server's own wait, ~3 s, not retried) and a consistent list: only while it lists itself (no watch,
    or one not synced yet).
    One gap stays: a list of its own still in flight when the watch's first list answers may be newer than that
    (the watch listed before a write, it after), and the reader turns to the watch's items, older until the watch's
    events bring the rest (audit a6; resourceVersions are opaque, so the two are not compared).
    """

    def __init__(self, what: str, list_call: Callable[..., Json], watch_fn: Callable[..., Any],
                 convert: Callable[[Json], Any | None], *, selectors: dict[str, str] | None = None,
                 view: Callable[[dict[str, Any]], Any] | None = None, ttl_s: float = 60.0,
                 clock: Callable[[], float] = time.time, watch: bool = False, watch_s: float = 300.0) -> None:
        self.what, self.list_call, self.convert, self.view = what, list_call, convert, view
        self.selectors = dict(selectors or {})
        self.ttl_s, self.clock = ttl_s, clock
        self.watch = None if not watch else ListWatch(what, list_call, watch_fn, convert, selectors=selectors,
                                                      watch_s=watch_s)
        self.version = 0
        self._items: dict[str, Any] | None = None
        self._current: Any = None
        self._generation = -1   # the watch's generation `_items` holds
        self._at = -float("inf")  # when the last list of its own answered
        self.seen: str | None = None   # the resourceVersion that list answered at: the next one is not older

    def current(self) -> Any:
        """What the reader sees of the items as last seen; None until a list has answered (class docstring)."""
        if self.watch is not None and self.watch.synced:
            if self.watch.generation != self._generation:
                self._generation, items = self.watch.snapshot()
                self._keep(items)
            return self._current
        now = self.clock()
        if now - self._at >= self.ttl_s:
            self._list(now)
        if self.watch is not None:   # after its own first list, so the watch's first is not older (a watch its owner
            self.watch.start()       # started before, as the scheduler does, asks again once: `not_older_than`)
        return self._current

    def _list(self, now: float) -> None:
        """A list of its own, not older than the last (the watch's first list then not older either); a failed one
        is logged and leaves the last answer."""
        try:
            listed = list_not_older(self.what, self.list_call, self.seen, self.selectors)
        except ActuationError as err:
            log.warning("%s unavailable, keeping the last answer: %s", self.what, err)
            return
        self._keep(converted(listed, self.convert))
        self._at, self.seen = now, listed_version(listed, self.seen)
        if self.watch is not None:
            self.watch.not_older_than(self.seen)

    def _keep(self, items: dict[str, Any]) -> None:
        """Keep a new answer unless it equals the last one (a relist, a list per TTL that found no change)."""
        if self._items is None or items != self._items:
            self._items = items
            self._current = items if self.view is None else self.view(items)
            self.version += 1

    def close(self) -> None:
        """Stop watching (a no-op without a watch)."""
        if self.watch is not None:
            self.watch.stop()


def by_key(items: dict[str, Any]) -> tuple[Any, ...]:
    """A `view` for `ListCache`: the items as a tuple, in the order of their `namespace/name` (a list's order)."""
    return tuple(items[key] for key in sorted(items))
