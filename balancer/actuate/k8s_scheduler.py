"""The optional secondary scheduler: binds Pending pods with `spec.schedulerName: gputide` to nodes.

`SecondaryScheduler` decides nothing itself: an injected `place(request, nodes_view) -> node name | None` picks
among the nodes that fit (`balancer.app.scheduling.EnginePlacer` is the placement engine's), and the pod is bound
through the Binding API. Reservations made by a Migrate (node annotation `gputide.io/reserved-for`) are honoured:
a pod matching a reservation goes to its reserved node when it fits; reserved GPUs are not offered to other pods.

What it reads, two ways:

* `watch=False` (and `gputide schedule --once`): each pass lists the pending pods of this scheduler; only when
  there are some, it also lists every node and every bound pod.
* `watch=True` (what a running `gputide schedule` uses): three `ListWatch` caches (balancer/actuate/k8s_watch.py),
  the pending pods of this scheduler, the nodes, and the bound pods that still hold resources, as kube-scheduler's
  informers do. A pass then costs the API server nothing but the bindings, and `wait_for_work` returns as soon as
  a pending pod appears, so a pod is bound within moments of its creation instead of at the next poll. Until a
  cache has listed once, the pass lists that resource itself.

A bound pod reaches the caches a moment later than the binding (the pending watch reports it gone, the bound
watch reports it placed). Meanwhile it is *assumed*, as kube-scheduler assumes a pod: its requests count on its
node and it is not offered again, until the bound cache shows it or `assume_s` has passed.

Within a pass the bindings are assumed the same way, into one view of the nodes: the filters run over all nodes
at once per pod (`k8s_filters.Offers`: the placement rules once per distinct set of rules in the pass, what is left
as numpy columns updated after each binding), and a `place` that has `start_pass(view)` (`EnginePlacer`) is asked through
the pass it returns: `place(request, offered_indices)`, and `bound(i)` after each binding the API accepted, so it
can keep one placement state for the whole pass instead of building one per pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from balancer.actuate.k8s_filters import Offers, reservation_key, reserved, unschedulable, why_not
from balancer.actuate.k8s_preempt import Preemptor
from balancer.actuate.k8s_watch import ListWatch
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    MERGE_PATCH,
    RESERVATION_ANNOTATION,
    ConflictError,
    NotFoundError,
    _annotation_map_change,
    _Api,
    _json_annotation,
    basic_requests,
    effective_requests,
    k8s,
    parse_time,
    post_event,
    quantity,
    rfc3339,
)
from balancer.errors import ActuationError
from balancer.noderules import NodeRules, Taint

log = logging.getLogger(__name__)
Json = dict[str, Any]
PlaceFn = Callable[[Json, list[Json]], "str | None"]
BOUND = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"   # pods that hold a node's resources
BASIC = frozenset({"cpu", "memory", GPU_RESOURCE})   # the rest (MIG slices, RDMA, hugepages, pods) are "extended"


def _requests(pod: Json) -> tuple[int, int, int, dict[str, float]]:
    """(gpus, cpu_milli, memory_mib, the rest): the rest are the pod's requests beyond CPU, memory and whole GPUs,
    and the one slot of the node's pod count it takes."""
    total = effective_requests(pod)
    extended = {k: v for k, v in total.items() if k not in BASIC and v} | {"pods": 1.0}
    return *basic_requests(total), extended


def scheduling_request(pod: Json) -> Json | None:
    """What the scheduler needs of a pending pod, in plain values; None for a pod being deleted."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if meta.get("deletionTimestamp"):
        return None
    gpus, cpu, mem, extended = _requests(pod)
    annotations = meta.get("annotations") or {}
    gpu_spec = annotations.get("gputide.io/gpu-spec") or (spec.get("nodeSelector") or {}).get("nvidia.com/gpu.product")
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    namespace, owner = meta.get("namespace", "default"), owners[0]["name"] if owners else ""
    # the reservation keys that are this pod's: itself, its owner, and a ReplicaSet's Deployment ("web-7d9f8")
    owned = {f"{namespace}/{meta['name']}", f"{namespace}/{owner}"} | (
        {f"{namespace}/{owner.rsplit('-', 1)[0]}"} if owner else set())
    return {
        "name": f"{meta.get('namespace', 'default')}/{meta['name']}", "namespace": meta.get("namespace", "default"),
        "pod": meta["name"], "owner": owners[0]["name"] if owners else "", "num_gpu": gpus,
        "gpu_milli": int(annotations.get("gputide.io/gpu-milli", 1000)) if gpus else 0,
        "cpu_milli": cpu, "memory_mib": mem, "priority": int(spec.get("priority") or 0),
        "created": str(meta.get("creationTimestamp") or ""), "uid": str(meta.get("uid") or ""),
        "allowed_models": tuple(sorted(gpu_spec.split("|"))) if gpu_spec else None,
        "rules": NodeRules.from_pod_spec(spec),   # tolerations, node selector, required node affinity
        "pod_affinity": any(((spec.get("affinity") or {}).get(k) or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") for k in ("podAffinity", "podAntiAffinity")),
        "owned": frozenset(owned), "extended": extended, "preempt": spec.get("preemptionPolicy") != "Never",
    }  # fmt: skip


def node_facts(node: Json, reservation_annotation: str = RESERVATION_ANNOTATION) -> Json:
    """A node's capacity, labels, taints and reservations (with their expiry), before what its pods use."""
    alloc, meta = (node.get("status") or {}).get("allocatable") or {}, node["metadata"]
    labels = meta.get("labels") or {}
    return {
        "name": meta["name"], "labels": labels, "gpu_model": labels.get("nvidia.com/gpu.product", ""),
        "taints": tuple(Taint.from_json(t) for t in (node.get("spec") or {}).get("taints") or ()),
        "unschedulable": bool((node.get("spec") or {}).get("unschedulable")),
        "gpus_total": int(quantity(alloc.get(GPU_RESOURCE, 0))),
        "cpu_milli_total": int(quantity(alloc.get("cpu", 0)) * 1000),
        "memory_mib_total": int(quantity(alloc.get("memory", 0)) / 2**20),
        "extended_total": {k: quantity(v) for k, v in alloc.items() if k not in BASIC},
        "reservations": _json_annotation(node, reservation_annotation),
    }  # fmt: skip


class Usage(NamedTuple):
    """What a bound pod takes on its node, and what preemption weighs it by."""

    node: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    extended: tuple[tuple[str, float], ...]
    key: str = ""                         # namespace/name
    priority: int = 0
    started: float = 0.0
    labels: tuple[tuple[str, str], ...] = ()


def pod_usage(pod: Json) -> Usage:
    """The `Usage` of a bound pod."""
    g, c, m, extended = _requests(pod)
    meta, status = pod["metadata"], pod.get("status") or {}
    return Usage(pod["spec"]["nodeName"], g, c, m, tuple(sorted(extended.items())),
                 f"{meta.get('namespace', 'default')}/{meta['name']}", int(pod["spec"].get("priority") or 0),
                 parse_time(status.get("startTime") or meta.get("creationTimestamp")) or 0.0,
                 tuple(sorted((meta.get("labels") or {}).items())))


def _sum_usage(usage) -> tuple[dict[str, list[int]], dict[str, dict[str, float]]]:
    """Per node: [gpus, cpu_milli, memory_mib] and the extended resources that `usage` (`pod_usage` tuples) takes."""
    used: dict[str, list[int]] = {}
    used_ext: dict[str, dict[str, float]] = {}
    for node, g, c, m, ext, *_ in usage:
        u = used.setdefault(node, [0, 0, 0])
        u[0], u[1], u[2] = u[0] + g, u[1] + c, u[2] + m
        e = used_ext.setdefault(node, {})
        for k, v in ext:
            e[k] = e.get(k, 0.0) + v
    return used, used_ext


def _with_usage(summed: tuple[dict, dict], usage) -> tuple[dict[str, list[int]], dict[str, dict[str, float]]]:
    """`summed` plus `usage` (a few assumed bindings), as new dicts: `summed` itself is left as it is."""
    more, more_ext = _sum_usage(usage)
    used, used_ext = dict(summed[0]), dict(summed[1])
    for node, (g, c, m) in more.items():
        u = used.get(node, (0, 0, 0))
        used[node] = [u[0] + g, u[1] + c, u[2] + m]
        e = used_ext[node] = dict(used_ext.get(node, {}))
        for k, v in more_ext[node].items():
            e[k] = e.get(k, 0.0) + v
    return used, used_ext


class SecondaryScheduler:
    """Binds Pending pods with `spec.schedulerName == scheduler_name` to nodes chosen by `place` (module docstring).

    `place(pod_request, nodes_view) -> node name | None` gets plain dicts (see `scheduling_request` / `nodes_view`; each
    offered node also says `gpus_usable`: free GPUs less those reserved for other pods), so the placement engine
    stays free of Kubernetes types. A `place` with `start_pass(view)` is asked through the pass object it returns
    (module docstring); its answers must be what `place` would answer."""

    def __init__(self, api_client: k8s.ApiClient, scheduler_name: str = "gputide", place: PlaceFn | None = None,
                 *, reservation_annotation: str = RESERVATION_ANNOTATION, clock: Callable[[], float] = time.time,
                 max_retries: int = 3, backoff_s: float = 0.5, sleep: Callable[[float], None] = time.sleep,
                 watch: bool = False, watch_s: float = 300.0, assume_s: float = 30.0, retell_s: float = 600.0,
                 min_tell_s: float = 60.0, preemption: bool = True) -> None:
        if place is None:
            raise ValueError("SecondaryScheduler needs a place(pod_request, nodes_view) function")
        self.api = _Api(api_client, max_retries, backoff_s, sleep, 10.0)
        self.scheduler_name, self.place, self.clock = scheduler_name, place, clock
        self.reservation_annotation = reservation_annotation
        self.pending_selector = f"spec.schedulerName={scheduler_name},status.phase=Pending,spec.nodeName="
        self.assume_s, self.retell_s, self.min_tell_s = assume_s, retell_s, min_tell_s
        self._told: dict[str, tuple[str, float]] = {}   # pod -> (why it is pending, when that was said)
        self.latencies: list[float] = []   # the last pass: seconds from each bound pod's creation to its binding
        self.oldest_pending_s = 0.0        # the last pass: age of the oldest pod it left pending
        self.reasons: dict[str, str] = {}  # the last pass: why each pod it left pending waits
        self._assumed: dict[str, tuple[float, Usage]] = {}   # pod -> (when, its pod_usage)
        self.preemptor = Preemptor(self.api, scheduler_name, reservation_annotation, clock) if preemption else None
        self.preempted: list[tuple[str, str]] = []   # the last pass: (victim, node) of each preemption started
        self._listed_bound: list[Usage] = []   # without a synced watch: the bound pods the pass listed
        self._pass_bound: dict[str, list[Usage]] | None = None   # the pass's bound pods per node (preemption)
        self.work = threading.Event()   # set when a pending pod changed (watch), or by `wake`
        self.watches: dict[str, ListWatch] = {}
        self._snapshots: dict[str, tuple[int, dict[str, Any]]] = {}
        self._usage_memo: tuple[int, tuple[dict, dict]] | None = None
        if watch:
            core = self.api.core
            self.watches = {
                "pending pods": ListWatch(f"pending pods of {scheduler_name}", self._lister(
                    "list pending pods", core.list_pod_for_all_namespaces), core.list_pod_for_all_namespaces,
                    scheduling_request, selectors={"field_selector": self.pending_selector}, watch_s=watch_s,
                    notify=self.work),
                "nodes": ListWatch("nodes", self._lister("list nodes", core.list_node), core.list_node,
                                   lambda n: node_facts(n, reservation_annotation), watch_s=watch_s),
                "bound pods": ListWatch("bound pods", self._lister(
                    "list bound pods", core.list_pod_for_all_namespaces), core.list_pod_for_all_namespaces,
                    pod_usage, selectors={"field_selector": BOUND}, watch_s=watch_s),
            }  # fmt: skip

    def _lister(self, what: str, fn: Callable[..., Any]) -> Callable[..., Json]:
        return lambda **kw: self.api(what, fn, **kw)

    # ---- the watched (or listed) state ------------------------------------------------------------------------

    def start(self) -> SecondaryScheduler:
        for w in self.watches.values():
            w.start()
        return self

    def close(self) -> None:
        for w in self.watches.values():
            w.stop()

    def wake(self) -> None:
        self.work.set()

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait until a pending pod changes (with watches) or `wake()`, at most `timeout_s`; True when woken."""
        woken = self.work.wait(timeout_s)
        self.work.clear()
        return woken

    def _cached(self, name: str) -> dict[str, Any] | None:
        """The items of watch `name` once it has synced (None before): copied only when they changed."""
        w = self.watches.get(name)
        if w is None or not w.synced:
            return None
        held = self._snapshots.get(name)
        if held is None or held[0] != w.generation:
            held = self._snapshots[name] = w.snapshot()
        return held[1]

    def _items(self, name: str, what: str, fn: Callable[..., Any], convert: Callable[[Json], Any],
               **selectors: str) -> tuple[list[Any], bool]:
        """The items of a synced watch (and True), else of a consistent list (and False)."""
        cached = self._cached(name)
        if cached is not None:
            return list(cached.values()), True
        items = self.api(what, fn, **selectors).get("items", [])
        return [x for x in map(convert, items) if x is not None], False

    def pending(self) -> list[Json]:
        """Pending pods of this scheduler, not being deleted nor just bound: highest priority first, then oldest."""
        reqs, _ = self._items("pending pods", "list pending pods", self.api.core.list_pod_for_all_namespaces,
                              scheduling_request, field_selector=self.pending_selector)
        bound = self._cached("bound pods") or {}   # the bound-pod watch may be ahead of the pending one
        assumed = self._live_assumed(self._cached("bound pods"))
        return sorted((r for r in reqs if r["name"] not in bound and r["name"] not in assumed),
                      key=lambda r: (-r["priority"], r["created"], r["name"]))

    def _live_assumed(self, seen: Mapping[str, Any] | None) -> dict[str, tuple]:
        """Bindings not yet in the bound cache `seen` (dropped once seen there, or after `assume_s`)."""
        now = self.clock()
        self._assumed = {k: v for k, v in self._assumed.items()
                         if now - v[0] < self.assume_s and (seen is None or k not in seen)}
        return {k: v[1] for k, v in self._assumed.items()}

    def nodes_view(self) -> list[Json]:
        """Per node, by name: capacity, what bound (and assumed) pods and live reservations use, labels, taints."""
        now = self.clock()
        nodes, _ = self._items("nodes", "list nodes", self.api.core.list_node,
                               lambda n: node_facts(n, self.reservation_annotation))
        (used, used_ext), cached = self._bound_usage()
        held = self.preemptor.held(now, {n["name"]: n["reservations"] for n in nodes}) if self.preemptor else {}
        if cached:   # a consistent list already shows every binding made; the cache may not yet
            used, used_ext = _with_usage((used, used_ext), self._live_assumed(self._cached("bound pods")).values())
        view = []
        for n in sorted(nodes, key=lambda n: n["name"]):
            g, c, m = used.get(n["name"], [0, 0, 0])
            e = used_ext.get(n["name"], {})
            view.append(dict(n, gpus_free=n["gpus_total"] - g, cpu_milli_free=n["cpu_milli_total"] - c,
                             memory_mib_free=n["memory_mib_total"] - m,
                             extended_free={k: v - e.get(k, 0.0) for k, v in n["extended_total"].items()},
                             reservations={k: v for k, v in {**n["reservations"], **held.get(n["name"], {})}.items()
                                           if (parse_time(v.get("expires")) or 0) > now}))
        return view

    def _bound_usage(self) -> tuple[tuple[dict[str, list[int]], dict[str, dict[str, float]]], bool]:
        """What bound pods use per node, and whether it comes from the watch cache. From the cache it is summed
        again only when the cache changed (a pass woken by a pending pod that fits nowhere would otherwise re-add
        20,000 unchanged pods)."""
        items = self._cached("bound pods")
        if items is None:   # no synced watch: a consistent list, summed every time (and kept for preemption)
            usage, _ = self._items("bound pods", "list bound pods", self.api.core.list_pod_for_all_namespaces,
                                   pod_usage, field_selector=BOUND)
            self._listed_bound = usage
            return _sum_usage(usage), False
        generation = self._snapshots["bound pods"][0]
        if self._usage_memo is None or self._usage_memo[0] != generation:
            self._usage_memo = (generation, _sum_usage(items.values()))
        return self._usage_memo[1], True

    # ---- one pass -----------------------------------------------------------------------------------------

    def schedule_once(self) -> dict[str, str | None]:
        """One pass: bind every pending pod of this scheduler that fits somewhere. Returns {pod: node or None};
        `latencies` and `oldest_pending_s` say how long the bound pods waited and the oldest left pending has,
        `reasons` why each pod left pending waits. A pod bound by someone else or deleted meanwhile is left out.
        Each pod left pending gets a FailedScheduling Event and the condition PodScheduled=False/Unschedulable
        saying why (as kube-scheduler reports it: `kubectl describe pod` shows it, and the cluster autoscaler
        scales up for such pods), again when the reason changes (at most every `min_tell_s`) or `retell_s` has passed; a
        bound pod gets a
        Scheduled Event."""
        self.latencies, self.oldest_pending_s, self.reasons, self.preempted = [], 0.0, {}, []
        self._pass_bound: dict[str, list[Usage]] | None = None
        pending = self.pending()
        self._told = {k: v for k, v in self._told.items() if k in {r["name"] for r in pending}}
        if not pending:   # nothing to place: no need to read every node and bound pod
            return {}
        view, results, now = self.nodes_view(), {}, self.clock()
        index = {n["name"]: i for i, n in enumerate(view)}
        offers = Offers(view)
        session = self.place.start_pass(view) if hasattr(self.place, "start_pass") else None
        for req in pending:
            offered = offers.fitting(req)
            reserved = offers.reserved_for(req)
            target = reserved["name"] if reserved else self._choose(req, view, offered, session)
            i = index.get(target) if target else None
            created = parse_time(req["created"])
            if i is None or why_not(view[i], req) is not None:
                results[req["name"]] = None
                self.oldest_pending_s = max(self.oldest_pending_s, now - created if created else 0.0)
                self.reasons[req["name"]] = unschedulable(offers.reasons(), req, len(offered))
                if not len(offered):
                    self.reasons[req["name"]] += self._preempt(req, view, offers)
                self._tell_unschedulable(req, self.reasons[req["name"]])
                continue
            bound = self._bind(req, view[i])
            if bound is not None:
                results[req["name"]] = bound or None
            if not bound:
                continue
            offers.update(i)
            if session is not None:
                session.bound(i)
            if created:
                self.latencies.append(max(now - created, 0.0))
            self._told.pop(req["name"], None)
            self._event(req, "Normal", "Scheduled", f"Successfully assigned {req['name']} to {bound}")
        return results

    def _preempt(self, req: Json, view: list[Json], offers: Offers) -> str:
        """Preempt for a pod no node fits (balancer/actuate/k8s_preempt.py): " preemption: <what was done>", or ""
        when preemption is off, the pod opts out, already holds a node while its victims terminate, or no node
        can make room. The reservation made holds the node for the rest of the pass too, and the victims are no
        one else's victims in it."""
        if self.preemptor is None or not req["preempt"] or any(reservation_key(n, req) for n in view):
            return ""
        bound = self._bound_by_node()
        try:
            choice = self.preemptor.plan(req, [view[i] for i in offers.admitted()], bound)
            if choice is None:
                return ""
            entry = self.preemptor.preempt(req, choice)
        except ActuationError as err:
            log.warning("scheduler %s: preemption for %s failed: %s", self.scheduler_name, req["name"], err)
            return f" preemption failed: {err}."
        gone = {v.key for v in choice.victims}
        bound[choice.node] = [u for u in bound[choice.node] if u.key not in gone]
        i = next(i for i, n in enumerate(view) if n["name"] == choice.node)
        view[i]["reservations"] = {**view[i]["reservations"], req["name"]: entry}
        offers.update(i)
        self.preempted += [(v.key, choice.node) for v in choice.victims]
        done = (f"preempting {len(choice.victims)} pod(s) of lower priority on {choice.node}: "
                f"{', '.join(sorted(gone))}")
        log.info("scheduler %s: %s: %s", self.scheduler_name, req["name"], done)
        return f" preemption: {done}."

    def _bound_by_node(self) -> dict[str, list[Usage]]:
        """The bound (and assumed) pods per node, for preemption: grouped at most once per pass, and only when a
        pod fits nowhere."""
        if self._pass_bound is None:
            cached = self._cached("bound pods")
            usage = self._listed_bound if cached is None else cached.values()   # the pass's own list, or the cache
            self._pass_bound = {}
            for u in [*usage, *self._live_assumed(cached).values()]:
                self._pass_bound.setdefault(u.node, []).append(u)
        return self._pass_bound

    def _choose(self, req: Json, view: list[Json], offered: Any, session: Any) -> str | None:
        """What `place` (or the pass's session) picks among the nodes `offered` (indices into `view`)."""
        if session is not None:
            return session.place(req, offered)
        return self.place(req, [view[i] for i in offered])

    def _bind(self, req: Json, node: Json) -> str | None:
        """Bind the pod to `node` and assume it there: its node's name; "" when the binding failed (the pod stays
        pending), None when the pod was bound by someone else or deleted (left out of the pass)."""
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": req["pod"], "namespace": req["namespace"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node["name"]}}
        try:
            self.api(f"bind {req['name']}", self.api.core.create_namespaced_pod_binding, req["pod"],
                     req["namespace"], body)
        except (ConflictError, NotFoundError) as err:   # bound by someone else, or deleted: not ours to place
            log.info("scheduler %s: %s no longer waits for a node: %s", self.scheduler_name, req["name"], err)
            return None
        except ActuationError as err:
            log.warning("scheduler %s: %s", self.scheduler_name, err)
            return ""
        self._assumed[req["name"]] = (self.clock(), Usage(
            node["name"], req["num_gpu"], req["cpu_milli"], req["memory_mib"], tuple(sorted(req["extended"].items())),
            req["name"], req["priority"], self.clock()))
        node["gpus_free"] -= req["num_gpu"]
        node["cpu_milli_free"] -= req["cpu_milli"]
        node["memory_mib_free"] -= req["memory_mib"]
        for k, v in req["extended"].items():
            if k in node["extended_free"]:
                node["extended_free"][k] -= v
        key = reservation_key(node, req)
        if key is not None:
            node["reservations"].pop(key)
            if self.preemptor is not None:
                self.preemptor.release(node["name"], key)
            self.api.update_node(node["name"], lambda n, k=key: _annotation_map_change(
                n, self.reservation_annotation, {k: None}))
        node["gpus_usable"] = node["gpus_free"] - reserved(node)
        return node["name"]

    # ---- telling the pod's owner --------------------------------------------------------------------------

    def _tell_unschedulable(self, req: Json, message: str) -> None:
        now, told = self.clock(), self._told.get(req["name"])
        # a new reason after `min_tell_s`, the same one again after `retell_s`: in a busy cluster the counts in the
        # message change at almost every pass, and an Event plus a status write per pod per pass would flood the API
        if told is not None and now - told[1] < (self.retell_s if told[0] == message else self.min_tell_s):
            return
        self._told[req["name"]] = (message, now)
        self._event(req, "Warning", "FailedScheduling", message)
        what = f"pod {req['name']} status"
        core = self.api.core
        try:
            self.api.update(what, lambda: self.api(what, core.read_namespaced_pod, req["pod"], req["namespace"]),
                            lambda body: self.api(what, core.patch_namespaced_pod_status, req["pod"],
                                                  req["namespace"], body, _content_type=MERGE_PATCH),
                            lambda pod: _unschedulable_condition(pod, message, now))
        except ActuationError as err:   # best effort: the pod is retried next pass all the same
            log.warning("scheduler %s: cannot mark %s unschedulable: %s", self.scheduler_name, req["name"], err)

    def _event(self, req: Json, kind: str, reason: str, message: str) -> None:
        """An Event on the pod, as kube-scheduler posts them (best effort: a failure is logged)."""
        pod = {"apiVersion": "v1", "kind": "Pod", "name": req["pod"], "namespace": req["namespace"], "uid": req["uid"]}
        try:
            post_event(self.api, pod, kind, reason, message, self.scheduler_name, self.clock())
        except ActuationError as err:
            log.warning("scheduler %s: cannot post %s event on %s: %s", self.scheduler_name, reason, req["name"], err)


def _unschedulable_condition(pod: Json, message: str, now: float) -> Json | None:
    """The merge patch that sets PodScheduled=False/Unschedulable with `message` (None: already so, or bound)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    conditions = (pod.get("status") or {}).get("conditions") or []
    old = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
    if (old.get("status"), old.get("reason"), old.get("message")) == ("False", "Unschedulable", message):
        return None
    new = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
           "lastTransitionTime": old["lastTransitionTime"] if old.get("status") == "False" and old.get(
               "lastTransitionTime") else rfc3339(now)}
    return {"status": {"conditions": [*(c for c in conditions if c.get("type") != "PodScheduled"), new]}}


__all__ = ["BOUND", "PlaceFn", "SecondaryScheduler", "node_facts", "pod_usage", "scheduling_request"]
