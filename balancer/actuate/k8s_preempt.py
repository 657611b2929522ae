"""Preemption for the secondary scheduler: a pending pod that fits no node takes the place of pods of lower priority,
as kube-scheduler's DefaultPreemption does, with two differences that keep it safe:

* victims are **evicted through the Eviction API**, so a PodDisruptionBudget is never broken (kube-scheduler
  deletes them, and only prefers nodes where no budget is broken); a node where room would need a disruption a
  budget does not allow is no candidate at all;
* the node is **held for the preemptor by a reservation** of its GPUs, CPU, memory, host ports and extended
  resources (node annotation `gputide.io/reserved-for`, the one a Migrate writes), which every replica of the
  scheduler honours and which survives a restart, instead of kube-scheduler's in-memory nominated pods. As a
  nominated pod is, it is held only against pods of equal or lower priority: it records the pod's priority
  (`k8s_filters.counts_against`; one that does not, written by an older gputide, is held against every pod until a
  pass carries its preemption on and writes it, `ranked`, at the latest before it is kept past the hour; one that
  names no host ports or extended resources holds none of them until then, nor one written for an earlier pod of
  its name those it asks now, `filled`). The pod also gets
  `status.nominatedNodeName`, as kube-scheduler sets it.

When: a pod left pending that no node fits by its resources, while its own rules allow some (GPUs, CPU, memory or
pod slots are short there), whose `preemptionPolicy` is not `Never`, and that holds no live reservation already
(its victims are still terminating: it waits for them rather than preempting again). Only nodes of a GPU model the
pod may run on (`gputide.io/gpu-spec`: `model_allows`) count, both as room and as candidates.

Which: `balancer.plan.preemption.choose` over those nodes with the pods bound to each (their priority, requests,
start time and the budgets that cover them; budgets are read only when a preemption is considered; one with a
null selector covers no pod, as in policy/v1, while an empty one covers its whole namespace). Only pods of
lower priority are ever victims, and as few and as unimportant as the node allows. A pod terminating already
(`deletionTimestamp`: its owner deleting it, or an earlier eviction) is none, whatever its priority: its room is
counted as coming (`room_coming`), and a node where it suffices needs no victim; the pod waits there for it
(`Preemption.awaiting`), held and nominated as for victims found terminating (the reservation names them, `EVICTED`,
and which of them it only waits for, `AWAITED`), as kube-scheduler's PodEligibleToPreemptOthers does not preempt
again while a pod terminates on the preemptor's nominated node. Its room is coming only until its grace ends
(`deletionTimestamp`, the deletion's time plus its grace) and `GRACE_SLACK_S` more: past that it is stuck (a
finalizer no one removes, a kubelet that hangs), and the pod plans as though it stayed (a pod stuck for ever pinned
a more important pod to its node for ever, which before preempted elsewhere); nor while its grace ends beyond the
hour a hold lasts (`MAX_HOLD_S`: its owner deleted it with a grace of a day, and the pod waited all day, its hold
lapsing and made again every hour); nor is the room of a pod made again on its node (a DaemonSet's, a static pod's
mirror: `Usage.comes_back`) coming. A hold that only waits for a pod is given back once that pod's room is not
coming (`k8s_holds`: stuck past its grace, or, a victim its eviction found its owner deleting, made again there or
its grace ending after the hour), said why, and the pod plans afresh; a victim evicted for the pod, stuck, keeps
its hold past the hour (`k8s_stuck`: it was killed for that node). A node labelled with the per-node emergency stop
stays a candidate for the room of its terminating pods alone (none of its pods a victim there: where that room does
not suffice, it is no candidate).

Then: reserve the node's GPUs, CPU, memory, host ports and extended resources for the pod, the reservation naming
every victim still to evict (`victims`) before the first is evicted; evict each victim (read first, for its grace
period) with an Event `Preempted` on it ("Preempted by <pod> on node <node>"); write down what is left (`noted`),
set the pod's nominated node. The holds this scheduler made there for pods of lower priority are given back, and
those pods' nominations cleared (`lower_holds`, `k8s_holds`), as kube-scheduler clears lower-priority nominations on
the node it preempts on: the preemptor counted their room as its own, and they plan afresh. A later pass binds the
pod once the victims are gone. So the reservation always says what is left to do: whichever replica leads next (this
one in a later term too, having read it again) carries the preemption on (`resume`) or gives the node back
(`k8s_holds.release_gone`), even when the Lease was lost between two evictions.

How long: a victim's own grace period (`terminationGracePeriodSeconds`, 30 min for a training job that checkpoints)
may outlast `reserve_s` (5 min): the node is held until the last victim's grace period ends and a minute more
(`GRACE_SLACK_S`), at least `reserve_s`, and renewed by `reserve_s` while the evicted victims (`evicted`) are still
there as it runs out, never past `MAX_HOLD_S` (an hour) from the preemption's start (`since`), save for victims
stuck terminating (`k8s_stuck`: still there, terminating, on a node that still admits the pod, the hold is kept
`reserve_s` at a time, and said). Once they are all gone the pod has `reserve_s` at most to be bound there; bound,
or no longer waiting, the node is given back at once.

Never while the controller's emergency stop holds (`stop_reason`: `gputide schedule --emergency-stop-file` exists
or cannot be looked at, `--controller-policy` sets `spec.safety.emergencyStop` or cannot be read), nor on a node
labelled `gputide.io/emergency-stop=true` (`stop_labelled`): no node is reserved for such a preemption and no pod
is evicted, asked again before each victim (`EvictionsStopped`, a failed eviction: a preemption half done keeps its
node held and resumes once the stop is lifted). Binding pods onto free room and holding nodes for starving pods go
on: they disrupt nothing.

If an eviction fails before any victim was evicted, the reservation is released and the pod is told why, unless that
eviction got no answer (it may have landed: `Evictions.unanswered`) or a victim left after an earlier one that got
none (`Evictions.went`): the node is then kept held for the next pass to judge it; once some
were, the node stays held for the pod while they terminate (given back, their room would go to whoever came
first), and each later pass evicts the victims left until none is left, the pod no longer waits or the reservation
expires, after which the pod plans afresh with the room already made. Each such pass first asks whether its victims
still make room for it there (`makes_room`): a pod of higher priority may have been bound in the room made (the
hold is not held against it), or hold it; then none is evicted any more, the node is given back and the pod's
nomination cleared (`k8s_holds`), and it plans afresh at the next pass. An eviction that got no answer (a timeout, a
connection reset; or a retry's 404 or 409 after such a try) may have landed: where the preemption goes on, its victim
is left to evict, remembered by uid for the rest of the preemption in the replica's term (`Doubt.uid`); found
terminating or gone by a later pass (not finished on its own), it is counted and said as evicted, with its Event
`Preempted` (`Evictions`), while a victim the replica never asked to evict is not. A victim whose evictions get no
answer `UNANSWERED_ASKS` times in the preemption, found running after each, is not asked again: with nothing else
leaving, the node is given back, and the pod does not preempt that victim there for `reserve_s` (`Preemptor.resume`;
that pod by its uid: one made again under its name, a StatefulSet's or a Job's retry, weighs every victim afresh; and
that victim by its uid: one made again under its name was never asked, `_passed`);
each such eviction renews the hold by `reserve_s` while it awaits its verdict (`Evictions.holding`), so that the hold
outlasts passes less than `reserve_s` apart that count them (refusals alone for `reserve_s` let it lapse, and the count
with it: a later preemption counts afresh). An answered refusal between them (429: a budget, or
throttling) does not begin the count again: it says nothing of whether they landed, and counted "in a row" the
unanswered ones renewed the hold up to the hour's cap. They are counted by the victim's uid: a pod made again under
its name (a StatefulSet's) starts its own count (`Preemptor._asks`; one record per victim: `k8s_preempt_doubts`).

Whose deletion: a victim in doubt found gone (404) is counted, as above: nothing left tells who deleted it. One found
terminating (`deletionTimestamp`) says more where the cluster marks disruptions (PodDisruptionConditions: beta and on
by default since Kubernetes 1.26, GA and always on since 1.31): the Eviction API gives the pod the condition
`DisruptionTarget` (status "True", reason `EvictionByEvictionAPI`) before it deletes it. With that condition it is
counted (an eviction landed; another client's eviction, a `kubectl drain`, cannot be told from ours, as before);
with a `DisruptionTarget` of another reason (`PreemptionByScheduler`, `DeletionByTaintManager`, `DeletionByPodGC`,
`TerminationByKubelet`) it is not (said at info): another disruption deleted it. With none, it is not counted only
where this cluster is known to mark evictions (`Preemptor.marks_evictions`): learned once a victim this replica reads
terminating (in doubt or not) carries `EvictionByEvictionAPI`, for the API server sets it, so that one terminating
without it was deleted by its owner (a Deployment scaled down, a Job finished, a `kubectl delete`); or set by the
caller. It is kept for the process's life, a property of the API server rather than of a term (one downgraded below
1.26, or its gate turned off, is noticed at the next start only). Until then a pod terminating without one is
counted, as before: a cluster older than 1.26, or one with the gate off, never marks any, and there its owner's
deletion within the doubt's window cannot be told from the eviction landing. A landed eviction whose mark a later
disruption replaced (Pod garbage collection force-deleting it after its node was deleted) goes uncounted: the pod
keeps one `DisruptionTarget`, the last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from balancer import catalog
from balancer.actuate import k8s_filters
from balancer.actuate.k8s_actuator import post_event
from balancer.actuate.k8s_filters import (  # LEFT, EVICTED: a preemption's hold fields naming its victims
    CPU,
    EVICTED,
    EXTENDED,
    HOST_PORTS,
    LEFT,
    MEMORY,
    PRIORITY,
    counts_against,
    others_held,
    short,
    unlisted_amount,
)
from balancer.actuate.k8s_jobs import EVICTED_CONDITION
from balancer.actuate.k8s_migrate import eviction
from balancer.actuate.k8s_nodes import annotation_map_change, same_json
from balancer.actuate.k8s_preempt_doubts import NEVER, Doubts
from balancer.actuate.k8s_workloads import disruption_budget
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    HOT_UNTIL_ANNOTATION,
    MERGE_PATCH,
    ConflictError,
    NotFoundError,
    _Api,
    parse_time,
    rfc3339,
)
from balancer.errors import ActuationError
from balancer.noderules import Selector
from balancer.plan.preemption import Preemption, Running, choose
from balancer.safety import EMERGENCY_LABEL

log = logging.getLogger(__name__)
Json = dict[str, Any]
HOLDER = "scheduler"   # a reservation's field naming the scheduler that holds the node for a pod of its own
SINCE = "since"        # a preemption's hold field (beside LEFT, EVICTED): when it began; held no longer than max_hold_s
# a preemption's hold field: those of `EVICTED` it only waits for (`Preemption.awaiting`, and the victims its
# evictions found terminating already, `Preemptor.preempt`: never evicted for it), said "waited for", not "evicted
# for it" (`k8s_stuck`). A hold without it (an older gputide's) names them in `EVICTED` alone, read as victims
AWAITED = "awaited"
DEFAULT_GRACE_S = 30.0   # a pod's terminationGracePeriodSeconds when its spec sets none (the API server's default)
# after a victim's grace period: the kubelet's kill, the watch, the pass that binds. It also absorbs the skew
# between the API server's clock, which sets `deletionTimestamp`, and this scheduler's (`clock()`, what it is
# compared with: `room_coming`, `k8s_stuck`): taken to agree within ordinary NTP skew (a second or so, at most a
# few). A scheduler clock minutes ahead takes a pod as stuck before its grace ends (the pod plans as though it
# stayed), one minutes behind waits for it that much longer
GRACE_SLACK_S = 60.0
MAX_HOLD_S = 3600.0      # the longest a preemption holds a node, however long its victims' grace periods
UNANSWERED_ASKS = 3      # evictions of one victim, each unanswered and found not landed, before its node is given back
# how long an eviction that got no answer may still land at the API server: twice its default request timeout (60 s,
# --request-timeout). A victim read running later than that after its last unanswered eviction was not evicted by it
IN_FLIGHT_S = 120.0
BY_EVICTION_API = "EvictionByEvictionAPI"   # the reason of the DisruptionTarget the Eviction API gives a pod it deletes


class EvictionsStopped(ActuationError):
    """No pod is evicted for a preemption: the controller's emergency stop holds (the module docstring)."""


class EvictionUnanswered(ActuationError):
    """A victim's eviction got no answer `UNANSWERED_ASKS` times, each found not landed by the next pass's read of it
    (still running): it is not asked again, and `Preemptor.resume` gives the node back (`Evictions.give_back`)."""


def unread_error(victim: str, err: ActuationError) -> ActuationError:
    """The error of a pass that could not read `victim`, whose eviction got no answer earlier (`Doubt.uid`),
    to tell whether that eviction landed (`err`: the read's): it is read again at the next pass, not evicted."""
    return ActuationError(f"cannot read {victim} to tell whether its unanswered eviction landed: {err}")


def disruption(pod: Json) -> str | None:
    """The reason of `pod`'s condition `DisruptionTarget` with status "True" (what deletes it: `BY_EVICTION_API`,
    `PreemptionByScheduler`, ...; "" where it names none), None where it has no such condition (module docstring)."""
    for c in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == EVICTED_CONDITION and c.get("status") == "True":
            return str(c.get("reason") or "")
    return None


def _passed(passed: Mapping[tuple[str, str], tuple[float, str]], node: str, bound: Any) -> bool:
    """Whether the pod `bound` (`k8s_reads.Usage`) on `node` is passed over (`passed`: `Preemptor._passed_over`): only
    the pod of the uid whose evictions went unanswered (`_same_pod`)."""
    return (node, bound.key) in passed and _same_pod(passed[node, bound.key][1], bound)


def _same_pod(uid: str, bound: Any) -> bool:
    """Whether `bound` (`k8s_reads.Usage`) is the pod of `uid` whose evictions went unanswered (a pass-over's). One
    deleted and made again under its name since (a StatefulSet's) was never asked; matched by name, it was passed
    over and said "after 3 unanswered evictions". Matched by name where either was read without a uid."""
    return not uid or not bound.uid or uid == bound.uid


def stop_labelled(node: Json) -> bool:
    """Whether `node` (as `k8s_reads.node_facts` has it) carries the controller's per-node emergency stop,
    `gputide.io/emergency-stop=true` in any case, as the safety guard reads it."""
    return str((node.get("labels") or {}).get(EMERGENCY_LABEL, "")).lower() == "true"


@dataclass(slots=True)
class Evictions:
    """What a preemption's evictions did: the victims evicted, found terminating already (not evicted again: an
    earlier term's eviction, the Lease lost before it was written down, or their owner deleting them), found gone
    already, and left (from the one that failed, or where `halted()` stopped them, on; in `Preemptor.resume` also
    those below that cannot be read now, the read's error theirs unless an eviction failed), the error that stopped
    them, the reservation holding the node for the pod afterwards, and when the grace periods of the victims evicted
    or terminating end. Those terminating already were counted and said as evicted (`k8s_holds`: `preempted`,
    gputide_scheduler_preempted_pods_total, pods evicted through the Eviction API), though no eviction was made.

    `evicted` also holds the victims whose eviction this replica asked earlier in the preemption (this term) and that
    may have landed unseen (`Doubt.uid`: every try unanswered, a timeout or a connection reset; or a retry
    answered 404 or 409 after such a try, what a landed try leaves), found now terminating (the pod it asked to
    evict, by uid) and not found deleted by another, or gone: their eviction landed, so they are counted and said
    evicted, with their Event `Preempted`. They were not: left to evict, they were found terminating (`terminating`)
    or gone (dropped unsaid) by the next pass, so the preemption counted fewer pods than it evicted. Those found gone
    are in `went` too (nothing to wait for). One found finished on its own (Succeeded, Failed), or made again under
    its name (another uid), was not evicted by that eviction: it is forgotten, uncounted; so is one found terminating
    that `Preemptor._landed` finds deleted by another (its `DisruptionTarget` another disruption's, or none where
    this cluster is known to mark evictions; the module docstring), said at info and, read among the victims to
    evict, waited for as one terminating already (`terminating`). One found still running stays in doubt until an
    eviction of it is sent again (that eviction may still be in flight: `Preemptor._evict_one`)."""

    evicted: list[str] = field(default_factory=list)
    terminating: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)
    error: ActuationError | None = None
    entry: Json = field(default_factory=dict)
    ends: list[float] = field(default_factory=list)   # when the grace period of each victim leaving ends
    went: list[str] = field(default_factory=list)   # of `evicted`: gone already, their earlier eviction unanswered
    # of `left`: the victim whose eviction, asked now, got no answer (or a retry's 404 or 409), judged by the next pass
    unanswered: list[str] = field(default_factory=list)
    # of `left`: their unanswered eviction not judged (the read failed; `Preemptor.resume`: no longer running, or
    # `_evict`: running as the pass saw it), their doubt kept: the next pass reads them first
    unread: list[str] = field(default_factory=list)
    # `Preemptor.resume`: a victim's evictions went unanswered `UNANSWERED_ASKS` times while it ran on, nothing else
    # leaves: the node is to be given back (`k8s_holds`), the reservation (`entry`) not written again
    give_back: bool = False

    def holding(self, now: float) -> list[float]:
        """Until when the evictions keep the node held (`noted`'s `ends`): the grace periods of the victims leaving
        (`ends`), and `now` where an eviction asked now got no answer (`unanswered`): awaiting its verdict, it renews
        the hold by `reserve_s`, as one that landed would. Unrenewed (nothing known leaving), the hold ran out
        `reserve_s` after the preemption began, and with it the count of unanswered asks (`Preemptor.held`): with
        passes 100 s or more apart the 4th pass, which gives the node back, came after it, and the pod preempted
        afresh, asking again unanswered, for ever. Renewed only by a new unanswered ask, at most `UNANSWERED_ASKS`
        of a victim in the preemption (an answered refusal between them does not begin the count again:
        `Preemptor._ask`) before it is asked no more, it holds the node no longer than that (`reserve_s` past the
        last, where nothing else leaves)."""
        return [*self.ends, *([now] if self.unanswered else [])]

    @property
    def leaving(self) -> list[str]:
        """The victims whose room is on its way: evicted (and not gone already: `went`), or terminating already (the
        pod waits for them)."""
        return [*(v for v in self.evicted if v not in self.went), *self.terminating]

    @property
    def done(self) -> list[str]:
        """The victims whose room is made: evicted, terminating already, or gone already."""
        return [*self.evicted, *self.terminating, *self.gone]


def holds_of(scheduler: str, node: Json, waiting: Collection[str]) -> list[str]:
    """The keys of the holds `scheduler` made on `node` (preemption, starvation: `HOLDER`) for pods no longer in
    `waiting`: deleted, bound (elsewhere, by anyone) or finished, they hold the node for no one. A Migrate's
    reservation (no `HOLDER`: it is keyed by the workload, whose replacement pod does not exist yet) is never one."""
    return [k for k, e in node["reservations"].items() if e.get(HOLDER) == scheduler and k not in waiting]


def lower_holds(scheduler: str, node: Json, req: Json) -> list[str]:
    """The keys of the holds `scheduler` made on `node` for pods of lower priority than `req` (those not held against
    it, `k8s_filters.counts_against`): once `req` preempts there, their room is its own, as kube-scheduler clears
    the nominations of lower-priority pods on the node it preempts on. Not `req`'s own, nor a Migrate's (no
    `HOLDER`), nor one that does not say its pod's priority (held against every pod: `req` did not count its room)."""
    return [k for k, e in node["reservations"].items()
            if e.get(HOLDER) == scheduler and k not in req["owned"] and not counts_against(e, req)]


def noted(entry: Json, left: Sequence[str], terminating: Sequence[str], ends: Sequence[float], now: float,
          reserve_s: float, max_hold_s: float = MAX_HOLD_S, stuck: bool = False) -> Json:
    """A preemption's reservation `entry` as it must now say: the victims `left` to evict, those evicted and
    `terminating` still, and until when it holds the node. Victims evicted now (their grace periods ending at
    `ends`): until the last one ends and `GRACE_SLACK_S` more, at least `reserve_s` from `now`. Victims still
    terminating as it runs out (within `reserve_s` / 2): `reserve_s` more. Neither past `max_hold_s` from the
    preemption's start (`SINCE`), unless `stuck`: the `terminating` victims were found still there past it, on a
    node that still admits the pod (`k8s_stuck`), and the hold is renewed `reserve_s` at a time while they are.
    Victims all gone: `reserve_s` from `now` at most, for the pod to be bound. Pure: the entry as it was when
    nothing changes."""
    expires = parse_time(entry.get("expires")) or now
    until = expires
    if ends:
        until = max(expires, now + reserve_s, max(ends) + GRACE_SLACK_S)
    elif terminating and expires - now < reserve_s / 2:
        until = max(expires, now + reserve_s)
    elif not terminating and not left and entry.get(EVICTED):
        until = min(expires, now + reserve_s)
    # a hold already kept past the cap for stuck victims is not cut back: it lapses when it expires, or is renewed
    cap = max(expires, (parse_time(entry.get(SINCE)) or now) + max_hold_s)
    until = min(until, max(cap, now + reserve_s) if stuck and terminating else cap)
    new = {k: v for k, v in entry.items() if k not in (LEFT, EVICTED, AWAITED)}
    new |= ({LEFT: list(left)} if left else {}) | ({EVICTED: sorted(terminating)} if terminating else {})
    if waited := sorted(set(awaited_of(entry)) & set(terminating)):   # those of them it only waits for, still there
        new[AWAITED] = waited
    if until != expires:
        new["expires"] = rfc3339(until)
    return entry if new == entry else new


def awaited_of(entry: Json) -> list[str]:
    """The pods a preemption's hold `entry` only waits for (`AWAITED`: terminating already, never evicted for it);
    [] where it names none, or names them in a form that is no list of names (written by hand)."""
    names = entry.get(AWAITED)
    return list(names) if isinstance(names, list) and all(isinstance(k, str) for k in names) else []


def past_grace(ends: float | None, now: float) -> bool:
    """Whether a pod being deleted whose grace ends at `ends` (its `deletionTimestamp`: the deletion's time plus its
    grace period, by the API server's clock) is past it at `now`, and `GRACE_SLACK_S` more: stuck (a finalizer no
    one removes, a kubelet that hangs). Asked both where a pod's room is weighed (`room_coming`: past it, no room
    coming) and where a hold at its hour is kept for its victims (`k8s_stuck`: past it, kept while they are there).

    One whose end cannot be read (`ends` None, or 0.0: `Usage.deleting`, so callers pass it as it is) is taken as
    within its grace: nothing says it is stuck, and taken as stuck the planner would count its room as never coming
    and evict other pods in its place on that guess, and a hold would be kept past the hour with a PreemptionStuck
    Event and the alert for a pod not known to be stuck. Within it, nothing more is evicted: the pod waits for it, as
    kube-scheduler waits for any pod terminating on a nominated node, its hold lapsing at the hour as any does (and
    made again while that pod is still there). The two readers disagreed: `room_coming` counted such a pod as coming,
    `k8s_stuck` as stuck."""
    return bool(ends) and now >= ends + GRACE_SLACK_S


class UnreadEnds:
    """The terminating pods whose `deletionTimestamp` cannot be read that one scheduler warned of (`say`), each once
    while it stays so. Kept by the `Preemptor` of each scheduler (`Preemptor.unread_ends`) and forgotten as the pass
    reads the bound pods (`keep`) where a pod is gone or its time readable again, so a pod whose time is broken again
    is warned of again, and two schedulers in one process warn independently. A set for the whole process, capped at
    1024 pods (the oldest forgotten), was shared by every scheduler in it: one warned, the others never did; and a pod
    fixed and broken again was not said again while it stayed among the 1024."""

    def __init__(self) -> None:
        self._said: set[tuple[str, str]] = set()   # (namespace/name, uid)

    @staticmethod
    def of(pod: Any) -> bool:
        """Whether `pod` (`k8s_reads.Usage`) is terminating with a `deletionTimestamp` that cannot be read
        (`deleting` 0.0), and not made again on its node (its room never comes, whatever its time: it was warned of
        as though a pod waiting for it would hold its node every hour)."""
        return bool(pod.terminating) and not pod.deleting and not pod.comes_back

    def keep(self, bound: Iterable[Any]) -> None:
        """Forget the pods said that are not among `bound` (the pass's bound pods, `k8s_reads.Usage`) as such
        (`of`): gone, or their time readable again."""
        if self._said:
            self._said &= {(u.key, u.uid) for u in bound if self.of(u)}

    def say(self, pod: Any) -> None:
        """Log, once while it stays so, that the terminating `pod` (`k8s_reads.Usage`, `of`) has a `deletionTimestamp`
        that cannot be read. Taken as within its grace (`past_grace`), its room is coming for as long as it stays: a
        pod waiting for it would hold its node again at every hour, and nothing would say it is stuck (no
        PreemptionStuck Event, `k8s_stuck`), so unsaid an operator could not tell why. Said where its room is judged
        (`room_coming`: by `Preemptor.plan` too, for every terminating pod on a node weighed, whether or not a pod
        comes to wait for it: "would"). Its text is quoted (`Usage.deleting_raw`), so the operator sees what is wrong
        with it."""
        said = (pod.key, pod.uid)
        if said in self._said:
            return
        self._said.add(said)
        namespace, _, name = pod.key.rpartition("/")
        log.warning("pod %s (uid %s) on %s is terminating but its deletionTimestamp cannot be read (%r): taken as "
                    "within its grace, its room coming while it stays (a pod waiting for it would hold node %s again "
                    "every hour, never said stuck); see kubectl get pod -n %s %s -o "
                    "jsonpath='{.metadata.deletionTimestamp}'",
                    pod.key, pod.uid or "unknown", pod.node, pod.deleting_raw, pod.node, namespace, name)


def room_coming(pod: Any, now: float, unread: UnreadEnds) -> bool:
    """Whether the room of `pod` (`k8s_reads.Usage`, bound) is coming: it is terminating, not past its grace
    (`past_grace`: `Usage.deleting`, its `deletionTimestamp`, the deletion's time plus its grace, by the API
    server's clock, and `GRACE_SLACK_S` more, which absorbs ordinary skew; one without a readable time is within
    it) nor ending more than `MAX_HOLD_S` from `now`, and it is not made again on its node (`Usage.comes_back`).
    Past its grace it is stuck (a finalizer no one removes): counted as coming, it pinned a pending pod to its node
    for ever (held, waiting, `Holds.stuck` past the hour), where the pod would preempt elsewhere; it is then neither
    victim nor room, as a running pod of equal priority is. So is one whose grace ends beyond the hour a hold lasts
    (its owner deleted it with a grace of a day): counted, the pod waited there all day, its hold lapsing at every
    hour and made again; it is counted once its grace ends within the hour. One terminating whose time cannot be
    read is logged, once while it stays so, by the scheduler judging it (`unread`: `UnreadEnds.say`), unless it is
    made again on its node: its room never comes, whatever its time, so no pod waits for it."""
    ends = pod.deleting   # 0.0: not being deleted, or its time unreadable
    if UnreadEnds.of(pod):
        unread.say(pod)
    return bool(pod.terminating) and not pod.comes_back and not past_grace(ends, now) and (
        not ends or ends - MAX_HOLD_S <= now)


def paused(entry: Json, hot_until: float | None, now: float, reserve_s: float, max_hold_s: float = MAX_HOLD_S) -> Json:
    """A paused preemption's reservation `entry` (`k8s_holds`: gputide's hot taint alone refuses the pod) as it must
    now say: renewed as it runs out (within `reserve_s` / 2) until the taint's expiry `hot_until`
    (`gputide.io/hot-until`, at least 15 min, renewed while the node stays hot) and `GRACE_SLACK_S` more, for the
    pass that carries the preemption on once the taint goes; by `reserve_s` where that expiry is unknown or past.
    Never past `max_hold_s` from the preemption's start (`SINCE`), nor cut back. Pure: `entry` when nothing changes."""
    expires = parse_time(entry.get("expires")) or now
    if expires - now >= reserve_s / 2:
        return entry
    want = hot_until + GRACE_SLACK_S if hot_until is not None and hot_until > now else now + reserve_s
    until = min(max(expires, want), max(expires, (parse_time(entry.get(SINCE)) or now) + max_hold_s))
    return entry if until == expires else {**entry, "expires": rfc3339(until)}


def ranked(entry: Json, req: Json) -> Json:
    """A preemption's reservation `entry` for `req` saying `req`'s priority: one written by a gputide that did not
    record it is held against every pod (`k8s_filters.counts_against`), which is bearable while it lasts until its
    `expires` (at most `MAX_HOLD_S` from its start), yet carried on it is renewed, and kept past the hour for
    victims stuck terminating (`noted`'s `stuck`); so the write that carries it on says it from then on. `entry`
    itself when it says one already, or `req` has none."""
    said, priority = entry.get(PRIORITY), req.get("priority")
    if (isinstance(said, int) and not isinstance(said, bool)) or not isinstance(priority, int):
        return entry
    return {**entry, PRIORITY: priority}


def asked(req: Json) -> Json:
    """The fields of a hold for `req` that name its host ports and extended resources (`HOST_PORTS`, `EXTENDED`),
    those it asks: what `k8s_filters` refuses to the pods the hold counts against."""
    said: Json = {}
    if req.get("host_ports"):
        said[HOST_PORTS] = [list(p) for p in sorted(req["host_ports"])]
    if req.get("extended"):
        said[EXTENDED] = dict(req["extended"])
    return said


def filled(entry: Json, req: Json) -> Json:
    """A preemption's reservation `entry` for `req` naming `req`'s host ports and extended resources (`asked`) as
    `req` asks them now: one written by a gputide that did not hold them holds none (`k8s_filters`), so a pod it
    counts against took the port or the device `req` waits for on the node its victims leave, and carried on it is
    kept up to the hour (`ranked`); one written for an earlier pod of `req`'s name (deleted and made again, asking
    port 29501 where it asked 29500) held what this one does not ask and left free what it does. The write that
    carries it on names them from then on (and no longer names what `req` does not ask). `entry` itself when it
    names them as `req` asks them, as `k8s_filters` reads them (`_read_alike`)."""
    new = {k: v for k, v in entry.items() if k not in (HOST_PORTS, EXTENDED)} | asked(req)
    return entry if new == entry and _read_alike(new, entry) else new


def _read_alike(new: Json, entry: Json) -> bool:
    """Whether the hold `entry`, equal to `new` (`filled`'s), names its host ports and extended amounts as
    `k8s_filters` reads them: equality holds across types it tells apart (`8080.0 == 8080`, `True == 1`), so a hold
    saved so by an older or a foreign writer held neither, was taken for its correction and never rewritten. Ports
    alike in type too (`same_json`), each amount what the reader takes it for (`k8s_filters._amount`: `true` reads
    0, rewritten; `1` reads 1.0, alike). `entry`'s `EXTENDED`, equal to `new`'s, is a map or absent."""
    return same_json(new.get(HOST_PORTS), entry.get(HOST_PORTS)) and \
        all(k8s_filters._amount(v) == v for v in (entry.get(EXTENDED) or {}).values())


def capped(entry: Json, terminating: Sequence[str], now: float, reserve_s: float,
           max_hold_s: float = MAX_HOLD_S) -> bool:
    """Whether `noted` would renew the hold for victims still `terminating` now, but for its cap (`max_hold_s` from
    the preemption's start, or when a hold kept past it expires): only then is it asked whether they are stuck
    (`k8s_stuck`), a read of each, at most once per renewal."""
    expires = parse_time(entry.get("expires")) or now
    cap = max(expires, (parse_time(entry.get(SINCE)) or now) + max_hold_s)
    return bool(terminating) and expires - now < reserve_s / 2 and now + reserve_s > cap


def kept_past_cap(entry: Json, max_hold_s: float = MAX_HOLD_S) -> list[str]:
    """The victims a preemption's hold is kept past its cap for (`noted`'s `stuck`): those it names as still
    terminating once it was renewed past `max_hold_s` from the preemption's start; [] for any other hold."""
    since, expires = parse_time(entry.get(SINCE)), parse_time(entry.get("expires"))
    if since is None or expires is None or expires <= since + max_hold_s:
        return []
    return list(entry.get(EVICTED) or ())


def resources(gpus: float, cpu_milli: float, memory_mib: float, extended: Mapping[str, float]) -> dict[str, float]:
    return {GPU_RESOURCE: gpus, "cpu": cpu_milli, "memory": memory_mib, **extended}


def model_allows(node: Json, req: Json) -> bool:
    """Whether `req` may run on `node`'s GPU model (`gputide.io/gpu-spec`, which only the placement policy checks,
    by catalogue key as `balancer.app.scheduling` compares them): a node it must not run on is no node to preempt
    on or hold, as a node held for a pod gets it without the policy being asked."""
    allowed = req["allowed_models"]
    return not allowed or not req["num_gpu"] or catalog.key_of(node["gpu_model"] or "") in {
        catalog.key_of(m) for m in allowed}


def closest_to_fitting(req: Json, nodes: Sequence[Json]) -> str | None:
    """The node a pod that waits too long should hold as what it asks frees up: among those big enough for it at all
    once what they hold for others is set aside (GPUs, CPU, memory, and each extended resource it asks:
    `big_enough`; one it asks none of rules out no node, `k8s_filters.short`, as in the filters), the one closest to
    fitting it by what it asks (`_closeness`: whole GPUs, the MIG instances of a pod that asks those and no whole
    GPU, or CPU and memory for a pod that asks neither), ties by name; None when none is big enough. What each node
    holds for others is summed in one walk over its holds (`k8s_filters.others_held`), not one per resource: a
    starving pod weighs every node it may hold, at each pass."""
    mig = mig_asked(req)
    best: tuple[tuple[float, ...], str] | None = None
    for n in nodes:
        gpus, cpu, memory, extended = others_held(n, req) if n["reservations"] else (0, 0, 0, None)
        if not any(short(have, want) for have, want in (
                (n["gpus_total"] - gpus, req["num_gpu"]), (n["cpu_milli_total"] - cpu, req["cpu_milli"]),
                (n["memory_mib_total"] - memory, req["memory_mib"]))) and big_enough(n, req, extended):
            key = (_closeness(n, req, (gpus, cpu, memory), mig, extended), n["name"])
            best = key if best is None or key > best else best
    return best[1] if best else None


MIG_PREFIX = "nvidia.com/mig-"   # the NVIDIA device plugin's MIG instances (mixed strategy): nvidia.com/mig-3g.40gb


def mig_asked(req: Json) -> dict[str, float]:
    """The MIG instances (`MIG_PREFIX` resources, by profile) a pod asks that asks no whole GPU ({} otherwise): what
    it waits for, rather than whole GPUs (`closest_to_fitting`)."""
    if req["num_gpu"]:
        return {}
    return {k: v for k, v in req["extended"].items() if k.startswith(MIG_PREFIX)}


def _closeness(node: Json, req: Json, others: tuple[int, int, int], mig: Mapping[str, float],
               held: Mapping[str, float] | None) -> tuple[float, ...]:
    """How close `node` is to fitting starving `req`, the greater the closer, by what it asks, each amount free less
    what is held there for others (`others`: GPUs, CPU milli, memory MiB; `held`: by extended resource, None:
    nothing): for a pod asking whole GPUs, its whole GPUs free; for one that asks MIG instances (`mig`, `mig_asked`)
    and no whole GPU, the instances of those profiles it lacks there (negated), then those free; for one that asks
    neither, the CPU it lacks there, then the memory (negated), then the CPU and the memory free. Such pods were
    ranked by whole GPUs, which they do not use: a MIG-only pod held a node with all its GPUs free but none of its
    profile rather than one a slice short, a CPU-only pod one with GPUs free but no CPU rather than one a core short."""
    if req["num_gpu"]:
        return (node["gpus_free"] - others[0],)
    if mig:
        free = {k: (node.get("extended_free") or {}).get(k, 0.0) - (held or {}).get(k, 0.0) for k in mig}
        return -sum(max(v - free[k], 0.0) for k, v in mig.items()), sum(free.values())
    cpu, memory = node["cpu_milli_free"] - others[1], node["memory_mib_free"] - others[2]
    return -_lacking(cpu, req["cpu_milli"]), -_lacking(memory, req["memory_mib"]), cpu, memory


def _lacking(have: float, want: float) -> float:
    """How much of `want` `have` lacks: none where `have` is not short of it, or the pod asks none
    (`k8s_filters.short`, whose rule this uses rather than repeats)."""
    return want - have if short(have, want) else 0


def big_enough(node: Json, req: Json, held: Mapping[str, float] | None = None) -> bool:
    """Whether `node` has each extended resource `req` asks (an RDMA device, pod slots) at all, less what is held
    there for others (`held`, by resource, when the caller summed it: `k8s_filters.others_held`): a starving pod
    held the node with the most GPUs free even where it lacked one, a hold that could never be used, while a node
    that has it was left to others. A node that does not count its pods takes any number
    (`k8s_filters.resource_refusal`). The node's own amounts are weighed first, the holds summed only where they
    suffice and the node holds any."""
    want = req["extended"]
    if not want:
        return True
    total = node.get("extended_total") or {}
    for k, v in want.items():
        if total.get(k, unlisted_amount(k)) < v:
            return False
    if not node["reservations"]:
        return True
    held = others_held(node, req)[3] if held is None else held
    return all(total.get(k, unlisted_amount(k)) - held.get(k, 0.0) >= v for k, v in want.items())


def usable(node: Json, req: Json) -> tuple[int, int, int]:
    """(GPUs, CPU milli, memory MiB) free on `node` and not reserved for pods other than `req`: the node's holds
    walked once (`k8s_filters.others_held`), not once per resource."""
    return _usable(node, req)[:3]


def _usable(node: Json, req: Json) -> tuple[int, int, int, dict[str, float]]:
    """`usable`, and each extended resource `req` asks free on `node` less what is held there for others (a resource
    the node does not list: `k8s_filters.unlisted_amount`), from one walk over the node's holds."""
    gpus, cpu, memory, extended = others_held(node, req)
    return (node["gpus_free"] - gpus, node["cpu_milli_free"] - cpu, node["memory_mib_free"] - memory,
            {k: node["extended_free"].get(k, unlisted_amount(k)) - extended[k] for k in req["extended"]})


def makes_room(node: Json, req: Json, victims: Sequence[Any]) -> bool:
    """Whether `req`'s GPUs, CPU and memory are free on `node` once `victims` (`k8s_reads.Usage` of pods bound
    there) are gone, what is held there for other pods staying held (`usable`): only those it asks
    (`k8s_filters.short`), as the filters weigh them. A 0-GPU pod was found no room where the GPUs held for others
    exceed those free, though it needs none: it did not preempt there, or gave up a preemption begun there."""
    return not any(short(have + sum(getattr(u, field) for u in victims), want) for have, field, want in zip(
        usable(node, req), ("gpus", "cpu_milli", "memory_mib"), (req["num_gpu"], req["cpu_milli"], req["memory_mib"]),
        strict=True))


def _could_make_room(node: Json, lower: Sequence[Any], req: Json, going: Sequence[Any] = ()) -> bool:
    """Whether evicting every pod of lower priority would free enough on `node` (`makes_room`), with the room of the
    pods `going` (terminating already: coming whatever their priority, `Running.terminating`): only such nodes are
    weighed pod by pod (the rest, most nodes of a busy cluster, cost three sums each). Without `going`, a node whose
    room a terminating pod of higher priority (or one passed over) was freeing was no candidate: the pod preempted
    elsewhere, or nowhere."""
    return bool(lower or going) and makes_room(node, req, [*lower, *going])


class Preemptor:
    """Finds victims for a pod that fits nowhere and evicts them (module docstring)."""

    def __init__(self, api: _Api, scheduler_name: str, reservation_annotation: str, clock: Callable[[], float],
                 reserve_s: float = 300.0, halted: Callable[[], bool] = lambda: False) -> None:
        self.api, self.scheduler_name, self.clock, self.halted = api, scheduler_name, clock, halted
        self.reservation_annotation, self.reserve_s = reservation_annotation, reserve_s
        self._held: dict[str, dict[str, Json]] = {}   # node -> {pod: reservation} the node cache may not show yet
        self.budgets_ttl_s = 10.0
        self._budget_list: tuple[float, list[Json]] | None = None
        self._spent: dict[str, int] = {}   # budget -> disruptions our evictions used since it was listed
        # the cluster-wide emergency stop (`gputide schedule`'s `EmergencyStop`): why it holds, None when it does not
        self.emergency_stop: Callable[[], str | None] = lambda: None
        self.stopped_nodes: frozenset[str] = frozenset()   # the pass's nodes that carry the per-node stop
        self._said_stop: str | None = None
        # the terminating pods whose unreadable `deletionTimestamp` this scheduler warned of (`room_coming`), forgotten
        # as a pass reads them gone or readable again (`k8s_scheduler.SecondaryScheduler._read_pass`, in every pass
        # that reads them)
        self.unread_ends = UnreadEnds()
        # (pod, node, victim) -> one record (`k8s_preempt_doubts.Doubt`): the doubt of an eviction of this term that
        # may have landed unseen (`_ask`: every try unanswered, or a retry's 404 or 409 after a try that was) and when
        # it was asked, each until a read of it tells (`_landed`, `_forget`), an eviction of it is sent again, its own
        # or another's (`_overtaken`; found running, the earlier one may still land: `_evict_one`) or the preemption
        # ends (`release`, which reads it first; `held`, `forget`); the count of that pod's unanswered evictions in
        # the preemption (`_ask`, `_asks`: at `UNANSWERED_ASKS` the victim is no longer asked and the node is given
        # back, `resume`), ended with the doubt; and until when the pod does not preempt that victim there again
        # (`resume`, `plan`), which outlives the preemption
        self._doubts = Doubts()
        # told of each (victim, node) whose unanswered eviction a read at `release` finds landed (`k8s_holds` counts it)
        self.on_landed: Callable[[str, str], None] = lambda victim, node: None
        # told of each (victim, node) read gone (404) as it is found so, not one found terminating: by an eviction's
        # read (`_evict`: `Evictions.gone`, and its `went`), whatever the evictions after it do, or by the read of a
        # victim whose eviction got no answer (`_went`: at `release`, and `_judge`'s). Its room is free (`k8s_holds`
        # counts it for the rest of the pass), even where a later eviction fails and the preemption gives the node
        # back (`preempt` then raises), or where the hold naming it is given back
        self.on_gone: Callable[[str, str], None] = lambda victim, node: None
        # whether the cluster marks the pods the Eviction API deletes (`DisruptionTarget`, `BY_EVICTION_API`): learned
        # once a pod read carries it (`_not_evicted`), or set by the caller; a victim in doubt found terminating
        # without any mark is then not counted (module docstring)
        self.marks_evictions = False

    def stop_reason(self, node: str | None = None) -> str | None:
        """Why no pod may be evicted now (on `node`, when given), None when evictions may go on: the cluster-wide
        emergency stop, then the node's label. A stop whose state cannot be read holds (fail-safe, as the
        controller's cycle acts on nothing when its stop file cannot be looked at). A change is logged once."""
        try:
            why = self.emergency_stop()
        except Exception as exc:   # whatever broke the read: evictions held, not let through
            why = f"the emergency stop could not be read ({exc}): taken as set"
        if why != self._said_stop:
            if why:
                log.warning("scheduler %s: %s: no pod is evicted for preemption while it holds (pods are still "
                            "bound where there is room)", self.scheduler_name, why)
            else:
                log.info("scheduler %s: the emergency stop is lifted: preemption may evict again",
                         self.scheduler_name)
            self._said_stop = why
        if why is None and node is not None and node in self.stopped_nodes:
            why = f"node {node} carries {EMERGENCY_LABEL}=true"
        return why

    def held(self, now: float, seen: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Json]]:
        """This scheduler's reservations that `seen` (node -> its reservations, as the node cache has them) does not
        show yet, or not as last written (the victims a preemption left, updated), and that have not expired: a pass
        must hold the node, and read what is left to evict, even before the watch brings the annotation. The
        unanswered evictions remembered (`Doubt.uid`) of a preemption whose hold is gone or expired are forgotten: it
        ended (a later one there starts afresh)."""
        self._held = {node: kept for node, entries in self._held.items() if (kept := {
            k: e for k, e in entries.items()
            if seen.get(node, {}).get(k) != e and (parse_time(e["expires"]) or 0) > now})}
        self._doubts.prune(now, lambda k, n: not (k in self._held.get(n, {}) or (
            isinstance(e := seen.get(n, {}).get(k), Mapping) and (parse_time(e.get("expires")) or 0) > now)))
        return self._held

    @property
    def _unsure(self) -> dict[tuple[str, str], dict[str, str]]:
        """(pod, node) -> {victim: uid}: the doubts kept (`Doubts.unsure`), a view for reading."""
        return self._doubts.unsure()

    def release(self, node: str, key: str) -> None:
        """`key` was bound (or gave up) on `node`: its reservation no longer holds anything, and its preemption there
        ended. Its victims whose eviction got no answer (`Doubt.uid`) are read first (`_went`): one found gone, or
        terminating and not found deleted by another (`_landed`: its `DisruptionTarget` another disruption's, or none
        where this cluster is known to mark evictions; module docstring), is counted as evicted (`on_landed`, its
        Event `Preempted` posted), as a later pass finding it so counts it; one found deleted by another is not (said
        at info); then they are forgotten. Forgotten unread, a victim gone before any pass read it (the pod then
        fitting, bound on the node and released) was never counted. A read that fails is logged, the doubt dropped.
        `halted()` (stopping, or the Lease lost: during a binding's POST, say) is asked before each read: once it
        holds, no further victim is read, its doubt dropped unread (an eviction that landed then goes uncounted, as
        it does where the next term forgets it: `forget`). A read already under way when the Lease is lost is not
        cut short (only its retries stop: `_read`'s `halt`): answered, a victim it finds landed is still counted and
        its Event `Preempted` posted, by a replica no longer leading. That eviction was this replica's, asked in the
        term just ended, and no later leader counts it (its doubt, dropped here, was this replica's alone; a new term
        forgets any: `forget`), so it is counted once; skipped, an eviction that landed would go uncounted. Asked
        here, it covers every caller (the binding's `k8s_bind`, `k8s_holds.release_elsewhere`, which never asked it,
        and the rest)."""
        self._held.get(node, {}).pop(key, None)
        for victim in self._doubts.doubted(key, node):
            if self.halted():   # asked before each read: the Lease may be lost in the one before
                break
            try:
                if self._went(key, node, victim):
                    self.on_landed(victim, node)
            except ActuationError as err:
                log.warning("scheduler %s: cannot read %s, evicted for %s without an answer: %s", self.scheduler_name,
                            victim, key, err)
        self._doubts.prune(self.clock(), lambda k, n: (k, n) == (key, node))

    def _in_flight(self, key: str, node: str, victim: str) -> bool:
        """Whether `key`'s last eviction of `victim` on `node` that got no answer may still land (`IN_FLIGHT_S`)."""
        return self.clock() - self._doubts.get(key, node, victim).asked_at < IN_FLIGHT_S

    def _budgets(self, namespaces: set[str]) -> tuple[dict[str, int], list[tuple[str, str, Selector]]]:
        """({budget: disruptions allowed}, [(budget, namespace, selector)]) of `namespaces`, listed at most once per
        `budgets_ttl_s` (a pod that cannot preempt asks again at every pass; the Eviction API has the last word)."""
        now = self.clock()
        if self._budget_list is None or now - self._budget_list[0] >= self.budgets_ttl_s:
            self._budget_list = (now, self.api("list pod disruption budgets",
                                               self.api.policy.list_pod_disruption_budget_for_all_namespaces
                                               ).get("items", []))
            self._spent = {}
        allowed, selectors = {}, []
        # read as the controller reads them (`k8s_workloads.disruption_budget`): one with a null selector guards no
        # pod (policy/v1), one with {} every pod of its namespace
        for b in filter(None, map(disruption_budget, self._budget_list[1])):
            if b.namespace in namespaces:
                # less what this scheduler's evictions used since the list: the next preemption must not count on it
                allowed[b.key] = b.disruptions_allowed - self._spent.get(b.key, 0)
                selectors.append((b.key, b.namespace, b.selector))
        return allowed, selectors

    def plan(self, req: Json, nodes: Sequence[Json], bound: Mapping[str, Sequence[Any]]) -> Preemption | None:
        """Where `req` should preempt and whom, among `nodes` (those whose rules admit it); `bound`: per node, the
        bound pods (`k8s_scheduler.Usage`). None when no node can make room without breaking a budget. A victim whose
        evictions for `req` there went unanswered until its node was given back (`resume`) is none for `reserve_s`
        (for that pod, by its uid: not for one made again under its name; nor is a victim made again under its name
        passed over, `_passed`).
        `EvictionsStopped` when the emergency stop holds the preemption it would make (the cluster-wide stop), or
        only nodes labelled with the per-node stop could make room, and only by evicting (where their terminating
        pods' room suffices, the pod waits there: no pod is evicted): either way no node is reserved for it."""
        passed, now = self._passed_over(req), self.clock()
        # terminating already (`Usage.terminating`): never victims, their room coming whatever their priority, and
        # whether or not they are passed over (`choose`: the pod waits for them, `Preemption.awaiting`), until their
        # grace has ended (`room_coming`: stuck past it, neither victim nor room)
        going = {n["name"]: [u for u in bound.get(n["name"], ()) if room_coming(u, now, self.unread_ends)]
                 for n in nodes}
        lower = {n["name"]: [u for u in bound.get(n["name"], ()) if u.priority < req["priority"] and not u.terminating
                             and not _passed(passed, n["name"], u)] for n in nodes}
        nodes = [n for n in nodes if _could_make_room(n, lower[n["name"]], req, going[n["name"]])]
        # a node under the per-node stop evicts none of its pods, yet its terminating pods' room comes all the same:
        # a candidate for that alone (it only waits there). Left out, a pod whose room was coming there was told
        # "preemption failed" and lost the node a starving pod holds
        held = sorted(n["name"] for n in nodes
                      if stop_labelled(n) and not _could_make_room(n, (), req, going[n["name"]]))
        nodes = [n for n in nodes if n["name"] not in held]
        # and none of its pods is a victim there: `held` weighs GPUs, CPU and memory (`makes_room`), `choose` the
        # extended resources and pod slots too, so a node whose terminating pods free the GPUs while its RDMA
        # device is a running pod's took that pod as a victim, and its eviction was refused: "preemption failed"
        lower |= {n["name"]: [] for n in nodes if stop_labelled(n)}
        if not nodes:
            if held:
                raise EvictionsStopped(f"held on {', '.join(held)}: {'they carry' if len(held) > 1 else 'it carries'}"
                                       f" {EMERGENCY_LABEL}=true, so no pod is evicted there")
            return None
        allowed, selectors = self._budgets({u.key.split("/", 1)[0] for n in nodes for u in lower[n["name"]]})
        need = resources(req["num_gpu"], req["cpu_milli"], req["memory_mib"], req["extended"])
        options = {}
        for n in nodes:
            running = [Running(u.key, u.priority, resources(u.gpus, u.cpu_milli, u.memory_mib, dict(u.extended)),
                               u.started, tuple(k for k, ns, sel in selectors
                                                if u.key.startswith(f"{ns}/") and sel.matches(dict(u.labels))),
                               u.terminating)
                       for u in (*going[n["name"]], *lower[n["name"]])]
            options[n["name"]] = (resources(*_usable(n, req)), running)   # less what is held for others
        choice = choose(need, req["priority"], options, allowed, respect_budgets=True)
        # one that only waits for pods terminating already evicts nothing: held under the stop, as a starving pod is
        if choice is not None and choice.victims and (why := self.stop_reason()):
            raise EvictionsStopped(f"held: {why}, so {', '.join(sorted(v.key for v in choice.victims))} on "
                                   f"{choice.node} is not evicted")
        return choice

    def reserve(self, req: Json, node: str, victims: Sequence[str] = (), awaiting: Sequence[str] = ()) -> Json:
        """Hold `req`'s GPUs, CPU and memory, host ports and extended resources on `node` for it (a reservation every
        replica honours, expiring after `reserve_s`): what the filters check (`k8s_filters.resource_refusal`), as
        without the CPU and memory, pods that need no more GPUs than are left over could take them, and without its
        host ports or an extended resource (an RDMA device) a pod that needs no GPU could take those: either way the
        pod would never fit. A preemption's names its `victims`, all of them still to evict (`LEFT`), and
        when it began (`SINCE`), before any is evicted: whatever happens to this replica from then on, the cluster
        says what is left to do. The pods terminating already there that it waits for (`awaiting`,
        `Preemption.awaiting`) are written as a victim found terminating is (`EVICTED`), and named apart as only
        waited for (`AWAITED`: said so, never "evicted for it", `k8s_stuck`): the hold is renewed while they are
        there terminating (`resume`), its room counted as theirs (`k8s_holds._leaving`), capped as a preemption's
        (`SINCE`). Returns the reservation. None is written once `halted()` (stopping, or the Lease lost: the next
        leader places on these nodes)."""
        key = req["name"]
        if self.halted():
            raise ActuationError(f"node {node} not held for {key}: stopping, or the Lease is lost")
        now = self.clock()
        # its priority: a pod of higher priority is not held back by it (`k8s_filters.counts_against`)
        entry = {"pod": key, "gpus": [], "count": req["num_gpu"], CPU: req["cpu_milli"], MEMORY: req["memory_mib"],
                 PRIORITY: req["priority"], "expires": rfc3339(now + self.reserve_s), HOLDER: self.scheduler_name}
        entry |= asked(req)
        if victims:
            entry |= {LEFT: list(victims)}
        if awaiting:
            entry |= {EVICTED: sorted(awaiting), AWAITED: sorted(awaiting)}
        if victims or awaiting:
            entry |= {SINCE: rfc3339(now)}
        self.api.update_node(node, lambda n: annotation_map_change(n, self.reservation_annotation, {key: entry}))
        self._held.setdefault(node, {})[key] = entry
        return entry

    def forget(self) -> None:
        """A new term as leader: what this replica wrote or counted in an earlier one (reservations the node cache
        may not show yet, budgets and the disruptions spent of them) is read again from the cluster, where another
        leader may have changed it meanwhile. Its evictions that got no answer (`Doubt.uid`) are forgotten too: a
        victim found terminating or gone in this term may be another leader's eviction (counted by that leader),
        its own having failed."""
        self._held, self._budget_list, self._spent = {}, None, {}
        self._doubts.prune(self.clock(), lambda k, n: True)   # what it passes over stays: the plan asks it

    def preempt(self, req: Json, choice: Preemption) -> Evictions:
        """Reserve the node for `req` (its victims written on the reservation, `LEFT`), evict the victims, write
        what is left and until when the node is held (`noted`), nominate the node (module docstring). An eviction
        that fails before any victim was evicted gives the node back (and raises: nothing was done); after some
        were (or left gone after an unanswered eviction, `Evictions.went`), or where the one that failed got no
        answer and may have landed (`Evictions.unanswered`: the next pass judges it), the node stays held for the
        pod while they terminate, and the victims left stay written on its reservation for the next pass to evict
        (`resume`): given back, the room the evicted victims free would go to
        whoever came first, while the pod still waited for the rest. Nothing more once `halted()`: the reservation
        still names every victim not known evicted, so the next leader (or this replica's next term) carries on.
        The pods terminating already that the pod waits for (`Preemption.awaiting`) are neither read nor evicted:
        the reservation names them from the start as waited for (`EVICTED`; `reserve`), and a choice with no victim
        only holds the node and nominates it. A victim its eviction finds terminating already
        (`Evictions.terminating`: its owner deleting it since the pass listed it) is written as only waited for too
        (`AWAITED`): the eviction was not this preemption's, so stuck past its grace it gives the hold back as they
        do (`k8s_holds`), where it kept the hold past the hour and was said "evicted for it" (`k8s_stuck`). (A victim
        `resume` finds terminating stays a victim: an earlier term may have evicted it for this very hold, the Lease
        lost before it was written down.)"""
        key = req["name"]
        # those a budget covers first: a refusal (429, the budget spent meanwhile) then comes before a victim
        # without one is killed for a preemption that does not happen
        victims = [(v.key, v.budgets) for v in sorted(choice.victims, key=lambda v: not v.budgets)]
        awaiting = [p.key for p in choice.awaiting]   # terminating already: waited for, never evicted
        entry = self.reserve(req, choice.node, [v for v, _ in victims], awaiting)
        done = self._evict(key, choice.node, victims)
        # nothing done for sure: given back. Not where a victim left already (`went`, counted) or one's eviction got
        # no answer (it may have landed): given back, its release forgot that doubt (`Doubt.uid`), the eviction landed
        # never counted, and a victim counted (its Event `Preempted` posted) was not in `preempted`
        if done.error is not None and not done.leaving and not done.went and not done.unanswered:
            if self.halted():   # the Lease lost (or stopping) meanwhile: the node stays held, its victims named
                raise done.error
            self.release(choice.node, key)   # a budget changed meanwhile, or the API failed: give the node back
            with self.api.reserve():   # undoing: on the time the pod's turn keeps for it
                self.api.update_node(choice.node, lambda n: annotation_map_change(
                    n, self.reservation_annotation, {key: None}))
            raise done.error
        now = self.clock()
        waited = sorted({*done.leaving, *awaiting})
        # those found terminating already: no eviction of its own, only waited for (`AWAITED`), as `awaiting`
        said = {**entry, AWAITED: sorted({*awaiting, *done.terminating})}
        done.entry = self._note(key, choice.node, entry, noted(said, done.left, waited, done.holding(now), now,
                                                               self.reserve_s))
        if not self.halted():
            self.nominate(key, choice.node)
        return done

    def passed_over_said(self, req: Json, bound: Mapping[str, Sequence[Any]]) -> str:
        """Why `req` preempts none of the victims it passes over now (`plan`: their evictions went unanswered until
        its node was given back, `resume`), as a sentence to append to why it waits ("" when none). Unsaid, the pod
        read only "Insufficient nvidia.com/gpu" for `reserve_s`, though a victim there would make room. Only the
        victims still bound on their node and not being deleted (`bound`, the pass's `Usage` per node): one gone
        since, deleted by its owner or its node's pods read elsewhere, is no reason any more, nor one terminating
        (`Usage.terminating`: bound pods are listed by node, not phase, so its owner's deletion left it among them for
        its grace period, up to 30 min for a training job), which leaves whether or not it is preempted, nor one made
        again under its name since (another uid, never asked: `_same_pod`)."""
        passed = self._passed_over(req)
        return "".join(f" preemption: victim {victim} passed over on {node} until {rfc3339(until)} after "
                       f"{UNANSWERED_ASKS} unanswered evictions."
                       for (node, victim), (until, uid) in sorted(passed.items())
                       if any(u.key == victim and not u.terminating and _same_pod(uid, u) for u in bound.get(node, ())))

    def _passed_over(self, req: Json) -> dict[tuple[str, str], tuple[float, str]]:
        """(node, victim) -> (until when, the victim's uid: "" where read without one) of the victims `req` passes
        over now (`resume`'s give-back; for the pending pod of its uid: `Doubts.passed_over`)."""
        key = req["name"]
        return {(n, v): (until, self._doubts.get(key, n, v).over_victim)
                for (n, v), until in self._doubts.passed_over(key, req.get("uid") or "", self.clock()).items()}

    def nominate(self, key: str, node: str | None) -> None:
        """Set pod `key`'s `status.nominatedNodeName` to `node` (None: clear it), as kube-scheduler does for a
        preemptor (and for the lower-priority pods nominated where it preempts). Informational only: the
        reservation is what holds the node, so a failure is logged."""
        ns, name = key.split("/", 1)
        try:
            self.api(f"pod {key} status", self.api.core.patch_namespaced_pod_status, name, ns,
                     {"status": {"nominatedNodeName": node}}, _content_type=MERGE_PATCH)
        except ActuationError as err:
            log.warning("scheduler %s: cannot %s for %s: %s", self.scheduler_name,
                        f"nominate {node}" if node else "clear the nominated node", key, err)

    def resume(self, req: Json, node: str, entry: Json, running: Collection[str],
               stuck: Collection[str] | None, going: Collection[str]) -> Evictions:
        """Carry on the preemption of `req`'s reservation `entry` on `node`: evict the victims left (`LEFT`) that
        are still among `running` (the pods bound there; the others are gone), and write down what is left again
        (`noted`: the victims left, those still terminating, the hold renewed while they do, cut short once they
        are all gone). `stuck`: where the hold reached its cap, the victims found still terminating there
        (`k8s_stuck`; None: not asked), the only ones it is then renewed for. `going`: of `running`, those whose room
        is coming (`room_coming`): the hold is renewed for a pod it only waits for (`AWAITED`)
        while that pod's room is coming; a pod made again under its name there (a StatefulSet's web-0), running,
        frees nothing and was counted as leaving, the hold renewed for it up to the hour, and one stuck past its
        grace was renewed for past the hour, for ever. (A victim evicted is matched by name, as before:
        the pass's list may not show it terminating yet.) The node stays held until the pod is
        bound, no longer waits, or the reservation expires (then the pod plans afresh). A victim left whose eviction
        this replica asked and got no answer to (`Doubt.uid`) and that is no longer among `running` was evicted by it
        (`Evictions.went`) where a read finds it gone or terminating (`_went`), not where it finished on its own or
        its `DisruptionTarget` says another deleted it (`_landed`); one it never asked to evict (another leader's
        term, an owner deleting it) is not. One it cannot read now stays left (`Evictions.left`, the read's error
        `Evictions.error`), its doubt asked again at the next pass.

        A victim whose evictions got no answer `UNANSWERED_ASKS` times in all, found still running after each (so
        none landed), is not asked again (`EvictionUnanswered`); with nothing else leaving the node (no victim
        terminating, none left unread), the node is to be given back (`Evictions.give_back`, the reservation not
        written again: `k8s_holds` gives it back, clears the nomination, and the pod plans afresh). Kept, the hold
        ran out unrenewed (nothing leaves), the pod preempted afresh there at once (`SINCE` anew, its cap never
        reached) and evicted the victim again unanswered, pass after pass: the node was held for it for ever, and a
        pod fitting beside the victim never bound there. Planned afresh, the pod does not preempt that victim there
        again for `reserve_s` (`plan`: `Doubt.over_until`): it would hold the node again at once, evicting with it a pod
        bound there meanwhile, and ask the victim's eviction again unanswered."""
        left = entry.get(LEFT) or ()
        done = self._evict(req["name"], node, [(k, ()) for k in left if k in running])
        for k in left:
            if k not in running:
                self._judge(req["name"], node, k, done)
        waited = set(awaited_of(entry))
        terminating = [k for k in entry.get(EVICTED) or () if k in running and k not in done.leaving
                       and (k not in waited or k in going) and (stuck is None or k in stuck)]
        if isinstance(done.error, EvictionUnanswered) and not (terminating or done.leaving or done.unread):
            done.entry, done.give_back = entry, True
            victim = done.left[0]   # passed over by the uid its unanswered asks were counted for (`_asks`)
            self._doubts.set(req["name"], node, victim, over_until=self.clock() + self.reserve_s,
                             over_for=req.get("uid") or "",
                             over_victim=self._doubts.get(req["name"], node, victim).counted)
            return done
        now = self.clock()
        new = noted(entry, done.left, [*terminating, *done.leaving], done.holding(now), now, self.reserve_s,
                    stuck=bool(stuck))
        done.entry = self._note(req["name"], node, entry, filled(ranked(new, req), req))
        return done

    def hold_paused(self, req: Json, node: str, entry: Json) -> Json:
        """`req`'s preemption on `node` paused by gputide's hot taint (`k8s_holds`): its reservation `entry` renewed
        as it runs out (`paused`), up to the taint's expiry as the node says it now (read then, not every pass), so
        that the hold outlasts the taint rather than lapsing under it (the pod would then preempt elsewhere, evicting
        more pods while the room made here sits idle). As `resume` writes it, it says the pod's priority (`ranked`)
        and names the host ports and extended resources the pod asks (`filled`), renewed or not: one written by an
        older gputide (or for an earlier pod of its name) was renewed as it was while paused, held against more
        important pods (those tolerating the taint) and leaving free what the pod asks, up to the hour, when the
        renewals were to write them first. The reservation as it now is; `entry` when nothing changed (a read or
        write that fails is logged: the next pass asks again)."""
        now = self.clock()
        said = filled(ranked(entry, req), req)   # written at once, as `resume` would; the node read only to renew
        if (parse_time(said.get("expires")) or now) - now >= self.reserve_s / 2 or self.halted():
            return self._note(req["name"], node, entry, said)
        try:
            seen = self.api(f"node {node}", self.api.core.read_node, node)
        except ActuationError as err:
            log.warning("scheduler %s: cannot read %s to renew %s's paused hold: %s", self.scheduler_name, node,
                        req["name"], err)
            return self._note(req["name"], node, entry, said)
        notes = (seen.get("metadata") or {}).get("annotations") or {}
        return self._note(req["name"], node, entry, paused(said, parse_time(notes.get(HOT_UNTIL_ANNOTATION)), now,
                                                           self.reserve_s))

    def _note(self, key: str, node: str, entry: Json, new: Json) -> Json:
        """`key`'s reservation on `node` written as `new` (`noted`), unless it says what `entry` says, in the same
        types (`same_json`: `ranked`'s priority 10 is news to a hold saved saying 10.0), or `halted()` (then
        `entry`, the reservation as it is)."""
        if same_json(new, entry) or self.halted():
            return entry
        try:
            with self.api.reserve():   # completing what the turn began
                self.api.update_node(node, lambda n: annotation_map_change(n, self.reservation_annotation, {key: new}))
        except ActuationError as err:   # the node stays held, its victims named: the next pass carries on
            log.warning("scheduler %s: cannot note the victims left for %s on %s: %s", self.scheduler_name, key,
                        node, err)
            return entry
        self._held.setdefault(node, {})[key] = new
        return new

    def _evict(self, key: str, node: str, victims: Sequence[tuple[str, Sequence[str]]]) -> Evictions:
        """Evict `victims` ((pod, the budgets covering it)) in order for `key`, until one fails or `halted()` (asked
        before each victim's read and again before its eviction). Each is read first, for its grace period
        (`Evictions.ends`); one terminating already is not evicted again (an earlier term's eviction, the Lease lost
        before it was written down, or its owner deleting it), its grace ending when it says: the pod waits for it
        all the same, but it is no eviction made (`Evictions.terminating`), unless this replica asked its eviction
        and got no answer, and it is not found deleted by another (`_landed`): then it is one, as is one found gone
        then. Such a victim is read even while an emergency stop holds (reading evicts nothing; it is evicted again
        only once the stop is lifted): left unread, the hold ran out under the stop (nothing known leaving, it is not
        renewed), its doubt (`Doubt.uid`) was forgotten with it, and the eviction, landed and its budget's disruption
        spent, was never counted. A victim
        is `Evictions.unanswered` only where its eviction was asked now and got no answer (`_count` counted it);
        one whose earlier eviction got no answer and that cannot be read now is `Evictions.unread` (its doubt kept,
        the next pass reads it first), its error saying so (`unread_error`)."""
        done = Evictions()
        for n, (victim, budgets) in enumerate(victims):
            asks, pod = self._doubts.get(key, node, victim).count, None
            try:
                # the Lease lost (or stopping), or an emergency stop (but for reading an unsure victim): none evicted
                self._leads(key, node, stop=self._doubts.get(key, node, victim).uid is None)
                pod = self._read(node, victim)
                ending, evicted = self._evict_one(key, node, victim, pod, budgets)
            except NotFoundError:   # gone already: its room is free all the same
                if self._landed(key, node, victim):   # after this replica's eviction, unanswered: its own
                    done.evicted.append(victim)
                    done.went.append(victim)
                else:
                    done.gone.append(victim)
                self.on_gone(victim, node)
                continue
            except ActuationError as err:   # a budget changed meanwhile, or the API failed
                done.left, done.error = [v for v, _ in victims[n:]], err
                if self._doubts.get(key, node, victim).count not in (None, asks):   # counted: next pass judges
                    done.unanswered.append(victim)
                elif pod is None and self._doubts.get(key, node, victim).uid is not None:   # not read: read it first
                    done.unread.append(victim)
                    done.error = err if self.halted() else unread_error(victim, err)
                return done
            done.ends.append(ending)
            (done.evicted if evicted else done.terminating).append(victim)
        return done

    def _evict_one(self, key: str, node: str, victim: str, pod: Json, budgets: Sequence[str]) -> tuple[float, bool]:
        """Evict `victim` for `key` (`pod`: it as read, `_read`), unless it terminates already: when its grace
        period ends, and whether it was evicted (False: terminating already; True too where this replica's eviction
        of it got no answer, and landed: `_landed`). Only the pod of its name on `node`, the one read (its uid a
        precondition, `k8s_migrate.eviction`): one made again under its name since (a StatefulSet's) runs elsewhere
        and frees nothing here, so it is not evicted (NotFoundError, gone from the node; 409 when it takes the name
        between the read and the eviction). An eviction that may have landed unseen is remembered by the uid read
        (`_ask`, `Doubt.uid`) until a later read finds the victim terminating or gone (`_landed`) or an eviction of it
        is sent again (`_overtaken`); one whose evictions got no answer `UNANSWERED_ASKS` times while it ran on is
        not asked again (`EvictionUnanswered`). A read finding it running within `IN_FLIGHT_S` of that eviction keeps
        the doubt: the eviction may still be in flight at the API server (a 504 leaves it so), and where none is sent
        now (the emergency stop, `UNANSWERED_ASKS`, a 429) it lands after the read; forgotten at the read, the next
        pass found the victim terminating already: never counted, no Event `Preempted`. Read running later than
        that, it was not evicted by it: the doubt is dropped, so a victim its owner deletes later (a rollout) is not
        counted as preempted."""
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if ending := parse_time(meta.get("deletionTimestamp")):   # its grace period runs already
            return ending, self._landed(key, node, victim, pod)
        if (doubt := self._doubts.get(key, node, victim).uid) not in (None, meta.get("uid")):   # made again
            self._forget(key, node, victim)
        elif doubt is not None and not self._in_flight(key, node, victim):
            self._forget(key, node, victim)   # running past any flight of that eviction: it did not land
        if (asked := self._asks(key, node, victim, meta.get("uid") or "")) >= UNANSWERED_ASKS:
            raise EvictionUnanswered(f"evicting {victim} got no answer {asked} times while it kept running on {node}: "
                                     "not asked again")
        grace = spec.get("terminationGracePeriodSeconds")
        # asked again right before the eviction: the Lease may have lapsed while the victim was read (a slow GET),
        # and the next leader may be placing on this node already
        self._leads(key, node)
        self._ask(key, node, victim, pod, budgets)
        self._spend(budgets)   # the eviction used one of each budget's disruptions
        self._preempted(key, node, victim)
        return self.clock() + (DEFAULT_GRACE_S if grace is None else float(grace)), True

    def _ask(self, key: str, node: str, victim: str, pod: Json, budgets: Sequence[str]) -> None:
        """Ask `victim`'s eviction for `key` on `node` (`pod` as read: its uid a precondition). Where it fails yet
        may have landed unseen, it is remembered by that uid (`Doubt.uid`) until a later read of the victim tells:
        every try unanswered (`_Api.writes`), or a 404 or 409 to a try after one that got no answer (the error's
        `after_unanswered`): what a landed earlier try leaves (the pod gone; terminating, or made again under its
        name), which `writes` takes for a definite answer. A 404 is judged at once (`_evict`: gone), a 409 by the
        next pass. Such an eviction spends its `budgets` as one answered does (`_spend`): it may have used their
        disruptions. `resume` names none. Unanswered asks are counted (`Doubt.asks`) for the preemption: an answered
        refusal (a 429: the budget, or throttling) leaves the count as it is, for it says nothing of whether the
        unanswered ones landed (each was found not landed, the victim running). Begun again by each answer, a victim
        answered now and then (no answer, no answer, 429, ...) never reached `UNANSWERED_ASKS`, and each unanswered
        ask renewed the hold (`Evictions.holding`): the node was held up to the hour's cap (`MAX_HOLD_S`), then
        preempted afresh, for ever. One that went through ends it (the victim terminates, asked no more). Sent, gone
        through or unanswered, it takes over every doubt of that pod, its own earlier one too (`_overtaken`); refused
        (429), it leaves them: an earlier eviction may still land."""
        ns, name = victim.split("/", 1)
        what = f"evict pod {victim}"
        uid = (pod.get("metadata") or {}).get("uid")
        with self.api.writes() as unanswered:
            try:
                self.api(what, self.api.core.create_namespaced_pod_eviction, name, ns, eviction(pod),
                         retry_throttled=False, halt=self.halted)
            except ActuationError as err:
                unsure = what in unanswered or isinstance(err, NotFoundError | ConflictError) and err.after_unanswered
                if unsure:
                    self._spend(budgets)
                    self._overtaken(key, node, victim, uid)
                if unsure and uid:
                    self._doubts.set(key, node, victim, uid=uid, asked_at=self.clock())
                if unsure:   # an answered refusal (a 429: a budget, throttling) leaves the count as it is
                    self._count(key, node, victim, pod, True)
                raise
            self._overtaken(key, node, victim, uid)
            self._count(key, node, victim, pod, False)   # it went through: the victim terminates, asked no more

    def _asks(self, key: str, node: str, victim: str, uid: str) -> int:
        """How many evictions of `victim` for `key` on `node` got no answer (`Doubt.asks`), counted only
        while it is the pod of that `uid`: one made again under its name since (a StatefulSet's) was never asked.
        Counted by name, it inherited the count of the pod it replaced, and was given up on (its node given back)
        after fewer unanswered asks than `UNANSWERED_ASKS`."""
        said = self._doubts.get(key, node, victim)
        return said.asks if said.counted == uid else 0

    def _count(self, key: str, node: str, victim: str, pod: Json, unanswered: bool) -> None:
        """`victim`'s eviction for `key` on `node` asked (`pod` as read): one more unanswered of that pod
        (`Doubt.asks`, by its uid: `_asks`), or gone through, which ends the count (`_ask`: not a refusal)."""
        if unanswered:
            uid = (pod.get("metadata") or {}).get("uid") or ""
            self._doubts.set(key, node, victim, counted=uid, asks=self._asks(key, node, victim, uid) + 1)
        else:
            self._doubts.set(key, node, victim, counted="", asks=0)

    def _spend(self, budgets: Sequence[str]) -> None:
        """One disruption of each of `budgets` used by an eviction of this replica's, landed or maybe landed (no
        answer: `_ask`): `_budgets` counts the next preemptions' allowed disruptions short by it until the budgets
        are listed again (`budgets_ttl_s`). Counted where an unanswered eviction did not land, a preemption that
        needs the disruption is put off (or made elsewhere) until then; left uncounted where it landed, a later one
        was planned on a disruption already used: refused (429) at that victim, it gave its node back, any victim
        evicted before it killed for no one. So the safe direction is to count it. Only `preempt` names the budgets
        (`Preemption.victims`): `resume` evicts the victims left with none named (their budgets not looked up again),
        so its evictions spend nothing here, and a preemption planned before the budgets are listed again may count
        on a disruption one of them used (refused, 429, at that victim: the Eviction API has the last word)."""
        for b in budgets:
            self._spent[b] = self._spent.get(b, 0) + 1

    def _read(self, node: str, victim: str) -> Json:
        """`victim` read: the pod of its name on `node` (NotFoundError: none, or one made again elsewhere since)."""
        ns, name = victim.split("/", 1)
        pod = self.api(f"pod {victim}", self.api.core.read_namespaced_pod, name, ns, halt=self.halted)
        if (where := (pod.get("spec") or {}).get("nodeName")) != node:
            raise NotFoundError(f"pod {victim}: no longer on {node} (a pod of its name is on "
                                f"{where or 'no node'}): not evicted", 404)
        return pod

    def _judge(self, key: str, node: str, victim: str, done: Evictions) -> None:
        """`victim`, left to evict for `key` on `node` and no longer among the pass's running pods, added to `done`:
        to `evicted` and `went` where this replica's eviction of it, unanswered, made it leave (`_went`); to `left`
        where it cannot be read now (`error`: the read's, unless an eviction's came first), or where it is read
        running within `IN_FLIGHT_S` of its eviction (the pass's list lagging), so that the next pass reads it again
        rather than dropping it from the reservation (its doubt then judged only at release, with no window: a later
        deletion by its owner counted as preempted)."""
        try:
            went = self._went(key, node, victim)
        except ActuationError as err:
            log.warning("scheduler %s: cannot read %s, evicted for %s without an answer: %s", self.scheduler_name,
                        victim, key, err)
            done.left.append(victim)
            done.unread.append(victim)
            done.error = done.error or unread_error(victim, err)
            return
        if went:
            done.evicted.append(victim)
            done.went.append(victim)
        elif self._doubts.get(key, node, victim).uid is not None:   # read running within `IN_FLIGHT_S`: read again
            done.left.append(victim)

    def _went(self, key: str, node: str, victim: str) -> bool:
        """Whether `victim`, left to evict for `key` on `node` and no longer among the pass's pods running there (bound,
        not finished), left through this replica's eviction that got no answer (`Doubt.uid`), as a read of it now says
        (`_landed`): no pod of its name is on `node` any more (404), or that pod is being deleted (`deletionTimestamp`),
        not marked as deleted by another (`_not_evicted`).
        One found finished on its own (Succeeded, Failed: the pass's bound pods leave such pods out) was not evicted:
        that eviction did not land, and it is forgotten uncounted, as one found still running `IN_FLIGHT_S` after the
        eviction is (within it, that eviction may still land: the doubt is kept). A read that fails raises
        (ActuationError), the doubt kept for the next pass (`_judge`). False for a victim it never asked to evict (not
        read). One found gone (404), landed or not, is told (`on_gone`): its room is free for the rest of the pass.
        Read at `release` (a hold given back within the pass: `k8s_holds` `_room_taken`, `_clear_lower`), the pass's
        list may still show it; told only as landed (`on_landed`), its room stayed taken for the rest of the pass, no
        hold naming it any more, and another hold on `node` resumed after it and needing that room was given back as
        though others took it. (`_judge`'s, which the pass's list no longer shows, frees nothing more there.)"""
        if self._doubts.get(key, node, victim).uid is None:
            return False
        try:
            pod = self._read(node, victim)
        except NotFoundError:
            self.on_gone(victim, node)
            return self._landed(key, node, victim)
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return self._landed(key, node, victim, pod)
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if finished or not self._in_flight(key, node, victim):
            self._forget(key, node, victim)   # finished on its own, or running past the eviction's flight: not evicted
        return False

    def _landed(self, key: str, node: str, victim: str, pod: Json | None = None) -> bool:
        """Whether `victim`'s eviction for `key` on `node`, asked by this replica in this term without an answer
        (`Doubt.uid`), landed, as the victim read now says: the pod read (`pod`) is that one (its uid), terminating
        (the caller asks only then) and not marked deleted by another (`_not_evicted`), or no pod of its name is on
        `node` any more (`pod` None): then its Event `Preempted` is posted, as a landed eviction's. Resolved either
        way, it is forgotten; a pod of its name with another uid there is another pod (made again there since), which
        that eviction did not touch, and the pod it asked to evict is forgotten uncounted, as is one another
        disruption, or its owner, deleted (said at info). False for a victim it never asked to evict."""
        why = None if pod is None else self._not_evicted(pod)   # asked of every pod read terminating: it learns
        was = self._forget(key, node, victim)
        if was is None or pod is not None and ((pod.get("metadata") or {}).get("uid") or "") != was:
            return False
        if why:
            log.info("scheduler %s: %s, evicted for %s on %s without an answer, is terminating with %s: that eviction "
                     "did not delete it, not counted as preempted", self.scheduler_name, victim, key, node, why)
            return False
        self._preempted(key, node, victim)
        return True

    def _not_evicted(self, pod: Json) -> str | None:
        """Why `pod`, read terminating, was not deleted through the Eviction API (None: it may have been), by its
        `DisruptionTarget` (`disruption`; module docstring): another disruption's reason, or none at all where this
        cluster is known to mark evictions (`marks_evictions`, learned here from a pod marked `BY_EVICTION_API`)."""
        reason = disruption(pod)
        if reason == BY_EVICTION_API:
            self.marks_evictions = True
            return None
        if reason:
            return f"{EVICTED_CONDITION} {reason}: another disruption deleted it"
        if self.marks_evictions:   # one without a reason tells nothing more than none
            return f"no {EVICTED_CONDITION} {BY_EVICTION_API}, which this cluster gives a pod the Eviction API " \
                   "deletes: its owner deleted it"
        return None

    def _overtaken(self, key: str, node: str, victim: str, uid: str | None) -> None:
        """`key`'s eviction of `victim`, the pod of `uid` on `node`, sent and gone through, or unanswered (`_ask`):
        it is `key`'s from now on. The doubts of the preemptions on `node` that asked that pod's eviction without an
        answer (`Doubt.uid`, by uid; `key`'s own earlier one too: the eviction sent now stands for it) are forgotten,
        so that at most one preemption doubts a pod and a landed eviction is counted once: kept, a lower one's doubt
        (given up to `key`, of higher priority, its eviction answered) read the victim terminating at its `release`
        and counted it again through `on_landed`, with a false Event `Preempted` naming the lower pod. Gone
        through, `key` counts the victim; unanswered, it doubts it itself (whichever eviction lands, counted once,
        by `key`). Not where `key` only read the victim running: an earlier eviction (another's, or `key`'s own:
        `_evict_one`) may still be in flight at the API server (a 504 leaves it so), and where `key` then asks none
        (the emergency stop, its own count at `UNANSWERED_ASKS`, a 429), that one lands after the read, and its
        preemption, its doubt forgotten, found the victim terminating: never counted, no Event. A pod made again
        under its name since (another uid, or none read) keeps the other preemptions' doubts: the pod they asked to
        evict is another."""
        for k in self._doubts.doubting(node, victim, uid) if uid else ():
            self._forget(k, node, victim)

    def _forget(self, key: str, node: str, victim: str) -> str | None:
        """The uid of `victim` whose eviction for `key` on `node` got no answer (`Doubt.uid`; None: none), forgotten:
        a read of it told whether it landed."""
        if (was := self._doubts.get(key, node, victim).uid) is not None:
            self._doubts.set(key, node, victim, uid=None, asked_at=NEVER)
        return was

    def _preempted(self, key: str, node: str, victim: str) -> None:
        """The Event `Preempted` on `victim`, evicted for `key` on `node`."""
        ns, name = victim.split("/", 1)
        self._event({"apiVersion": "v1", "kind": "Pod", "name": name, "namespace": ns}, "Normal", "Preempted",
                    f"Preempted by {key} on node {node}")

    def _leads(self, key: str, node: str, stop: bool = True) -> None:
        """Raises unless this replica may still evict for `key` on `node`: not once `halted()` (stopping, or the
        Lease lost), nor while an emergency stop holds evictions there (`stop_reason`: `EvictionsStopped`; not asked
        where `stop` is False: only a read follows)."""
        if self.halted():
            raise ActuationError(f"evicting no more for {key}: stopping, or the Lease is lost")
        if stop and (why := self.stop_reason(node)):
            raise EvictionsStopped(f"evicting no more for {key}: {why}")

    def _event(self, involved: Json, kind: str, reason: str, message: str) -> None:
        try:
            post_event(self.api, involved, kind, reason, message, self.scheduler_name, self.clock())
        except ActuationError as err:
            log.warning("scheduler %s: cannot post %s event: %s", self.scheduler_name, reason, err)
