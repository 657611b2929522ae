"""Nodes held for pods that fit nowhere, for the secondary scheduler (balancer/actuate/k8s_scheduler.py).

A pod left pending because no node has room for it may get a node held for it, by a reservation under its own name
of its GPUs, CPU, memory, host ports and extended resources (node annotation `gputide.io/reserved-for`, the one a
Migrate writes, honoured by every replica of the scheduler; `k8s_filters` offers no other pod what it holds):

* **preemption** (`k8s_preempt`): pods of lower priority are evicted from a node, which is held while they
  terminate (as long as their grace periods, renewed while they are still there, at most an hour, save for victims
  stuck terminating on a node that still admits the pod: kept while they are there, and said, `k8s_stuck`); where an
  eviction failed after others were made, or the Lease was lost between them, the node stays held and each pass
  evicts the victims left (`resume`), as the reservation names them, while they still make room for the pod there
  (once others took or hold that room, or the node no longer admits the pod: cordoned, tainted, relabelled, none
  is evicted, the node is given back and the pod plans afresh; save where the only rule refusing it is gputide's
  own hot taint, which lapses within minutes: the preemption is paused, none evicted and the node kept held, the
  hold renewed up to the taint's expiry, at most the hour, until the taint goes or the hold expires); the holds
  there for pods of lower priority are given back and their nominations cleared, as kube-scheduler clears them
  (their room is the preemptor's);
* **anti-starvation**: a pod pending longer than `starving_s` that preempts no one holds the node closest to
  fitting it, so that what frees up there goes to it rather than to smaller pods that keep arriving; so do the
  members of a pod group that cannot be placed whole, each its own node, save members sharing an unbound
  WaitForFirstConsumer claim, which hold one node big enough for them all (groups do not preempt).

A hold made in a pass holds the node for the rest of that pass too (the pass's view of the node and its filters
are updated at once). It ends when the pod is bound: on the held node the binding uses it up
(`k8s_filters.take`), elsewhere `release_elsewhere` gives the held nodes back at once rather than when their
reservations expire. So does a pod that no longer waits for this scheduler: a binding answered 409 (bound by
someone else) or 404 (deleted) gives its holds back in that turn, and each pass gives back the holds this
scheduler made (the reservation's `scheduler` field) for pods that are no longer among its pending pods
(`release_gone`: deleted while its victims terminate, bound elsewhere, finished), before any pod is placed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from balancer.actuate.k8s_filters import EVICTED, LEFT, Offers, port_refusal, reservation_key, rule_refusal
from balancer.actuate.k8s_gang import sharers, together
from balancer.actuate.k8s_nodes import annotation_map_change
from balancer.actuate.k8s_preempt import (
    SINCE,
    Evictions,
    EvictionUnanswered,
    Preemptor,
    UnreadEnds,
    awaited_of,
    closest_to_fitting,
    holds_of,
    kept_past_cap,
    lower_holds,
    makes_room,
    mig_asked,
    model_allows,
    past_grace,
    room_coming,
)
from balancer.actuate.k8s_reads import Usage
from balancer.actuate.k8s_stuck import stuck_said, stuck_victims, tell_stuck
from balancer.actuate.kubernetes import HOT_TAINT_KEY, _Api, parse_time
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]
# why a pod a hold waits for leaves no room there (`Holds._not_coming`), as `Holds._not_coming_said` words it:
# (reason, what follows "waited for", said of one pod, of several, what may hold it)
_NOT_COMING = (
    ("stuck", ",", "is stuck terminating past its grace", "are stuck terminating past their grace",
     ": a finalizer, or a kubelet that hangs?"),
    ("back", ",", "is made again on its node", "are made again on their node", " (a DaemonSet's or a static pod's)"),
    ("late", ":", "its grace ends after the hour a hold lasts", "their graces end after the hour a hold lasts", ""))


class Holds:
    """Preemption, anti-starvation and the release of held nodes for one scheduler (module docstring).

    `preempted` and `starving` say what the last pass did: (victim, node) of each victim a preemption evicted (not
    those found gone, or terminating, already: `gputide_scheduler_preempted_pods_total` counts evictions), (pod, node)
    of each starving pod given a node to hold; `stuck`: (pod, node, victims) of each preemption's hold it kept past
    the hour for victims stuck terminating (`k8s_stuck`)."""

    def __init__(self, api: _Api, scheduler_name: str, reservation_annotation: str, clock: Callable[[], float], *,
                 preemption: bool = True, starving_s: float = 600.0, halted: Callable[[], bool] = lambda: False,
                 hot_taint_key: str = HOT_TAINT_KEY) -> None:
        self.api, self.scheduler_name, self.reservation_annotation = api, scheduler_name, reservation_annotation
        self.hot_taint_key = hot_taint_key   # gputide's own short-lived taint: pauses a preemption (`_paused`)
        self.preemptor = Preemptor(api, scheduler_name, reservation_annotation, clock, halted=halted)
        # a victim whose unanswered eviction is found landed as its hold is released (a binding there, too) counts
        self.preemptor.on_landed = lambda victim, node: self.preempted.append((victim, node))
        self.preemptor.on_gone = self._gone   # a victim read gone (404): its room free for the pass (`_freed`)
        self.preemption, self.starving_s = preemption, starving_s
        self.preempted: list[tuple[str, str]] = []
        self.starving: list[tuple[str, str]] = []
        self.stuck: list[tuple[str, str, tuple[str, ...]]] = []
        self._lapsing: dict[tuple[str, str, str], float] = {}   # holds not kept past the hour, logged (`k8s_stuck`)
        self._bound: Callable[[], Iterable[Usage]] = tuple
        self._by_node: dict[str, list[Usage]] | None = None
        self._evicted: dict[str, list[Usage]] = {}   # node -> the pods evicted from it in this pass (`_leaving`)
        self._freed: dict[str, set[str]] = {}   # node -> the keys of its pods read gone in this pass (`_gone`)

    def start_pass(self, bound: Callable[[], Iterable[Usage]]) -> None:
        """A new pass: `bound()` gives its bound and assumed pods, read only if some pod fits nowhere."""
        self.preempted, self.starving, self.stuck = [], [], []
        self._bound, self._by_node, self._evicted, self._freed = bound, None, {}, {}

    def for_unplaced(self, req: Json, view: list[Json], index: dict[str, int], offers: Offers, now: float) -> str:
        """For a pod no node has room for (`offers` was last asked about it): preempt, else hold a node if it
        starves. What was done, as a sentence to append to why it waits ("" when nothing); while nothing was, the
        victims it passes over (`Preemptor.passed_over_said`: unsaid, it read only "Insufficient ..." though a
        victim there would make room), asked only where it may preempt: none is passed over otherwise, and the bound
        pods are grouped (`_bound_by_node`) for no one."""
        if did := self.preempt(req, view, index, offers):
            return did
        may = self.preemption and req["preempt"]
        passed = self.preemptor.passed_over_said(req, self._bound_by_node()) if may else ""
        return passed + self.hold_for_starving(req, view, index, offers, now)

    def preempt(self, req: Json, view: list[Json], index: dict[str, int], offers: Offers) -> str:
        """Preempt for a pod no node fits (balancer/actuate/k8s_preempt.py): " preemption: <what was done>", or ""
        when preemption is off, the pod opts out, already holds a node while its victims terminate, or no node
        can make room. A pod holding a node where an eviction failed evicts the victims left there instead
        (`resume`). The reservation made holds the node for the rest of the pass too, and the victims are no
        one else's victims in it."""
        if not self.preemption or not req["preempt"]:
            return ""
        if offers.holds_for(req):
            return self.resume(req, view, offers)
        if req["pod_affinity"]:   # victims would change where pods run: not weighed
            return " preemption: not considered for a pod with required pod affinity or anti-affinity."
        bound = self._bound_by_node()
        try:
            choice = self.preemptor.plan(req, self._candidates(req, view, offers), bound)
            if choice is None:
                return ""
            done = self.preemptor.preempt(req, choice)
        except ActuationError as err:
            log.warning("scheduler %s: preemption for %s failed: %s", self.scheduler_name, req["name"], err)
            return f" preemption failed: {err}."
        self._off(bound, choice.node, {v.key for v in choice.victims} - set(done.left))
        self._hold(req, index[choice.node], view, offers, done.entry)
        self._clear_lower(req, index[choice.node], view, offers)
        self.preempted += [(v, choice.node) for v in done.evicted]   # not those gone or terminating: no eviction
        did = self._preempted_said(choice.node, done, [p.key for p in choice.awaiting])
        log.info("scheduler %s: %s: %s", self.scheduler_name, req["name"], did)
        return f" preemption: {did}{self._left_said(choice.node, done)}."

    @staticmethod
    def _preempted_said(node: str, done: Evictions, awaiting: Collection[str] = ()) -> str:
        """What a preemption did, as words: the victims it evicted, those found gone or terminating already (not
        said evicted: no eviction was made, `_found_said`); where it evicted none, that it holds the node all the
        same. A choice may name no victim (`balancer.plan.preemption.choose`: the pod fits there by what preemption
        weighs): it was said to be "preempting 0 pod(s)", while it only held the node and waits there for what
        refuses it. A victim whose eviction got no answer (`Evictions.unanswered`: it may have landed) is said as
        such: it was said "nothing to preempt", while the node stays held for the next pass to judge it (what the
        next pass does, `_left_said` says). The pods terminating already whose room it waits for besides
        (`awaiting`: `Preemption.awaiting`, never victims) are said as those found terminating are; where they are
        all it waits for, that it waits for them there: it was said "nothing to preempt on <node> (no pod of lower
        priority takes the room it needs there)", though they take it until they are gone."""
        if done.evicted:
            found = Holds._found_said(done, awaiting)
            return (f"preempting {len(done.evicted)} pod(s) of lower priority on {node}: "
                    f"{', '.join(sorted(done.evicted))}" + (f" ({found})" if found else ""))
        held = f"{node} held for it until {done.entry.get('expires', 'its expiry')}"
        if awaiting and not done.done and not done.left:   # no victim: it only waits
            return f"{Holds._terminating_said(done, awaiting)}, to free room on {node}: {held}"
        gone = Holds._gone_said(done)
        unsure = done.unanswered and f"the eviction of {', '.join(done.unanswered)} sent, no answer yet"
        if found := "; ".join(s for s in (gone and f"its victims {gone}", Holds._terminating_said(done, awaiting),
                                          unsure) if s):
            return f"no pod evicted on {node}, {found}: {held}"
        return f"nothing to preempt on {node} (no pod of lower priority takes the room it needs there): {held}"

    @staticmethod
    def _gone_said(done: Evictions) -> str:
        """The victims a preemption found gone already (deleted, or no longer on the node), as words ("" when none):
        their room is made, but no eviction was, so they are not counted as preempted (`preempted`)."""
        return f"{', '.join(sorted(done.gone))} gone already" if done.gone else ""

    @staticmethod
    def _terminating_said(done: Evictions, awaiting: Collection[str] = ()) -> str:
        """The victims a preemption found terminating already (`Evictions.terminating`), with the pods terminating
        already it waits for besides (`awaiting`), as words ("" when none): the pod waits for them, but no eviction
        was made, so they are neither counted (`preempted`) nor said evicted. They were: a victim its owner was
        deleting, or one evicted by a replica that lost the Lease before writing it down, was said "evicted" (or
        "preempting 1 pod(s)") and counted, by the replica that made no eviction."""
        waits = sorted({*done.terminating, *awaiting})
        return f"waiting for {', '.join(waits)}, terminating already" if waits else ""

    @staticmethod
    def _found_said(done: Evictions, awaiting: Collection[str] = ()) -> str:
        """The victims a preemption found gone or terminating already, and the pods terminating already it waits
        for besides (`awaiting`), as words ("" when none)."""
        return "; ".join(s for s in (Holds._gone_said(done), Holds._terminating_said(done, awaiting)) if s)

    @staticmethod
    def _resumed_said(node: str, done: Evictions) -> str:
        """What carrying on a preemption did (`resume`), as words: the victims left it evicted, those found gone or
        terminating already (`_found_said`), or that it holds the node. Victims found gone were said (and counted)
        as evicted by it."""
        found = Holds._found_said(done)
        if done.evicted:
            return f"evicted {', '.join(sorted(done.evicted))} on {node}" + (f" ({found})" if found else "")
        return f"holding {node}" + (f" ({found})" if found else "")

    def _clear_lower(self, req: Json, i: int, view: list[Json], offers: Offers) -> None:
        """`req` preempted on node i: the holds there for pods of lower priority (`lower_holds`) are given back and
        the nominations of those that preempted are cleared, as kube-scheduler clears the nominations of
        lower-priority pods on the node it preempts on. `req` counted their room as its own: left there, such a
        pod would hold the node while its victims terminate (renewed while they do, up to the hour), evicting
        those left, for room it will not get, instead of planning afresh at its turn (the rest of this pass sees
        them gone too). Nothing once `halted()`; a write that fails is logged and they stay (they expire)."""
        node = view[i]
        lower = lower_holds(self.scheduler_name, node, req)
        if not lower or self.preemptor.halted():
            return
        try:
            self.api.update_node(node["name"], lambda n: annotation_map_change(
                n, self.reservation_annotation, dict.fromkeys(lower)))
        except ActuationError as err:
            log.warning("scheduler %s: cannot clear the holds of %s on %s for %s: %s", self.scheduler_name,
                        ", ".join(lower), node["name"], req["name"], err)
            return
        log.info("scheduler %s: %s preempted on %s: the holds of lower priority there are cleared: %s",
                 self.scheduler_name, req["name"], node["name"], ", ".join(lower))
        nominated = [k for k in lower if SINCE in node["reservations"][k]]   # a preemption's: nominated there
        node["reservations"] = {k: v for k, v in node["reservations"].items() if k not in lower}
        offers.update(i)
        for key in lower:
            self.preemptor.release(node["name"], key)
        for key in nominated:
            self.preemptor.nominate(key, None)

    def resume(self, req: Json, view: list[Json], offers: Offers) -> str:
        """For a pod that holds a node already: carry on its preemption there (`Preemptor.resume`: evict the victims
        left, keep the node held while the evicted ones terminate, past the hour while they are stuck there:
        `k8s_stuck`), " preemption: ..." saying so; "" when its reservation names no victim (a starving pod's, or its
        victims all gone). Unless the victims it names no longer make room for it there (`makes_room`), a pod it only
        waits for is stuck past its grace or its room is not coming otherwise (`_judged`), or victims are left to evict
        on a node that no longer admits the pod (`_refusal`): then none is evicted and the node is given back instead
        (`_room_taken`). With all evicted, such a node stays held up to its cap while they terminate (`k8s_stuck`).
        Rooms and stuck pods are judged on one reading of the clock (`now`: `_judged`, `_leaving`), the node's pods
        walked once for what is running, coming and stuck: each pod's room was judged on a reading of its own, and those
        stuck on yet another, so a grace ending between two readings had a pod coming in one judgment and stuck in the
        next. What follows reads the clock again for its own ends: the victims kept past the hour (`stuck_victims`, each
        read from the API server), the hold written again (`Preemptor.resume`) and its Event (`tell_stuck`)."""
        key = req["name"]
        i = next((j for j in offers.reserving if any((view[j]["reservations"].get(key) or {}).get(f)
                                                     for f in (LEFT, EVICTED))), None)
        if i is None:
            return ""
        node, bound, entry = view[i]["name"], self._bound_by_node(), view[i]["reservations"][key]
        now = self.preemptor.clock()
        # whose room is coming: not a pod made again under its name, nor one stuck past its grace (asked only of
        # the pods it waits for, `AWAITED`: `Preemptor.resume`)
        running, going, not_coming = self._judged(bound.get(node, ()), entry, now, self.preemptor.unread_ends)
        left = sorted(set(entry.get(LEFT, ())) & running)
        leaving = self._leaving(view[i], going)
        # any pod it only waits for whose room is not coming (stuck past its grace, made again there, its grace
        # ending after the hour) gives the hold back, not only one without which the GPUs, CPU and memory fall
        # short (`makes_room`): `choose` weighs extended resources and pod slots too, so a hold dropping it went
        # on waiting (up to the hour) for a device it alone frees. Planned afresh, the pod waits
        # there again where the rest suffice: no flapping, as `plan` counts as room only the pods `room_coming`
        # says are coming (the same test), so the new hold never waits for the stuck pod
        if not_coming or not makes_room(view[i], req, leaving):   # those evicted already are not spared
            # else others took the room besides (one it waits for, stuck, is counted once: another hold's victim too
            # is among `leaving`)
            stalled = makes_room(view[i], req, [*leaving, *(u for u in not_coming if u not in leaving)])
            why = {u.key: self._not_coming(u, now) for u in not_coming} if stalled else {}
            return self._room_taken(req, i, view, offers, left, not_coming=why)
        refusal = self._refusal(req, i, view, offers)
        if refusal is not None and left:   # cordoned, tainted, relabelled since: no one is evicted for nothing
            if self._only_hot(req, view[i]):   # the controller's taint, lapsing on its own: the room is kept
                return self._paused(req, i, view, left)
            return self._room_taken(req, i, view, offers, left, refusal)
        stuck = stuck_victims(self.preemptor, req, node, entry, running, refusal, self._lapsing)
        done = self.preemptor.resume(req, node, entry, running, stuck, going)
        self._off(bound, node, done.done)
        if done.give_back and not self.preemptor.halted():   # a victim that does not answer: no hold for ever
            self.preempted += [(v, node) for v in done.evicted]   # found gone after an earlier unanswered eviction
            log.info("scheduler %s: %s: %s: the node given back", self.scheduler_name, key, done.error)
            return f" preemption: {done.error}{self._give_back(req, i, view, offers)}"
        # its GPUs, CPU and memory as before (the offers' columns stand); host ports and extended resources named
        # now where they were not (`k8s_preempt.filled`) are read from the view where a pod asks them
        view[i]["reservations"] = {**view[i]["reservations"], key: done.entry}
        self.preempted += [(v, node) for v in done.evicted]   # not those gone or terminating: no eviction made
        did = self._resumed_said(node, done)
        if done.done:
            log.info("scheduler %s: %s: the rest of its victims: %s", self.scheduler_name, key, did)
        if ending := done.entry.get(EVICTED):
            did += f" while {', '.join(ending)} terminate(s) (held until {done.entry['expires']})"
        if kept := kept_past_cap(done.entry):
            self.stuck.append((key, node, tuple(kept)))
            did += stuck_said(node, kept)
            if not kept_past_cap(entry):   # the hold passes the hour now: said once on the pod
                tell_stuck(self.preemptor, req, node, kept, entry)
        return f" preemption: {did}{self._left_said(node, done)}."

    def _room_taken(self, req: Json, i: int, view: list[Json], offers: Offers, victims: list[str],
                    refusal: str | None = None, not_coming: Mapping[str, str] | None = None) -> str:
        """`req`'s victims on node i no longer make room for it there (`resume`): others took the room its evictions
        made, or hold it (a more important pod bound there, its hold not being held against it, or holding it; a pod
        someone else bound there); or the room of a pod it only waited for is not coming (`not_coming`: key -> why,
        `_judged`, `_not_coming`: said so, not "others took" it); or, with victims left to evict, the node no longer
        admits it (`refusal`: cordoned, tainted, relabelled since its preemption began; kube-scheduler too lets a pod
        whose nominated node became unresolvable preempt elsewhere). None of the `victims` (those left to evict, still
        there) is evicted (killed for room it would not get), the node is given back and its nomination cleared: it
        plans afresh at the next pass (elsewhere, or there with other victims). Nothing once `halted()`; a write that
        fails is logged, and the next pass asks again."""
        key, node = req["name"], view[i]["name"]
        if self.preemptor.halted():
            return ""
        stalled = self._not_coming_said(not_coming or {})
        why = (f"no longer admits it ({refusal})" if refusal else f"no longer makes room for it ({stalled})"
               if stalled else "no longer makes room for it (taken meanwhile)")
        log.info("scheduler %s: %s: %s %s: %s not evicted, the node given back", self.scheduler_name, key, node, why,
                 ", ".join(victims) or "no victim")
        said = (f" preemption: {node} no longer admits it ({refusal})" if refusal else
                f" preemption: the room it waits for on {node} is not coming ({stalled})" if stalled else
                f" preemption: its victims no longer make room for it on {node} (others took or hold the room its "
                "evictions made)") + (f": {', '.join(victims)} not evicted" if victims else "")
        return said + self._give_back(req, i, view, offers)

    @staticmethod
    def _not_coming(pod: Usage, now: float) -> str:
        """Why the room of `pod`, a pod a hold only waits for (`AWAITED`) still there terminating, is not coming at
        `now` (`room_coming` says it is not), as `_not_coming_said` groups it: "stuck" past its grace
        (`past_grace`: a finalizer, a kubelet that hangs), made again on its node ("back": a DaemonSet's, a static
        pod's mirror, `Usage.comes_back`), or its grace ending after the hour a hold lasts ("late": its owner
        deleted it with a long grace, after the eviction of a victim found it terminating). All were said stuck
        past their grace, a minute into a grace of two hours."""
        return "stuck" if past_grace(pod.deleting, now) else "back" if pod.comes_back else "late"

    @staticmethod
    def _not_coming_said(why: Mapping[str, str]) -> str:
        """The pods a hold waited for whose room is not coming (`why`: key -> `_not_coming`), as words grouped by
        why ("" when none): "X, waited for, is stuck terminating past its grace: a finalizer, or a kubelet that
        hangs?", "Y, waited for, is made again on its node (...)", "Z, waited for: its grace ends after the hour a
        hold lasts"."""
        said = []
        for reason, sep, one, many, hint in _NOT_COMING:
            if keys := sorted(k for k, r in why.items() if r == reason):
                said.append(f"{', '.join(keys)}, waited for{sep} {one if len(keys) == 1 else many}{hint}")
        return "; ".join(said)

    def _give_back(self, req: Json, i: int, view: list[Json], offers: Offers) -> str:
        """`req`'s hold on node i given back (`_room_taken`; `resume`: a victim whose evictions go unanswered,
        `Evictions.give_back`): off the node, out of the pass's view (the pods after it in the pass may use the
        room), its nomination cleared; it plans afresh at the next pass. What was done, as words; a write that
        fails is logged and said, and the next pass asks again (or the hold expires)."""
        key, node = req["name"], view[i]["name"]
        try:
            self.api.update_node(node, lambda n: annotation_map_change(n, self.reservation_annotation, {key: None}))
        except ActuationError as err:
            log.warning("scheduler %s: cannot give %s back for %s: %s", self.scheduler_name, node, key, err)
            return f"; giving the node back failed ({err})."
        view[i]["reservations"] = {k: v for k, v in view[i]["reservations"].items() if k != key}
        offers.update(i)
        self.preemptor.release(node, key)
        self.preemptor.nominate(key, None)
        return "; the node is given back and it plans afresh at the next pass."

    def _only_hot(self, req: Json, node: Json) -> bool:
        """Whether the only rule of `node` that refuses `req` is gputide's hot taint (`hot_taint_key` NoSchedule: a
        Migrate's or the controller's, which lapses on its own, `gputide.io/hot-until`)."""
        hot = [t for t in node["taints"] if t.key == self.hot_taint_key and t.effect == "NoSchedule"]
        return bool(hot) and model_allows(node, req) and rule_refusal(
            {**node, "taints": tuple(t for t in node["taints"] if t not in hot)}, req) is None

    def _paused(self, req: Json, i: int, view: list[Json], victims: list[str]) -> str:
        """`req`'s preemption on node i paused while gputide's hot taint is there (`resume`): given back, the node
        would lose the room the victims evicted already made, and the pod preempt again elsewhere, evicting more
        pods for a node that admits it again within minutes. No victim is evicted into the hot node meanwhile, and
        the hold is renewed as it runs out up to the taint's expiry (`gputide.io/hot-until`) and a minute more,
        never past the hour from the preemption's start (`Preemptor.hold_paused`): left to lapse after `reserve_s`,
        it ran out under a taint of 15 min or more, and the pod preempted elsewhere anyway. The preemption carries
        on once the taint goes, or the pod plans afresh once the hold expires."""
        key, name = req["name"], view[i]["name"]
        entry = self.preemptor.hold_paused(req, name, view[i]["reservations"][key])
        # its GPUs, CPU and memory as before (the offers' columns stand); its priority, host ports and extended
        # resources, written now where they were not (`k8s_preempt.ranked`, `filled`), are read from the view
        view[i]["reservations"] = {**view[i]["reservations"], key: entry}
        until = entry.get("expires", "its expiry")
        log.info("scheduler %s: %s: %s tainted %s: preemption paused, %s not evicted, the node held until %s",
                 self.scheduler_name, key, name, self.hot_taint_key, ", ".join(victims), until)
        return (f" preemption: paused while {name} is tainted {self.hot_taint_key} (gputide's, lapsing on its own): "
                f"{', '.join(victims)} not evicted until it goes; {name} held until {until}.")

    @staticmethod
    def _refusal(req: Json, i: int, view: list[Json], offers: Offers) -> str | None:
        """Why node i no longer admits `req` (`offers` was last asked about it), None when it does: its hold is then
        kept no longer than its cap. A host port it needs taken there by any pod, or held there for another whose
        hold counts against it (`port_refusal`: of equal or higher priority, or not saying its own), is said as
        such: it was said to be the pod's affinity or GPU model, which admitted it."""
        if i in offers.admitted().tolist() and model_allows(view[i], req):
            return None
        return rule_refusal(view[i], req) or port_refusal(view[i], req) or "its pod affinity or GPU model"

    @staticmethod
    def _left_said(node: str, done: Evictions) -> str:
        """What a preemption's evictions left undone, as words ("" when nothing): the node stays held, while the
        victims it evicted, or found terminating already (`Evictions.terminating`), terminate. It said "while the
        evicted pods terminate" where none was evicted, its only victims found terminating already. Where it
        neither evicted nor found any terminating (`resume`, its first eviction refused again: those evicted at an
        earlier pass are said by the caller), only that the node stays held. Victims that could not be read
        (`Evictions.unread`: whether their unanswered eviction landed) are read again at the next pass: they were
        said "evicted at the next pass", and failing there as "evicting X failed (cannot read X ...)"; where such a
        victim still ran as the pass saw it, the victim after it, never tried, was said failed with its read's
        error (the error is the first victim left's: `Evictions.left`). So is a
        victim whose eviction got no answer now (`Evictions.unanswered`): the next pass reads it, counting it where
        the eviction landed, asking it again where it still runs; it was said both "judged at the next pass" and
        "evicted at the next pass". One no longer asked (`EvictionUnanswered`) is not evicted: the node is given back
        once nothing else leaves it (`Preemptor.resume`)."""
        if not done.left:
            return ""
        waited = " and ".join(w for w in ("the evicted pods" if done.evicted else "",
                                          "those found terminating already" if done.terminating else "") if w)
        held = f"{node} stays held{f' while {waited} terminate' if waited else ''}"
        if isinstance(done.error, EvictionUnanswered):
            return f"; {done.error}: {held}, then it is given back"
        reread = [v for v in done.left if v in done.unread or v in done.unanswered]   # did their eviction land?
        evict = [v for v in done.left if v not in reread]
        then = " and ".join(f"{', '.join(vs)} {'is' if len(vs) == 1 else 'are'} {what}"
                            for vs, what in ((evict, "evicted"), (reread, "read again")) if vs)
        # the error is the first victim left's (`Evictions.left`): a read's where it is read again (`unread_error`)
        first = done.left[0]
        failed = (f"evicting {first} got no answer ({done.error})" if done.unanswered else
                  str(done.error) if first in reread else f"evicting {first} failed ({done.error})")
        return f"; {failed}: {held}, and {then} at the next pass"

    def hold_for_starving(self, req: Json, view: list[Json], index: dict[str, int], offers: Offers,
                          now: float) -> str:
        """Anti-starvation: a pod pending longer than `starving_s` that fits nowhere and preempts no one holds the
        node closest to fitting it (a reservation of what it asks, `Preemptor.reserve`, renewed while it waits), so that
        what frees up there goes to it instead of to smaller pods that keep arriving.
        " waiting <m> min: holding <node> ...", or ""."""
        created = parse_time(req["created"])
        if not created or now - created < self.starving_s or offers.holds_for(req):
            return ""
        node = closest_to_fitting(req, self._candidates(req, view, offers))
        if node is None or not self._hold_starving(req, node, view, index, offers):
            return ""
        return (f" Waiting {(now - created) / 60:.0f} min: holding {node} ({self._reserved_said(req)} reserved) as "
                f"{'GPUs' if req['num_gpu'] else 'they'} free up there.")

    @staticmethod
    def _reserved_said(req: Json) -> str:
        """What a starving pod's hold reserves of what it waits for, as words (`closest_to_fitting` ranks the nodes
        by the same): its GPUs where it asks whole GPUs; the MIG instances it asks where it asks those and no whole
        GPU (`mig_asked`); else the CPU and memory it asks; where it asks neither, the extended resources it asks
        (an RDMA device; not the pod slot every pod takes). Such pods were said to hold "0 GPUs", and to wait for
        GPUs; one asking only an RDMA device was said to hold "no GPU, CPU or memory", though its hold reserves the
        device."""
        if req["num_gpu"]:
            return f"{req['num_gpu']} GPUs"
        if mig := mig_asked(req):
            return _amounts_said(mig)
        asked = [said for n, said in ((req["cpu_milli"], f"{req['cpu_milli']}m CPU"),
                                      (req["memory_mib"], f"{req['memory_mib']} MiB memory")) if n]
        extended = {k: v for k, v in req["extended"].items() if k != "pods" and v}
        return ", ".join(asked) or _amounts_said(extended) or "no GPU, CPU, memory or extended resource"

    def hold_for_starving_group(self, members: list[Json], view: list[Json], index: dict[str, int], offers: Offers,
                                now: float) -> str:
        """Anti-starvation for a pod group that cannot be placed whole (`k8s_gang`): once its oldest pending member
        has waited longer than `starving_s`, each member that holds no node yet holds the node closest to fitting
        it, the biggest first, each seeing the holds made before it (two members never count on the same GPUs).
        Members that share an unbound WaitForFirstConsumer claim (`k8s_gang.sharers`) can only run on one node,
        the one the claim is given as the first of them is bound (`k8s_gang.trial` keeps them there): they hold
        one node, closest to fitting them all and admitting each (`_part_node`), where one of them holds a node
        already, that one. What frees up there then goes to the group until every member fits, and the group is
        bound together, instead of to single pods that keep arriving. " Waiting <m> min: holding ...", or ""."""
        created = [t for m in members if (t := parse_time(m["created"]))]
        if not created or now - min(created) < self.starving_s:
            return ""
        held = []
        for part in sorted((together(p) for p in sharers(members)), key=lambda t: (
                -t["num_gpu"], -t["cpu_milli"], -t["memory_mib"], t["name"])):
            node = self._part_node(part, view, offers)
            for m in part["members"] if node is not None else ():
                if not offers.holds_for(m) and self._hold_starving(m, node, view, index, offers):
                    held.append(f"{m['name']} on {node}, {self._reserved_said(m)} reserved")
        if not held:
            return ""
        return (f" Waiting {(now - min(created)) / 60:.0f} min: holding nodes for the group's members "
                f"({'; '.join(held)}) as what each waits for frees up there.")

    def _part_node(self, part: Json, view: list[Json], offers: Offers) -> str | None:
        """The node a part of a starving pod group (`together`: members that must run on one node) holds for those
        of its members that hold none yet: the node closest to fitting them all (`closest_to_fitting`) among those
        that admit every one of them, and that some member holds already if one does (they must run on one node).
        None when there is none (a member's hold that leaves no room for the rest lapses, and then they are
        weighed together again), or every member holds one."""
        rest = [m for m in part["members"] if not offers.holds_for(m)]
        if not rest:
            return None
        mine = {view[i]["name"] for i in offers.reserving for m in part["members"] if reservation_key(view[i], m)}
        candidates: set[str] = set()
        for k, m in enumerate(rest):
            offers.fitting(m)
            names = {n["name"] for n in self._candidates(m, view, offers)}
            candidates = names if k == 0 else candidates & names
        if mine:   # kept to the node a member holds (they were held together; the closest if they hold several)
            candidates &= mine
        return closest_to_fitting(together(rest), [n for n in view if n["name"] in candidates])

    @staticmethod
    def _candidates(req: Json, view: list[Json], offers: Offers) -> list[Json]:
        """The nodes `req` may preempt on or hold (`offers` was last asked about it): those its placement rules
        and pod affinity admit, of a GPU model it may run on."""
        return [view[i] for i in offers.admitted() if model_allows(view[i], req)]

    def _hold_starving(self, req: Json, node: str, view: list[Json], index: dict[str, int], offers: Offers) -> bool:
        """Reserve `node` for the starving `req`, for the rest of the pass too; False when the API refused (logged:
        the next pass tries again)."""
        try:
            entry = self.preemptor.reserve(req, node)
        except ActuationError as err:
            log.warning("scheduler %s: cannot hold %s for %s: %s", self.scheduler_name, node, req["name"], err)
            return False
        self._hold(req, index[node], view, offers, entry)
        self.starving.append((req["name"], node))
        return True

    @staticmethod
    def _hold(req: Json, i: int, view: list[Json], offers: Offers, entry: Json) -> None:
        """The reservation `entry` just made for `req` on node i holds it for the rest of the pass."""
        view[i]["reservations"] = {**view[i]["reservations"], req["name"]: entry}
        offers.update(i)

    def release_elsewhere(self, req: Json, i: int, view: list[Json], offers: Offers) -> None:
        """A pod that held other nodes for itself (preemption, starvation: reservations under its own name) and was
        bound to node i gives them back at once rather than when they expire (i = -1: it was bound by someone else
        or deleted, every node it held is given back). Every node is given back before any hold is released
        (`Preemptor.release` reads the victims whose eviction got no answer), as in `release_gone`."""
        key, given = req["name"], []
        for j in list(offers.reserving):   # the few nodes with reservations, not every node
            node = view[j]
            if j != i and key in node["reservations"]:
                node["reservations"] = {k: v for k, v in node["reservations"].items() if k != key}
                offers.update(j)
                try:
                    self.api.update_node(node["name"], lambda n: annotation_map_change(
                        n, self.reservation_annotation, {key: None}))
                except ActuationError as err:   # it expires on its own
                    log.warning("scheduler %s: cannot release %s on %s: %s", self.scheduler_name, key,
                                node["name"], err)
                given.append(node["name"])
        for name in given:   # their reads after every give-back (`release_gone`)
            self.preemptor.release(name, key)

    def release_gone(self, view: list[Json], waiting: Collection[str]) -> None:
        """Give back at once the nodes this scheduler holds for pods no longer `waiting` (its pending pods, as the
        pass read them: deleted, bound by anyone, finished), out of `view` (before the pass's filters are built) and
        off the nodes; they held the room for no one until they expired (`reserve_s`), while other pods waited.
        Nothing is written or read once `halted()` (the pass stops; the next leader does it, and this replica's next
        term forgets what it doubted: `Preemptor.forget`). A write that fails is logged: the reservation expires on
        its own. Each hold is released (`Preemptor.release`, which reads the victims whose eviction got no answer,
        to count those that left) after every node is given back: its reads came first (or before the next node's
        give-back), and an API hanging on them spent the pass's time on them, the give-back waiting a pass, the node
        held for no one; and they were made, and an Event `Preempted` posted, while halted. Halted after the
        give-backs (the Lease lost in one of them, or in a read), the releases read nothing more and drop the
        doubts (`Preemptor.release`): a doubted victim's eviction that landed then goes uncounted, with no Event
        `Preempted`, as it does where this replica's next term forgets it."""
        given: list[tuple[str, list[str]]] = []
        for node in view:
            gone = holds_of(self.scheduler_name, node, waiting) if node["reservations"] else []
            if not gone:
                continue
            node["reservations"] = {k: v for k, v in node["reservations"].items() if k not in gone}
            if self.preemptor.halted():
                continue
            log.info("scheduler %s: %s no longer wait(s) for a node: %s given back", self.scheduler_name,
                     ", ".join(gone), node["name"])
            try:
                self.api.update_node(node["name"], lambda n, g=gone: annotation_map_change(
                    n, self.reservation_annotation, dict.fromkeys(g)))
            except ActuationError as err:   # it expires on its own
                log.warning("scheduler %s: cannot release %s on %s: %s", self.scheduler_name, ", ".join(gone),
                            node["name"], err)
            given.append((node["name"], gone))
        for name, gone in given:
            for key in gone:
                self.preemptor.release(name, key)

    def _off(self, bound: dict[str, list[Usage]], node: str, evicted: Collection[str]) -> None:
        """The pods `evicted` from `node` for a preemption are no one else's victims for the rest of the pass: off
        `bound`, kept apart as leaving the node (`_leaving`)."""
        kept, leaving = [], []
        for u in bound.get(node, ()):
            (kept if u.key not in evicted else leaving).append(u)
        bound[node] = kept
        self._evicted.setdefault(node, []).extend(leaving)

    def _gone(self, victim: str, node: str) -> None:
        """`victim`, bound on `node` as the pass listed it, read gone (404; `Preemptor.on_gone`): by an eviction's read
        (`Evictions.gone`, and the `went` that `_evict` finds gone after an earlier unanswered eviction), or by the
        read of a victim whose eviction got no answer as its hold is given back (`Preemptor._went` at `release`:
        `_room_taken`, `_clear_lower`; that hold no longer naming it, no other hold counts it as leaving). Its room is
        free for the rest of the pass (`_freed`: its key, counted by every hold there, `_leaving`), as it is found so,
        whatever the evictions after it do, and whenever it is read: before the pass groups its bound pods (a hold
        given back as the pass begins, `release_gone`, or for a pod bound elsewhere, `release_elsewhere`), or after
        an earlier preemption took it off them (`_off`). Not one found terminating (its room is the holds' that name
        it), nor one the pass's list no longer shows (`_judge`'s found gone: its room is free in the view already).
        Dropped, its room stayed taken for the whole pass (the pass's list, read before the release, still shows it),
        and a hold there resumed in the pass and needing that room was given back as though others took it. Such a
        victim stays among the bound pods (`_off` takes it off only where the preemption holds the node, its room then
        the preemptor's): a pod preempting later in the pass may count its room as a victim's, its eviction finding
        it gone."""
        self._freed.setdefault(node, set()).add(victim)

    @staticmethod
    def _judged(on_node: Iterable[Usage], entry: Json, now: float,
                unread: UnreadEnds) -> tuple[set[str], set[str], list[Usage]]:
        """Of `on_node`, the pods bound on the node a preemption's hold `entry` holds, judged in one walk at `now`:
        the keys of those running there, of those whose room is coming (`room_coming`), and the pods the hold only
        waits for (`AWAITED`) that are still there, terminating, their room no longer coming (stuck past their
        grace, made again on the node, or their grace ending after the hour a hold lasts: `_not_coming` says which):
        the hold is given back (`resume`). Only those stuck while their GPUs, CPU and memory were short gave
        it back: one freeing an RDMA device the pod needs (which `makes_room` does not weigh) was dropped from the
        hold, the pod waiting for the rest (up to the hour) for a device that never came, where it would have
        evicted a pod holding one elsewhere at once. `unread`: the pods with an unreadable time warned of
        (`room_coming`)."""
        waited, running, going, stuck = set(awaited_of(entry)), set(), set(), []
        for u in on_node:
            running.add(u.key)
            if room_coming(u, now, unread):
                going.add(u.key)
            elif u.terminating and u.key in waited:
                stuck.append(u)
        return running, going, stuck

    def _leaving(self, node: Json, going: Collection[str]) -> list[Usage]:
        """The pods leaving `node` (`k8s_reads.Usage`): those a preemption's hold there names as its victims (to evict,
        or terminating), still bound there or evicted earlier in the pass (the pass's view of the node still counts
        them). Any hold's, not only the pod's own: a hold held against the pod counts the room its victims free, which
        is that hold's, not taken from the room the pod waits for (a pod as important that preempted there, evicting
        some of the pod's own victims with its own). One a hold only waits for (`AWAITED`, found terminating already)
        only while the pod of its name there is one whose room is coming (`going`: the keys of those `_judged` found
        coming, by `room_coming`, at the reading of the clock it judged on; asked again here, each pod's room was judged
        twice on the same reading): one made again under its name (a StatefulSet's web-0, back on its node), running,
        frees nothing, and counted as leaving it kept the pod waiting there up to the hour; one stuck past its grace (a
        finalizer) frees nothing either, and counted it pinned the pod there for ever (its hold kept past the hour, said
        stuck), where planned afresh it preempts elsewhere. (A victim evicted for a hold is matched by name, as before:
        the pass's list may not show it terminating yet; one stuck keeps the hold past the hour, `k8s_stuck`: it was
        killed for this node.) Each hold's own `AWAITED` decides for the pods that hold names: one hold evicted X (its
        room that hold's), another only waits for X; with X stuck, the waits of all holds merged dropped it from the
        room the first hold's victims free, and that hold was given back as though others took the room. One evicted
        earlier in the pass (`_evicted`: evicted, or found terminating or gone, by the eviction's own read) is leaving
        whichever hold names it: its `Usage` is the pass's list, read before, so `room_coming` would judge a reading
        that no longer holds. One a preemption's eviction found terminating (its owner deleting it since the list, so
        within its grace) is only waited for (`AWAITED`), and judged by that stale reading (not terminating) its room
        was not coming: another hold on the node resumed later in the pass was given back as though others took the room
        it frees. One read gone in the pass (`_freed`, `_gone`: by an eviction, 404, or gone after an earlier
        unanswered eviction; or by the release's read of a victim in doubt, its hold given back) is named by no hold
        (nothing to wait for), yet the pass's view of the node still counts its room as taken: it is counted whatever
        names it, its room free, whether still among the bound pods or evicted earlier in the pass (once: `_off`
        moves it from one to the other). Counted only where named, it was not, and such a hold was given back in the
        same pass as though others took the room."""
        named, sure = set(), set()   # named by a hold; named by one that does not only wait for it
        for e in node["reservations"].values():
            victims, waited = {k for f in (LEFT, EVICTED) for k in e.get(f) or ()}, set(awaited_of(e))
            named |= victims
            sure |= victims - waited
        gone = self._freed.get(node["name"], ())
        return [*(u for u in self._bound_by_node().get(node["name"], ())
                  if u.key in gone or u.key in sure or u.key in named and u.key in going),
                *(u for u in self._evicted.get(node["name"], ()) if u.key in named or u.key in gone)]

    def _bound_by_node(self) -> dict[str, list[Usage]]:
        """The bound (and assumed) pods per node, for preemption: grouped at most once per pass, and only when a
        pod fits nowhere. (The pods warned of for an unreadable `deletionTimestamp` were forgotten as the pass began,
        before any is judged in it: `k8s_scheduler.SecondaryScheduler._read_pass`.)"""
        if self._by_node is None:
            self._by_node = {}
            for u in self._bound():
                self._by_node.setdefault(u.node, []).append(u)
        return self._by_node


def _amounts_said(amounts: dict[str, float]) -> str:
    """Resources and their amounts, as words ("2 nvidia.com/mig-1g.10gb, 10Gi ephemeral-storage, 1 rdma/hca"; ""
    when none), each amount a Kubernetes quantity (`_quantity_said`)."""
    return ", ".join(f"{_quantity_said(k, v)} {k}" for k, v in sorted(amounts.items()))


# the suffixes a quantity of bytes is said with (apimachinery's binary and decimal SI ones)
_BYTE_SUFFIXES = (("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40), ("Pi", 2**50), ("Ei", 2**60),
                  ("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12), ("P", 10**15), ("E", 10**18))


def _quantity_said(resource: str, amount: float) -> str:
    """`amount` of `resource` as the Kubernetes quantity a person would write, exactly: bytes (memory,
    ephemeral-storage, hugepages-<size>) with the suffix that divides them whole into the smallest number ("10Gi",
    "1536Mi", "500M"; else the whole number of bytes); a count as a whole number ("2", "1000000"); a fraction in
    thousandths ("500m", "1500m", as CPU is said), finer ones as the number in full; bytes not whole are rounded up
    first. Amounts were said as floats: a pod
    asking 10Gi of ephemeral-storage was told "1.07374e+10 ephemeral-storage", which is not what it asks, rounded."""
    amount = float(amount)
    if not math.isfinite(amount):
        return f"{amount:g}"
    of_bytes = resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")
    if of_bytes:   # bytes are counted whole, rounded up, as the scheduler counts them ("1.1111111Gi": 1193046352)
        amount = float(math.ceil(amount))
    if not amount.is_integer():
        milli = amount * 1000
        return f"{round(milli)}m" if abs(milli - round(milli)) < 1e-6 else repr(amount)
    n = int(amount)
    if n and of_bytes:
        said = [(n // scale, suffix) for suffix, scale in _BYTE_SUFFIXES if n % scale == 0]
        if said:   # "1000Ki" rather than "1024k", "4096M" than "4000000Ki"
            whole, suffix = min(said, key=lambda s: abs(s[0]))
            return f"{whole}{suffix}"
    return str(n)
