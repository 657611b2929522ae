"""What the secondary scheduler reads: its pending pods, the nodes, the bound pods, the namespaces' labels.

Two ways (balancer/actuate/k8s_scheduler.py's `SecondaryScheduler` takes these methods from `SchedulerReads`):

* `watch=False` (and `gputide schedule --once`): each pass lists the pending pods of this scheduler; only when
  there are some, it also lists every node and every bound pod.
* `watch=True` (what a running `gputide schedule` uses): `ListWatch` caches (balancer/actuate/k8s_watch.py) of
  the pending pods of this scheduler, the nodes, the bound pods that still hold resources, the namespaces (their
  labels, for pod affinity's namespaceSelectors) and the PersistentVolumeClaims, PersistentVolumes and
  StorageClasses (`k8s_volumes`), as kube-scheduler's informers do. A pass then costs the API server nothing but
  the bindings, and `wait_for_work` returns as soon as a pending pod appears, so a pod is bound within moments of
  its creation instead of at the next poll (and shortly after a node opens: "Nodes that open" below). Until a cache
  has listed once, the pass lists that resource itself (the claims, volumes and classes only in a pass with a pod
  that mounts claims).

A bound pod reaches the caches a moment later than the binding (the pending watch reports it gone, the bound
watch reports it placed). Meanwhile it is *assumed*, as kube-scheduler assumes a pod: its requests count on its
node and it is not offered again, until the bound cache shows it. Nothing the watch does proves the cache would show
it by now: a watch that fails (the cache keeps its last state), is stopped or stalls without an error (a half-open
connection: no failure is counted until its read timeout) delivers nothing, one whose every stream is cut by an
error (a proxy or load balancer whose longest stream is shorter than `watch_s`) lists again after each, and a
stream begun after the binding may be closed cleanly, before the binding's event, by a proxy, a load balancer or the
API server itself. It used to count as caught up, a stream begun after the binding having ended with no error
(`ListWatch.past`): the binding was dropped after `assume_s`, the pod's GPUs looked free, and the next pass bound
another pod onto them.

So a binding past `assume_s` that the bound cache does not show is read back (`read_back`: a GET, read from etcd as
it is now; a list again is not, served from the API server's watch cache, which may lag, if never behind what the
cache showed: `k8s_watch`): dropped if the pod is gone, on no node, finished, or another pod of its name (its uid,
kept with the binding: a StatefulSet's replica created again), moved if on another node, kept if on its node (the
cache will show it) or unreadable, as kube-scheduler keeps an assumed pod until its informer shows it (its assumed pods
never expire: kubernetes#106361). Else a pod deleted before a pass saw it bound, or a binding of unknown outcome that
failed after all, held its node's room (and hid the pod from the pending ones) for ever. Each such binding is read at
most once per `assume_s`, at most `READ_BACKS` a pass, those read (or tried) longest ago first: a synced healthy watch
shows a binding within moments, so one it never shows (the pod deleted or finished before a pass saw it bound, a binding
that failed after all) is read once, and dropped. Until the watch first syncs it shows none, and a binding kept is read
again each `assume_s` (below). A binding whose name a pending pod of another uid holds (the pod deleted and created
again: a StatefulSet's replica, a Job pod of a fixed name) is read back at once, before those due, watch or none, not
after `assume_s`: the new pod used to count as the one bound, left out of the pending ones (told nothing) and its
predecessor's room held, until then. It is read once for that pod (`Assumed.read_for`, its uid), not while `checked`
equals the binding's time, as it was: with a clock that had not moved since the binding (or a read failing in that
instant) it was read every pass, and once read for any cause (every binding kept while the watch has not synced is)
never at once again. The bound cache is keyed by name too, and needs no uid: a name holds one pod at a time, and the
watch reports the old one's deletion before the new one's binding. A read that fails is tried once, not retried (a pass
would sleep through the API wrapper's backoffs before binding anything), and counts as a read: the binding is kept, not
read again within `assume_s`, and the others go first; it ends the reads for the pass (the API server may be failing
them all, each within its timeout). So a pod whose GET keeps failing costs one GET per `assume_s`, and holds back the
others' reads by a pass each `assume_s`, not for good: M such pods, one failed read a pass, delay a good one's by M
passes. A read the pass's read deadline leaves no time to try (`DeadlineExceeded`, no GET sent) is none: still due.

Only `pending()` reads back, as the pass begins: a binding is never dropped mid-pass (`_bound`). Without a synced
bound-pod watch the pass lists the bound pods itself (a consistent list, which shows every binding made), and an
assumed binding keeps the pod out of the pending ones (whose cache may lag) and counts on its node only where that
list does not show its pod: not twice, and still while the binding may be in flight (of unknown outcome, `k8s_bind`:
received, its answer lost, written after the list). It used to count only as listed: the next pass bound another pod
onto the GPUs of a binding of unknown outcome, which then landed on top (tests/k8s/test_k8s_sched_unsure_listed.py).
The cost: a pod bound that finished or was deleted before the list holds its room until dropped, as below. Without
watches (`watch=False`) it does so for `assume_s` (or until read back, once a pod of another uid holds its name):
every pass lists consistently, and no cache is ever read. With a bound-pod watch that has not synced yet (its first
list failing), it is kept and read back as above, not dropped by time: it used to be, the watch then synced from a
list served at `resourceVersion=0` (which may lag) that lacked it, and the next pass bound another pod onto its GPUs.
Kept so, each binding was read again by GET every `assume_s` until the watch synced, and those reads share
`READ_BACKS` a pass: N of them held a failed binding's read (its pod offered again) back by N/`READ_BACKS` passes.
Now the pass's own consistent list is that read (`_listed_assumed`): a binding it shows (the pod of its uid, on its
node) counts as read when listed, no GET spent, and only those it does not show (failed, gone, moved), or not listed
within `assume_s` (no pass with pending pods: a failed binding's own pod, hidden while assumed, is none), are read
back, those whose pod the pending list still shows first. It stays assumed all the same: the watch, once synced, may
lag behind the list.

Host ports (kube-scheduler's NodePorts filter): a pending pod's requests say the host ports its containers take
(`k8s_reads.scheduling_request`: `host_ports`), a bound or assumed pod's `Usage` says them too (`k8s_reads.pod_usage`),
and each node of `nodes_view` says those taken there (`host_ports`), so no pod is bound where a port it needs is
taken (the kubelet would reject it there, and the pod fail).

Nodes that open. kube-scheduler moves the pods it could not place back to its active queue when a node is added or
changes so that one may fit now (its queueing hints). The nodes' cache does likewise through its change handler
(`node_openings`, given to `ListWatch.on_change`): a change of a node's `node_facts` that may let a pending pod
fit where it did not (`opening`: a node added, uncordoned, a repelling taint gone, such as
`node.kubernetes.io/not-ready` once the node is Ready, allocatable grown, its labels changed, a reservation
released) calls `node_opened`, which wakes `wait_for_work` `node_wake_s` later (0.5 s): the openings meanwhile (a
node pool scaling up) join that one wake, so at most one pass per `node_wake_s` is woken by nodes, whatever they
do. What changes no `node_facts` (a status heartbeat, a condition's `lastHeartbeatTime`, a new resourceVersion
alone) is no change of the cache at all, so no handler hears of it, and a change that only takes away (cordoned,
tainted, allocatable shrunk, deleted, a reservation made) wakes nothing: no pod fits that did not. Nor does the
cache's first list, which `ListWatch` reports to no handler (until then each pass listed the nodes itself); a list
again after a broken watch is compared node by node with what the cache held, and `ListWatch` reports what it
added, changed or removed.

A pass told to stop (`halted()`: `stop()` was called, or the Lease is lost) begins no other read: the pods, nodes
and bound pods raise `PassStopped` instead of being read (the read in flight ends within its own timeout), the
namespaces' labels are left unknown, and `k8s_volumes` reads no further claims, volumes or classes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Self

from balancer.actuate.k8s_namespaces import labels_by_name, listed_labels
from balancer.actuate.k8s_reads import (
    BOUND,
    HostPort,
    Usage,
    node_facts,
    pod_usage,
    scheduling_request,
    sum_usage,
    with_usage,
)
from balancer.actuate.k8s_watch import Change, ListWatch
from balancer.actuate.kubernetes import DeadlineExceeded, NotFoundError, _Api, parse_time
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]
NODE_WAKE_S = 0.5   # node openings within this long wake one pass (module docstring)
READ_BACKS = 10     # assumed bindings read back a pass at most (module docstring)
_TOTALS = ("gpus_total", "cpu_milli_total", "memory_mib_total")


class Assumed(NamedTuple):
    """A binding made (or maybe made) that the bound-pod cache has not shown yet (module docstring)."""

    when: float     # when it was made
    usage: Usage    # what the pod takes on its node (`pod_usage`)
    uid: str        # the pod's (unknown: "")
    checked: float  # when it was made or last read back, or tried to be (`read_back`), or listed on its node
    read_for: str = ""   # the uid of the pending pod of its name it was last read (or tried) for ("": none)


def read_back(assumed: Assumed, pod: Json | None, now: float) -> Assumed | None:
    """The binding `assumed` as the pod read back now (None: not found) says it is: None once it holds no node's room
    (gone, on no node, finished, another pod of its name), else where it is, read at `now` (module docstring)."""
    if not pod:
        return None
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    where = spec.get("nodeName") or ""
    if not where or assumed.uid and meta.get("uid") not in (None, assumed.uid) or (
            (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):   # as `BOUND` leaves them out
        return None
    return assumed._replace(usage=assumed.usage._replace(node=where), checked=now)


def opening(before: Json | None, after: Json | None) -> str:
    """Why a node whose `node_facts` went from `before` to `after` (None: none) may now take a pending pod that it
    could not take before, as kube-scheduler's queueing hints for a Node add or update; "" when it cannot."""
    if after is None:
        return ""
    if before is None:
        return "added"
    if before["unschedulable"] and not after["unschedulable"]:
        return "uncordoned"
    if {t for t in before["taints"] if t.repels} - set(after["taints"]):
        return "a taint removed"
    grown = {**{k: after[k] - before[k] for k in _TOTALS},
             **{k: v - before["extended_total"].get(k, 0.0) for k, v in after["extended_total"].items()}}
    if any(v > 0 for v in grown.values()):
        return "allocatable grew"
    if before["labels"] != after["labels"]:   # a node selector or affinity may match now
        return "labels changed"
    if set(before["reservations"]) - set(after["reservations"]):
        return "a reservation released"
    return ""


def start_timer(delay_s: float, fn: Callable[[], None]) -> threading.Timer:
    """`fn()` in `delay_s`, from a daemon thread; `cancel()` before then stops it."""
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer


def node_openings(opened: Callable[[str, str], None]) -> Change:
    """A change handler for the nodes' `ListWatch` (items: `node_facts`; `ListWatch.on_change`) that calls
    `opened(node, why)` after each change that may let a pending pod fit where it did not (`opening`; the module
    docstring), from the watch's thread."""

    def changed(_kind: str, before: Json | None, after: Json | None) -> None:
        why = opening(before, after)
        if why and after is not None:
            opened(after["name"], why)

    return changed


def ports_by_node(bound: Any) -> dict[str, frozenset[HostPort]]:
    """The host ports the `bound` pods (`Usage`) take, per node (only nodes where some are taken)."""
    out: dict[str, set[HostPort]] = {}
    for u in bound:
        ports = getattr(u, "host_ports", None)
        if ports:
            out.setdefault(u.node, set()).update(ports)
    return {k: frozenset(v) for k, v in out.items()}


class PassStopped(Exception):
    """The pass was told to stop (or lost the Lease) before a read it would have begun: it ends, having read no
    more. Not an `ActuationError`: nothing failed, and the next pass reads again."""


class SchedulerReads:
    """The reads of `SecondaryScheduler` (the module docstring), a mixin: the scheduler's `__init__` sets the
    attributes below."""

    api: _Api
    scheduler_name: str
    reservation_annotation: str
    pending_selector: str
    clock: Callable[[], float]
    leading: Callable[[], bool]                  # the Lease elector's check (no I/O)
    assume_s: float
    holds: Any                                   # k8s_holds.Holds: the nodes held for pods that preempt or starve
    work: threading.Event                        # set when a pending pod changed (watch), a node opened, or by `wake`
    watches: dict[str, ListWatch]
    _assumed: dict[str, Assumed]                 # pod -> the binding the bound-pod cache has not shown yet
    _listed_bound: list[Usage]                   # without a synced watch: the bound pods the pass listed, and the
    #                                              assumed ones it did not show
    _snapshots: dict[str, tuple[int, dict[str, Any]]]
    _usage_memo: tuple[int, tuple[dict, dict]] | None
    _stop: threading.Event                       # set by `stop()`
    term: Callable[[], int]                      # the elector's count of the times it took the Lease
    tell: Any                                    # k8s_tell.Teller: what each pending pod was told
    node_wake_s: float                           # node openings within this long wake one pass
    wake_timer: Callable[[float, Callable[[], None]], Any]   # `start_timer`: a started timer, `cancel()`-able
    _wake_lock: threading.Lock
    node_wakes: int = 0                          # passes woken by nodes that opened
    _node_wake: Any = None                       # the timer of the node wake to come, if one is
    _term: int | None = None                     # `term()` at the last pass (None: no pass yet)
    _term_lost: bool = False                     # the Lease was seen lost since the last pass began
    _pass_bound: Mapping[str, Usage] | None = None   # the bound-pod cache as the pass's view summed it (`_bound`)

    def halted(self) -> bool:
        """Whether the pass must begin nothing more: `stop()` was called, or the Lease is lost (noted: the next
        pass that leads begins a new term, `begin_term`)."""
        if self._stop.is_set():
            return True
        if not self.leading():
            self._term_lost = True
            return True
        return False

    def begin_term(self) -> None:
        """Before a pass: if the Lease was lost since the last one (seen lost, or `term()`, the elector's count of
        the times it took the Lease, moved on: lost and taken back between two asks), what this replica knew from
        its earlier term is dropped, to be read again from the cluster (another leader may have changed the
        reservations, evicted or bound meanwhile): the reservations it wrote that the node cache may not show yet,
        the budgets it counted (`Preemptor.forget`), what it told each pending pod. The bindings and claims it
        assumed stay until the caches show them: the API server answered them, they are the cluster's."""
        term = self.term()
        if self._term is not None and (self._term_lost or term != self._term):
            log.info("scheduler %s: leading again (term %s): reading the reservations it held afresh",
                     self.scheduler_name, term)
            self.holds.preemptor.forget()
            self.tell.told.clear()
        self._term, self._term_lost = term, False

    @property
    def why_halted(self) -> str:
        """Why `halted()` says so."""
        return "shutting down" if self._stop.is_set() else "this replica lost the Lease"

    def start(self) -> Self:
        for w in self.watches.values():
            w.start()
        return self

    def close(self) -> None:
        for w in self.watches.values():
            w.stop()
        with self._wake_lock:
            if self._node_wake is not None:
                self._node_wake.cancel()
                self._node_wake = None

    def wake(self) -> None:
        self.work.set()

    def node_opened(self, node: str, why: str) -> None:
        """`node` changed so that a pending pod may fit where it did not (`node_openings`): wake a pass `node_wake_s`
        from the first such change, the others meanwhile joining it (the module docstring)."""
        log.debug("scheduler %s: node %s %s: a pass follows", self.scheduler_name, node, why)
        with self._wake_lock:
            if self._node_wake is not None:
                return
            if self.node_wake_s > 0:
                self._node_wake = self.wake_timer(self.node_wake_s, self._node_wake_due)
                return
        self._node_wake_due()

    def _node_wake_due(self) -> None:
        with self._wake_lock:
            self._node_wake = None
            self.node_wakes += 1
        self.wake()

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait until a pending pod changes or a node opens (with watches), or `wake()`, at most `timeout_s`; True
        when woken."""
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
        """The items of a synced watch (and True), else of a consistent list (and False); `PassStopped` once
        `halted()`."""
        if self.halted():
            raise PassStopped(f"{what}: not read")
        cached = self._cached(name)
        if cached is not None:
            return list(cached.values()), True
        items = self.api(what, fn, **selectors).get("items", [])
        return [x for x in map(convert, items) if x is not None], False

    def namespace_labels(self) -> dict[str, dict[str, str]] | None:
        """The namespaces' labels by name: the watch's once synced, else a list of them; None when the list fails
        (logged: terms that need them are then left unresolved, never guessed), or the pass is `halted()`."""
        cached = self._cached("namespaces")
        if cached is None and self.halted():   # read lazily, maybe within a pod's turn: left unknown, not raised
            return None
        return labels_by_name(cached) if cached is not None else listed_labels(
            lambda: self.api("list namespaces", self.api.core.list_namespace), f"scheduler {self.scheduler_name}")

    def pending(self) -> list[Json]:
        """Pending pods of this scheduler, not being deleted, gated (`spec.schedulingGates`) nor just bound: highest
        priority first, then oldest."""
        reqs, _ = self._items("pending pods", "list pending pods", self.api.core.list_pod_for_all_namespaces,
                              scheduling_request, field_selector=self.pending_selector)
        seen = self._cached("bound pods")   # the bound-pod watch may be ahead of the pending one
        self._read_back_assumed(seen, {r["name"]: r["uid"] for r in reqs if self._another(r)},
                                {r["name"] for r in reqs})
        assumed = self._live_assumed(seen)
        return sorted((r for r in reqs if r["name"] not in (seen or {}) and r["name"] not in assumed),
                      key=lambda r: (-r["priority"], r["created"], r["name"]))

    def _live_assumed(self, seen: Mapping[str, Any] | None) -> dict[str, Usage]:
        """Bindings not yet in the bound cache `seen` (None: not synced, or no bound-pod watch at all). Without that
        watch (`watch=False`) a binding is dropped after `assume_s`: no cache is ever read, nor is a binding read
        back, and a pass's own list counts an assumed binding it does not show until then (`_bound_usage`). With
        it, synced or not yet, a binding is dropped once seen there, else only by `_read_back_assumed` (the module
        docstring): no end of the watch's streams proves the cache would show it, nor would a first list (served at
        `resourceVersion=0`, which may lag), and dropped the pod's GPUs would look free to the next pod."""
        if self._bound_watched:
            self._assumed = {k: v for k, v in self._assumed.items() if k not in (seen or {})}
        else:
            now = self.clock()
            self._assumed = {k: v for k, v in self._assumed.items() if now - v.when < self.assume_s}
        return {k: v.usage for k, v in self._assumed.items()}

    @property
    def _bound_watched(self) -> bool:
        """Whether a bound-pod watch is configured (`watch=True`), synced or not."""
        return "bound pods" in self.watches

    def _another(self, req: Json) -> bool:
        """Whether pending pod `req` is another pod than the one of its name's assumed binding (both uids known): a
        pod deleted and created again under the same name (module docstring)."""
        assumed = self._assumed.get(req["name"])
        return assumed is not None and bool(assumed.uid and req.get("uid")) and assumed.uid != req["uid"]

    def _read_back_assumed(self, seen: Mapping[str, Any] | None, others: Mapping[str, str],
                           listed: set[str]) -> None:
        """Read back the bindings past `assume_s` that the bound cache `seen` (None: not synced yet) does not show
        (without a bound-pod watch, none: `_live_assumed` drops them), each once per `assume_s`, and first, at once,
        those of a name that another pod pending now holds (`others`: name -> its uid), once for that pod (`read_for`),
        then those whose pod the pending list still shows (`listed`: the binding may have failed, and its pod waits
        on the read), at most `READ_BACKS`, a failed read counting as one and ending them for the pass (module
        docstring). One not tried, the pass's read deadline too near (`DeadlineExceeded`), is no read: it ends them,
        and is due still."""
        now = self.clock()
        at_once = {k for k, v in self._assumed.items() if k in others and v.read_for != others[k]}
        # `checked` starts at the binding's time and only grows: past `assume_s` since it, past it since the binding
        periodic = self._bound_watched
        due = sorted((k not in at_once, k not in listed, v.checked, k) for k, v in self._assumed.items()
                     if k not in (seen or {}) and (k in at_once or periodic and now - v.checked >= self.assume_s))
        for *_, key in due[:READ_BACKS]:
            if self.halted():
                return
            namespace, name = key.split("/", 1)
            try:
                pod = self.api(f"pod {key}", self.api.core.read_namespaced_pod, name, namespace, retries=0,
                               halt=self.halted)
            except NotFoundError:
                pod = None
            except DeadlineExceeded as err:   # retries=0: only ever raised before the one try, so nothing was read
                log.info("scheduler %s: %s not read back this pass: %s", self.scheduler_name, key, err)
                return
            except ActuationError as err:   # kept, read again after `assume_s`: the API server may answer then
                log.warning("scheduler %s: cannot read back %s, assumed still: %s", self.scheduler_name, key, err)
                self._assumed[key] = self._assumed[key]._replace(checked=now, read_for=others.get(key, ""))
                return
            if (kept := read_back(self._assumed[key], pod, now)) is None:
                log.info("scheduler %s: %s no longer holds %s's room: assumed no more", self.scheduler_name, key,
                         self._assumed[key].usage.node)
                del self._assumed[key]
            else:
                self._assumed[key] = kept._replace(read_for=others.get(key, ""))

    def _listed_assumed(self, shown: Mapping[str, tuple[str, str]]) -> None:
        """The assumed pods a pass's own bound-pod list showed (consistently, `shown`: pod -> (its node, its uid))
        count as a read of each binding they show (the pod of its uid, on its node): read now, no GET spent on it
        (module docstring). It stays assumed: the bound cache, once synced, may not show it yet."""
        now = self.clock()
        for key, (node, uid) in shown.items():
            v = self._assumed[key]
            if v.usage.node == node and (not v.uid or uid in ("", v.uid)):
                self._assumed[key] = v._replace(checked=now)

    def nodes_view(self) -> list[Json]:
        """Per node, by name: capacity, what bound (and assumed) pods and live reservations use, labels, taints."""
        now = self.clock()
        nodes, _ = self._items("nodes", "list nodes", self.api.core.list_node,
                               lambda n: node_facts(n, self.reservation_annotation))
        (used, used_ext), cached = self._bound_usage()
        held = self.holds.preemptor.held(now, {n["name"]: n["reservations"] for n in nodes})
        if cached:   # a pass's own list already added the assumed pods it did not show (`_bound_usage`)
            used, used_ext = with_usage((used, used_ext), self._live_assumed(self._pass_bound).values())
        ports = ports_by_node(self._bound())   # bound and assumed pods' host ports (NodePorts)
        view = []
        for n in sorted(nodes, key=lambda n: n["name"]):
            g, c, m = used.get(n["name"], [0, 0, 0])
            e = used_ext.get(n["name"], {})
            view.append(dict(n, gpus_free=n["gpus_total"] - g, cpu_milli_free=n["cpu_milli_total"] - c,
                             memory_mib_free=n["memory_mib_total"] - m,
                             extended_free={k: v - e.get(k, 0.0) for k, v in n["extended_total"].items()},
                             host_ports=ports.get(n["name"], frozenset()),
                             reservations={k: v for k, v in {**n["reservations"], **held.get(n["name"], {})}.items()
                                           if (parse_time(v.get("expires")) or 0) > now}))
        return view

    def _bound_usage(self) -> tuple[tuple[dict[str, list[int]], dict[str, dict[str, float]]], bool]:
        """What bound pods use per node, and whether it comes from the watch cache. From the cache it is summed
        again only when the cache changed (a pass woken by a pending pod that fits nowhere would otherwise re-add
        20,000 unchanged pods). The cache's items summed are the pass's (`_bound`). From a list of its own, with the
        assumed pods that list does not show (module docstring)."""
        items = self._pass_bound = self._cached("bound pods")
        if items is None:   # no synced watch: a consistent list, summed every time (and kept for preemption)
            shown: dict[str, tuple[str, str]] = {}   # assumed pods the list shows: (node, uid)
            watched = self._bound_watched   # without the watch `checked` is never read: nothing to note

            def usage_of(pod: Json) -> Usage:
                u = pod_usage(pod)
                if watched and u.key in self._assumed:
                    shown[u.key] = (u.node, (pod.get("metadata") or {}).get("uid") or "")
                return u

            usage, _ = self._items("bound pods", "list bound pods", self.api.core.list_pod_for_all_namespaces,
                                   usage_of, field_selector=BOUND)
            listed = {u.key for u in usage}   # a binding in flight is not listed yet: counted as assumed
            self._listed_bound = [*usage, *(u for k, u in self._live_assumed(None).items() if k not in listed)]
            self._listed_assumed(shown)
            return sum_usage(self._listed_bound), False
        generation = self._snapshots["bound pods"][0]
        if self._usage_memo is None or self._usage_memo[0] != generation:
            self._usage_memo = (generation, sum_usage(items.values()))
        return self._usage_memo[1], True

    def _bound(self) -> list[Usage]:
        """The bound and assumed pods: the pass's own list, or the cache's items its view summed (`nodes_view`), and
        the bindings made since. Not the cache as it is now: the watch goes on while the pass does, and a pod whose
        deletion it brought meanwhile would be gone from the bound pods while the view still counts what it uses
        (a preemption's victim no longer leaving the node, its room looking taken: `k8s_holds.resume`). Nor is an
        assumed pod dropped mid-pass (`nodes_view` decided which were, as the pass began): it would be missing from
        what the pass reads later (preemption's victims, a pod group's bound members) while its view still counts
        it."""
        cached = self._pass_bound
        if cached is None:   # the pass's own list (every binding made before it), and the assumed ones it did not show
            return list(self._listed_bound)
        return [*cached.values(), *(v.usage for k, v in self._assumed.items() if k not in cached)]
