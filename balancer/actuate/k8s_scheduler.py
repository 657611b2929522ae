"""The optional secondary scheduler: binds Pending pods with `spec.schedulerName: gputide` to nodes.

`SecondaryScheduler` decides nothing itself: an injected `place(request, nodes_view) -> node name | None` picks
among the nodes that fit (`balancer.app.scheduling.EnginePlacer` is the placement engine's), and the pod is bound
through the Binding API. Reservations (node annotation `gputide.io/reserved-for`: a Migrate's, `k8s_holds`') are
honoured: a pod goes to a node reserved for it when it fits; what is reserved is not offered to other pods.

What it reads (the pending pods, nodes, bound pods, namespaces), from watch caches or lists, and how a pod just
bound is *assumed* until the caches show it, is `k8s_sched_reads` (`SchedulerReads`, whose methods the scheduler
has).

Within a pass the bindings are assumed the same way, into one view of the nodes: the filters run over all nodes
at once per pod (`k8s_filters.Offers`: the placement rules once per distinct set of rules in the pass, what is left
as numpy columns updated after each binding), and a `place` that has `start_pass(view)` (`EnginePlacer`) is asked
through the pass it returns: `place(request, offered_indices)`, and `bound(i)` after each binding the API accepted, so
it can keep one placement state for the whole pass instead of building one per pod.

Required pod affinity and anti-affinity, the pod's own and the bound pods' anti-affinity, are kube-scheduler's
InterPodAffinity filter (`k8s_podaffinity`), over the bound and assumed pods and those bound earlier in the pass;
a term's namespaceSelector is resolved against the namespaces' labels as the pass reads them (`k8s_namespaces`:
the watch's, else one list, only in a pass that has such a term; a pass that cannot read them leaves such pending
pods unplaced and reads such bound terms as covering every namespace).
A pod's hard topology spread constraints (`whenUnsatisfiable: DoNotSchedule`) are kube-scheduler's PodTopologySpread
filter over the same pods (`k8s_podaffinity.PodPlacement.spread_refusals`).
A pod is not bound where a host port it needs is taken (kube-scheduler's NodePorts: `k8s_reads.host_ports`
of the bound, assumed and pending pods; `k8s_filters.port_conflict`), and a pod bound in the pass takes its ports.
Preferred node and pod (anti-)affinity only weigh the nodes a pod fits: `place` is told them (`k8s_preferred`).
A pod that fits nowhere may preempt pods of lower priority (`k8s_preempt`; not a pod with pod affinity), or hold
a node once it has starved long enough (`k8s_holds`); the pods of a pod group are bound all together or none is
(`k8s_gang`). A pod's claims keep it to the nodes where its volumes can be attached or provisioned, and before
its Binding its unbound WaitForFirstConsumer claims are given its node (`k8s_volumes`, kube-scheduler's
VolumeBinding). Right before its binding a pod's node is looked at again, as the nodes cache (else a GET) shows it
now: one deleted, cordoned or tainted since the pass read it gets the pod no more, which waits for the next pass, and
the later pods of the pass keep off it (`k8s_sched_nodes`); a pod group's nodes are all looked at before its first
member is bound (one refusing binds none), and a member refused at its own binding stops the members after it.
What is read of pods and nodes is `k8s_reads`; the filters are `k8s_filters`; the Events and pod conditions that
tell a pod's owner what was done are `k8s_tell`.

Deadlines. However slow the API server, a pass keeps moving: its reads before the first pod end within `reads_s`
(2 minutes, `k8s_budget`; a pass out of time fails and the next one lists again), and each pod's turn (its claims,
binding, preemption or hold, Events; a pod group's own turn, then one per member) within `turn_s` (1 minute), the
last third kept for what completes or undoes a change already made (the reservation a binding used up, the nodes
the bound pod held elsewhere, one a failed preemption leaves, the Scheduled Event): the gateway cuts each try's timeout
to what is left and starts no call or retry that could not end in time (`_Api.deadline`). A pod out of time waits for
the next pass, as after any failed call. `progress(what)` is called as the reads and each turn begin:
`gputide schedule`'s liveness probe counts a pass of many pods as moving, and its limit follows from these two
figures (`turn_budget_s`).

Stopping. `stop()` (`gputide schedule` on SIGTERM) is checked where the Lease is (`halted()`): before each read of
the pass (pods, nodes, bound pods, namespaces, claims, volumes, classes: `k8s_sched_reads`, `k8s_volumes`), each
pod's turn (a pod group member's too), each claim's `selected-node` and each binding (again after its claims), each
eviction (again after its victim's read: `k8s_preempt`), and by the gateway before each retry: once stopped, a
failed call is not tried again (nor its backoff slept) but fails as out of retries (`_Api`'s `stopping`), save what
runs on a turn's reserve; a binding or a claim's node is not tried again once the
Lease is lost either (the call's `halt`). The read or turn in progress ends (a read with the try
or backoff in flight, a turn within its deadline), nothing more is begun. So a pass ends at most one turn after a
stop, or one read, and the scheduler's grace period (its Lease released after it) follows from those figures, not
from the pass's length (`gputide schedule`'s `stop_budget_s`).
A pod group stopped between its members keeps those bound, as when the Lease is lost or a binding fails (`k8s_gang`);
each member left unbound, and a pod whose binding the stop kept from beginning, gets a Normal `SchedulingDeferred`
Event saying the pass stopped and it waits for the next one (within `tell_s`, after the turn): `kubectl describe pod`
would otherwise show nothing of why it is still pending. After a Lease loss too: an Event decides nothing (no
binding, claim or reservation is written without the Lease), and the new leader's pass tells the pod its own news.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from balancer.actuate.k8s_bind import Binder
from balancer.actuate.k8s_budget import PASS_READS_DEADLINE_S, POD_DEADLINE_S
from balancer.actuate.k8s_filters import Offers, take, unschedulable, why_not
from balancer.actuate.k8s_gang import DEFERRED, deferred_message, groups, member_counts, missing, trial
from balancer.actuate.k8s_holds import Holds
from balancer.actuate.k8s_namespaces import Resolver
from balancer.actuate.k8s_podaffinity import PodPlacement
from balancer.actuate.k8s_preempt import model_allows, stop_labelled
from balancer.actuate.k8s_preferred import Preferred
from balancer.actuate.k8s_reads import (
    BOUND,
    Usage,
    node_facts,
    pod_usage,
    scheduler_watches,
    scheduling_request,
)
from balancer.actuate.k8s_sched_nodes import Changed
from balancer.actuate.k8s_sched_reads import (
    NODE_WAKE_S,
    Assumed,
    PassStopped,
    SchedulerReads,
    node_openings,
    start_timer,
)
from balancer.actuate.k8s_tell import Teller
from balancer.actuate.k8s_volumes import VolumeBinding, group_waiting, waiting
from balancer.actuate.k8s_watch import ListWatch
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    RESERVATION_ANNOTATION,
    DeadlineExceeded,
    _Api,
    k8s,
    parse_time,
)

log = logging.getLogger(__name__)
Json = dict[str, Any]
PlaceFn = Callable[[Json, list[Json]], "str | None"]
DEFERRED_TELL_S = 10.0   # telling them: one request timeout, a few hundred Events at the 1 s single-object SLO


@dataclass(slots=True)
class _Pass:
    """One pass's state: the nodes as the pass has them, its filters and placement session, what it decided."""

    view: list[Json]
    index: dict[str, int]
    offers: Offers
    session: Any
    results: dict[str, str | None]
    now: float
    members: Counter[str] | None = None   # bound pods per pod group, counted when a group first comes up
    stopped: str = ""                     # why it stopped (told to, the Lease lost): nothing more is bound this pass
    cut: list[Json] = field(default_factory=list)   # the pods of the turn it cut, left unbound: told so
    preferred: Preferred | None = None    # the pods' preferences over the nodes, once a pod has some
    changed: Changed = field(default_factory=Changed)   # nodes found gone or changed before a binding


class SecondaryScheduler(Binder, SchedulerReads):
    """Binds Pending pods with `spec.schedulerName == scheduler_name` to nodes chosen by `place` (module docstring).

    `place(pod_request, nodes_view) -> node name | None` gets plain dicts (see `scheduling_request` / `nodes_view`; each
    offered node also says `gpus_usable`: free GPUs less those held against every pod, `k8s_filters.usable_gpus`),
    so the placement engine stays free of Kubernetes types. A `place` with `start_pass(view)` is asked through the
    pass object it returns (module docstring); its answers must be what `place` would answer. `leading()` (a Lease
    elector's check, no I/O) is asked before each pod's placement and each binding: once False, the pass stops. So
    does `stop()` (`gputide schedule` on SIGTERM): the pass ends before its next pod or binding, never in the
    middle of one. The next pass that leads after a loss (or after `term()`, the elector's count of the times it
    took the Lease, moved on) begins a new term, reading afresh from the cluster what it knew of the reservations
    (`begin_term`).
    `emergency_stop()` says why the controller's emergency stop holds (None: it does not): no pod is then evicted
    for a preemption, nor on a node labelled `gputide.io/emergency-stop=true` (`k8s_preempt`). `hot_taint_key`: the
    controller's hot taint (its `hot_taint_key`), which pauses a preemption rather than ending it (`k8s_holds`)."""

    def __init__(self, api_client: k8s.ApiClient, scheduler_name: str = "gputide", place: PlaceFn | None = None,
                 *, reservation_annotation: str = RESERVATION_ANNOTATION, clock: Callable[[], float] = time.time,
                 max_retries: int = 3, backoff_s: float = 0.5, sleep: Callable[[float], None] = time.sleep,
                 watch: bool = False, watch_s: float = 300.0, assume_s: float = 30.0, retell_s: float = 600.0,
                 min_tell_s: float = 60.0, preemption: bool = True, starving_s: float = 600.0,
                 leading: Callable[[], bool] = lambda: True, term: Callable[[], int] = lambda: 0,
                 turn_s: float = POD_DEADLINE_S, reads_s: float = PASS_READS_DEADLINE_S,
                 deadline_clock: Callable[[], float] = time.monotonic,
                 progress: Callable[[str], None] = lambda what: None, node_wake_s: float = NODE_WAKE_S,
                 emergency_stop: Callable[[], str | None] = lambda: None, hot_taint_key: str = HOT_TAINT_KEY) -> None:
        if place is None:
            raise ValueError("SecondaryScheduler needs a place(pod_request, nodes_view) function")
        self._stop = threading.Event()  # `stop()`: no pod is begun or bound, no failed call retried any more
        self.api = _Api(api_client, max_retries, backoff_s, sleep, 10.0, deadline_clock, stopping=self._stop.is_set)
        self.turn_s, self.reads_s, self.progress, self.tell_s = turn_s, reads_s, progress, DEFERRED_TELL_S
        self.scheduler_name, self.place, self.clock, self.leading = scheduler_name, place, clock, leading
        self.term = term   # the elector's count of terms: a new one drops what the last one knew (`begin_term`)
        self.reservation_annotation = reservation_annotation
        self.pending_selector = f"spec.schedulerName={scheduler_name},status.phase=Pending,spec.nodeName="
        self.assume_s = assume_s
        self.tell = Teller(self.api, scheduler_name, clock, retell_s, min_tell_s)   # Events, pod conditions
        self.latencies: list[float] = []   # the last pass: seconds from each bound pod's creation to its binding
        self.oldest_pending_s = 0.0        # the last pass: age of the oldest pod it left pending
        self.reasons: dict[str, str] = {}  # the last pass: why each pod it left pending waits
        self._assumed: dict[str, Assumed] = {}   # pod -> a binding the bound-pod cache has not shown yet
        self.holds = Holds(self.api, scheduler_name, reservation_annotation, clock, preemption=preemption,   # nodes
                           starving_s=starving_s, halted=self.halted, hot_taint_key=hot_taint_key)   # held for pods
        #                                                                                   that preempt or starve
        self.holds.preemptor.emergency_stop = emergency_stop   # why no pod may be evicted now (`k8s_preempt`)
        self._listed_bound: list[Usage] = []   # without a synced watch: the bound pods the pass listed, and the
        #                                        assumed ones it did not show
        self.work = threading.Event()   # set when a pending pod changed (watch), a node opened, or by `wake`
        self.node_wake_s, self.wake_timer, self._wake_lock = node_wake_s, start_timer, threading.Lock()
        self._snapshots: dict[str, tuple[int, dict[str, Any]]] = {}
        self._usage_memo: tuple[int, tuple[dict, dict]] | None = None
        self.volumes = VolumeBinding(self.api, watch=watch, watch_s=watch_s)   # claims, volumes, classes
        self.watches: dict[str, ListWatch] = {} if not watch else {**scheduler_watches(
            self.api, scheduler_name, self.pending_selector, reservation_annotation, watch_s, self.work),
            **self.volumes.watches}
        if "nodes" in self.watches:   # a node that opens wakes a pass (`k8s_sched_reads`: `node_openings`)
            self.watches["nodes"].on_change(node_openings(self.node_opened))

    @property
    def turn_budget_s(self) -> float:
        """The longest the scheduler goes between two `progress` calls, or from one to a pass's end, when the API
        server is slow (the module docstring's deadlines); the placement itself takes milliseconds a pod."""
        return max(self.turn_s, self.reads_s)

    @contextmanager
    def _turn(self, what: str) -> Iterator[None]:
        """One pod's turn (or a group's): `progress` told, every API call in it within `turn_s`."""
        self.progress(what)
        with self.api.deadline(self.turn_s):
            yield

    def stop(self) -> None:
        """Stop the pass in progress before its next read, pod or binding (the turn in progress ends, within
        `turn_s`; a read in progress, with its try in flight: no call is retried), start no other, and wake
        `wait_for_work`. From any thread, or a signal handler."""
        self._stop.set()
        self.wake()

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called: nothing more is bound."""
        return self._stop.is_set()

    @property
    def retell_s(self) -> float:
        """How long before the same reason is told a pod again (`k8s_tell`)."""
        return self.tell.retell_s

    @property
    def min_tell_s(self) -> float:
        """How long before a new reason is told a pod (`k8s_tell`)."""
        return self.tell.min_tell_s

    @property
    def preempted(self) -> list[tuple[str, str]]:
        """The last pass: (victim, node) of each preemption started."""
        return self.holds.preempted

    @property
    def starving(self) -> list[tuple[str, str]]:
        """The last pass: (pod, node) of each starving pod given a node to hold."""
        return self.holds.starving

    @property
    def stuck_holds(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """The last pass: (pod, node, victims) of each preemption's hold kept past the hour for victims stuck
        terminating there (`k8s_stuck`)."""
        return self.holds.stuck

    # ---- one pass -----------------------------------------------------------------------------------------

    def schedule_once(self) -> dict[str, str | None]:
        """One pass: bind every pending pod of this scheduler that fits somewhere. Returns {pod: node or None};
        `latencies` and `oldest_pending_s` say how long the bound pods waited and the oldest left pending has,
        `reasons` why each pod left pending waits. A pod bound by someone else or deleted meanwhile is left out.
        Each pod left pending gets a FailedScheduling Event and the condition PodScheduled=False/Unschedulable
        saying why (as kube-scheduler reports it: `kubectl describe pod` shows it, and the cluster autoscaler
        scales up for such pods), again when the reason changes (at most every `min_tell_s`) or `retell_s` has
        passed; a bound pod gets a Scheduled Event."""
        self.latencies, self.oldest_pending_s, self.reasons = [], 0.0, {}
        self.begin_term()
        self.holds.start_pass(self._bound)
        self.progress("a pass's reads")
        try:
            pending, ps = self._read_pass()
        except PassStopped as stopped:   # told to stop, or the Lease lost: the read in flight was the last
            log.warning("scheduler %s: %s: %s, this pass binds nothing", self.scheduler_name, self.why_halted, stopped)
            return {}
        if ps is None:   # nothing to place
            return {}
        gangs, done = groups(pending), set()
        for req in pending:
            if not self._leads(ps):
                break
            if not req["group"]:
                with self._turn(f"pod {req['name']}"):
                    self._place_one(req, ps)
            elif req["group"] not in done:   # a group comes up at its most important member's turn
                done.add(req["group"])
                self._place_group(gangs[req["group"]], ps)
        self._tell_deferred(ps, gangs)
        return ps.results

    def _read_pass(self) -> tuple[list[Json], _Pass | None]:
        """The pass's reads: its pending pods, and (only when there are some) what the pass is made of; each read
        begun only while not `halted()` (else `PassStopped`). A pass with some forgets, before anything is judged in
        it, the pods warned of for an unreadable `deletionTimestamp` that are no longer such among its bound pods
        (gone, or readable again: `UnreadEnds.keep`), the list its placement is then given. Forgotten only as they
        were grouped for preemption (a pass where some pod fits nowhere), a pod read again by passes where every pod
        fits, then broken again, was never warned of again. A pass with none returns before reading the bound pods,
        so a pod fixed and broken again only while nothing is pending is not warned of again."""
        with self.api.deadline(self.reads_s, reserve_s=0.0):   # out of time: the pass fails, the next one reads again
            pending = self.pending()
            self.tell.keep(r["name"] for r in pending)
            if not pending:   # nothing to place: no need to read every node and bound pod
                return pending, None
            resolver = Resolver(self.namespace_labels)   # the namespaces read only if a term has a namespaceSelector
            pending = [resolver.request(r) for r in pending]
            self.volumes.start_pass(pending, self.halted)
            view = self.nodes_view()
            self.holds.preemptor.stopped_nodes = frozenset(n["name"] for n in view if stop_labelled(n))
            self.holds.release_gone(view, {r["name"] for r in pending})   # holds for pods that wait no more
            bound = self._bound()
            self.holds.preemptor.unread_ends.keep(bound)
            return pending, _Pass(
                view, {n["name"]: i for i, n in enumerate(view)},
                Offers(view, PodPlacement(view, bound, resolver.term)),
                self.place.start_pass(view) if hasattr(self.place, "start_pass") else None, {}, self.clock())

    def _place_one(self, req: Json, ps: _Pass) -> None:
        """Bind `req` where the placement policy (or its own reservation) says, or tell it why it waits."""
        req = self.volumes.request(req)
        if why := waiting(req, len(ps.view)):   # its claims are not ready: no node considered, no one preempted
            self._left_pending(req, why, ps)
            return
        fitting = ps.offers.fitting(req)
        offered = ps.changed.offered(req, fitting)   # less the nodes found changed before a binding in the pass
        reserved = ps.offers.reserved_for(req)
        target = reserved["name"] if reserved else self._choose(req, ps, offered)
        i = ps.index.get(target) if target else None
        if i is None or why_not(ps.view[i], req) is not None or not ps.offers.fits(i):
            why = unschedulable(ps.offers.reasons(), req, len(offered))
            if len(offered) < len(fitting):   # it fitted nodes that changed since: no one preempted, the next pass
                why += ps.changed.said(fitting)   # reads them again
            elif not any(model_allows(ps.view[j], req) for j in offered):   # no room on a GPU model it may use
                why += self.holds.for_unplaced(req, ps.view, ps.index, ps.offers, ps.now)
            self._left_pending(req, why, ps)
            return
        self._commit(req, i, ps)

    def _place_group(self, members: list[Json], ps: _Pass) -> None:
        """A pod group's pending members: all bound together, or none (balancer/actuate/k8s_gang.py). The group's
        decision is one turn, each member's binding (or telling) another."""
        with self._turn(f"pod group {members[0]['group']}"):
            if ps.members is None:
                ps.members = member_counts(self._bound())
            running = ps.members[members[0]["group"]]
            members = [self.volumes.request(m) for m in members]
            least = max(m["group_min"] for m in members)
            joining = bool(least and running >= least)   # the gang runs already: more members join one by one
            chosen, why = {}, None if joining else missing(members, running) or group_waiting(members, len(ps.view))
            if not joining and why is None:
                chosen, why = trial(members, ps.view, self.place, ps.offers.pods.copy())
                if why is not None:   # enough members, not enough room: a group that waited too long holds nodes
                    why += self.holds.hold_for_starving_group(members, ps.view, ps.index, ps.offers, ps.now)
                else:
                    why = self._group_refusal(members, chosen, ps)
        for k, m in enumerate(members):
            if not self._leads(ps):   # a member's turn is a pod's: none begun once stopped or the Lease is lost
                ps.cut += members[k:]
                break
            with self._turn(f"pod {m['name']}"):
                if joining:
                    self._place_one(m, ps)
                elif why is not None or (why := self._no_longer_fits(m, chosen[m["name"]], ps)) is not None:
                    self._left_pending(m, why, ps)   # and the members after it: none bound on top of another pod
                elif refused := self._commit(m, chosen[m["name"]], ps):   # changed since `_group_refusal`'s look:
                    why = (f"pod group {m['group']}: {refused} (at member {m['name']}'s binding): the members not "
                           "bound yet wait for the next pass.")   # none bound after it

    def _group_refusal(self, members: list[Json], chosen: dict[str, int], ps: _Pass) -> str | None:
        """Why none of a pod group's members is bound: a node the trial placed one on is gone, or refuses it now
        (`_node_refusal`), looked at for every member before the first binding (each node once). Found at one
        member's binding, after others were bound, the group would be left partly bound: those holding their
        nodes, the rest waiting for a node that refuses them (a cordon: until it is lifted)."""
        nows: dict[int, Json | None] = {}
        for m in members:
            i = chosen[m["name"]]
            if i not in nows:
                nows[i] = self._node_now(i, ps)
            if why := ps.changed.why(i, ps.view[i], nows[i], m):
                log.info("scheduler %s: pod group %s not bound: %s", self.scheduler_name, m["group"], why)
                return (f"pod group {m['group']}: {why} (member {m['name']}'s node): no member is bound, the "
                        "group waits for the next pass.")
        return None

    @staticmethod
    def _no_longer_fits(member: Json, i: int, ps: _Pass) -> str | None:
        """Why a pod group's `member` no longer fits node i, where the group's trial placed it (None: it does). The
        trial counted the members before it where it placed them; one bound meanwhile by someone else (a binding
        answered 409: another replica's, in flight as it lost the Lease) is counted where it runs, which may be this
        member's node: bound there too, the two would take more than the node has."""
        ps.offers.fitting(member)
        if ps.offers.fits(i):
            return None
        return (f"pod group {member['group']}: member {member['name']} no longer fits {ps.view[i]['name']}, where "
                f"the group was placed ({ps.offers.reasons()[i]}: a member was bound elsewhere than planned, by "
                "someone else): the members not bound yet wait for the next pass.")

    def _left_pending(self, req: Json, why: str, ps: _Pass) -> None:
        created = parse_time(req["created"])
        ps.results[req["name"]] = None
        self.oldest_pending_s = max(self.oldest_pending_s, ps.now - created if created else 0.0)
        self.reasons[req["name"]] = why
        self.tell.unschedulable(req, why)

    def _commit(self, req: Json, i: int, ps: _Pass) -> str | None:
        """Bind `req` to node i of the pass and count it there (the filters and the placement state too), its
        claims given the node first (none given: not bound this pass). Not once stopped or the Lease is lost.
        Why its node refused it (`_node_refusal`: gone, cordoned, tainted since the pass read it), else None."""
        if not self._leads(ps):
            ps.cut.append(req)
            return None
        if why := self._node_refusal(req, i, ps):
            self._left_pending(req, f"{why}; it waits for the next pass.", ps)
            return why
        why = self.volumes.prebind(req, ps.view[i]["name"], self.halted)
        # asked again right before the binding: the Lease may have lapsed while its claims were given the node (a
        # slow PATCH), and a binding written without it may put the pod where the next leader places another
        if not self._leads(ps):   # told with the pods the stop left unbound
            ps.cut.append(req)
            return None
        if why:
            ps.results[req["name"]], self.reasons[req["name"]] = None, why
            self._failed(req, why)
            return None
        bound = self._bind(req, ps.view[i])
        if bound is None:   # bound by someone else, or deleted: the nodes it held are held for no one
            with self.api.reserve():
                self.holds.release_elsewhere(req, -1, ps.view, ps.offers)
            self._count_elsewhere(req, ps)
            return None
        ps.results[req["name"]] = bound or None
        if not bound:
            if self.bind_unsure:   # it may be bound there (`k8s_bind`): assumed there, and counted in the pass's view
                self._count_on(req, i, ps)
            if not self._leads(ps):   # the Lease lost (or stopping) in the binding's retries: told as a cut pod
                ps.cut.append(req)
            elif not isinstance(self.bind_failure, DeadlineExceeded):   # out of time: its turn is over, the
                self._failed(req, self.reasons.get(req["name"], "Binding rejected"))   # reserve is not for Events
            return None
        ps.offers.update(i, req)   # and counted where pods run, for pod affinity
        if ps.session is not None:
            ps.session.bound(i)
        with self.api.reserve():   # the binding is made: what follows it may use the turn's reserve
            self.holds.release_elsewhere(req, i, ps.view, ps.offers)
            self.tell.scheduled(req, bound)
        created = parse_time(req["created"])
        if created:
            self.latencies.append(max(ps.now - created, 0.0))
        return None

    def _node_refusal(self, req: Json, i: int, ps: _Pass) -> str | None:
        """Why `req` is no longer bound to node i: gone, or its rules refuse the pod now (`_node_now`); None when it
        may be."""
        why = ps.changed.why(i, ps.view[i], self._node_now(i, ps), req)
        if why:
            log.info("scheduler %s: %s not bound: %s", self.scheduler_name, req["name"], why)
        return why

    def _node_now(self, i: int, ps: _Pass) -> Json | None:
        """Node i of the pass as the nodes cache shows it now, else as a GET of it says (none after one failed in the
        pass: `Changed.look`); None: gone."""
        name = ps.view[i]["name"]
        return ps.changed.look(ps.view[i], self._cached("nodes"), lambda: node_facts(
            self.api(f"node {name}", self.api.core.read_node, name, retries=0, halt=self.halted),
            self.reservation_annotation))

    def _failed(self, req: Json, why: str) -> None:
        """A pod whose claims could not be given its node, or whose binding failed: a Warning `FailedScheduling`
        Event saying so, as kube-scheduler posts one for a failed PreBind or Bind, so `kubectl describe pod` does not
        show only the last pass's `Unschedulable` (or nothing). Its PodScheduled condition is left as it was: an
        API error is no lack of room for the cluster autoscaler to scale up for. Best effort, on the turn's
        reserve."""
        with self.api.reserve():
            self.tell.event(req, "Warning", "FailedScheduling", why)

    def _count_elsewhere(self, req: Json, ps: _Pass) -> None:
        """A pod someone else bound meanwhile (`_bind` assumed it where it runs) takes its share of that node for
        the rest of the pass too: the next pod is not bound on top of it."""
        assumed = self._assumed.get(req["name"])
        j = ps.index.get(assumed.usage.node) if assumed else None
        if j is not None:
            self._count_on(req, j, ps)

    @staticmethod
    def _count_on(req: Json, j: int, ps: _Pass) -> None:
        """`req` takes its share of node j of the pass (the filters and the placement state too)."""
        take(ps.view[j], req)
        ps.offers.update(j, req)
        if ps.session is not None:
            ps.session.bound(j)

    def _leads(self, ps: _Pass) -> bool:
        """Whether the pass may begin a pod or a binding: not once stopped (`stop()`) or the Lease is lost."""
        if not ps.stopped and self.halted():
            ps.stopped = self.why_halted
            log.warning("scheduler %s: %s: this pass binds nothing more", self.scheduler_name, ps.stopped)
        return not ps.stopped

    def _tell_deferred(self, ps: _Pass, gangs: dict[str, list[Json]]) -> None:
        """A `SchedulingDeferred` Event on each pod the stop left unbound in the turn it cut (module docstring),
        all within `tell_s` (best effort, as every Event)."""
        if not ps.cut:
            return
        self.progress(f"telling {len(ps.cut)} pods the pass stopped")
        with self.api.deadline(self.tell_s, reserve_s=0.0):
            for req in ps.cut:
                self.tell.event(req, "Normal", DEFERRED, deferred_message(self.scheduler_name, ps.stopped, req,
                                                                          gangs.get(req["group"]), ps.results))

    def _choose(self, req: Json, ps: _Pass, offered: Any) -> str | None:
        """What `place` (or the pass's session) picks among the nodes `offered` (indices into the pass's view),
        told how much the pod prefers each (`k8s_preferred`)."""
        if req.get("preferences"):
            ps.preferred = ps.preferred or Preferred(ps.view, ps.offers.pods)
            req = ps.preferred.request(req, offered)
        if ps.session is not None:
            return ps.session.place(req, offered)
        return self.place(req, [ps.view[i] for i in offered])


__all__ = ["BOUND", "PlaceFn", "SecondaryScheduler", "node_facts", "pod_usage", "scheduling_request"]
