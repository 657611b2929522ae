"""Preemption victims stuck terminating: a hold kept past its hour, and said (balancer/actuate/k8s_holds.py).

A preemption holds its node while its victims terminate, at most `MAX_HOLD_S` (an hour) from its start
(`k8s_preempt.noted`). A victim can outlast that: a finalizer no one removes, a volume that does not unmount, a
kubelet that hangs. Given back then, the node was held for no one while the victim's GPUs were still taken, and
the pod, holding nothing, preempted again: the same victim (another hour), or more pods elsewhere, while the room
the first victim freed at last went to whoever came first. As kube-scheduler does (a pod whose nominated node still
has a pod of lower priority terminating does not preempt again), the hold is now kept past the hour, `reserve_s`
at a time, for as long as:

* a victim it names is still there: read from the API server at each renewal past the hour, still on that node and
  terminating (`deletionTimestamp`, not Succeeded or Failed), past its grace (that `deletionTimestamp`, the
  deletion's time plus its grace period, and `GRACE_SLACK_S` more). One gone, or a new pod by its name that is not
  terminating (a StatefulSet's), holds nothing: once none is left the hold lapses. Nor is one within its grace
  stuck (its owner deleted it with a grace of 2 h): it was said stuck at the hour, with an Event and the alert, while
  it was doing what it was told; the hold lapses at the hour and the pod plans afresh (it waits for the pod again,
  its room still coming: `k8s_preempt.room_coming`);
* the node still admits the pod by its rules (cordon, taints, selectors, affinity, GPU model): a node whose kubelet
  stopped answering is tainted `node.kubernetes.io/unreachable`, the pod could never be bound there, so the hold
  lapses at the hour and the pod may preempt elsewhere (kube-scheduler: its nominated node is unresolvable);
* the pod still waits for this scheduler (`Holds.release_gone`, `release_elsewhere`: deleted or bound anywhere, its
  holds are given back at once) and this scheduler leads and renews it (unrenewed, it expires within `reserve_s`).

Said: a warning in the log at each renewal past the hour naming the victims, the node and the pod; a Warning Event
`PreemptionStuck` on the pending pod when its hold first passes the hour; its FailedScheduling message; and
`Holds.stuck`, the holds so kept in the last pass (`SecondaryScheduler.stuck_holds`).

A pod the hold only waits for (`k8s_preempt.AWAITED`: terminating already as the hold began) keeps it past the hour
never: within its grace it is not stuck, and past it (or where its room will not come for another reason: its grace ends
after the hour, a DaemonSet's or static pod's, made again on its node) its room is not coming
(`k8s_preempt.room_coming`), so the hold is given back and the pod plans afresh (`Holds.resume`), preempting elsewhere
where it would have; kept, it pinned the pod to its node for ever, said stuck. Where such a pod is named (its hold at
the hour on a node that no longer admits the pod), it is said "waited for" rather than "evicted for it" (a hold without
that field, an older gputide's, says every one evicted).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from balancer.actuate.k8s_actuator import post_event
from balancer.actuate.k8s_preempt import (
    EVICTED,
    MAX_HOLD_S,
    SINCE,
    Preemptor,
    awaited_of,
    capped,
    past_grace,
)
from balancer.actuate.kubernetes import NotFoundError, parse_time, rfc3339
from balancer.errors import ActuationError

log = logging.getLogger(__name__)
Json = dict[str, Any]
STUCK_REASON = "PreemptionStuck"   # the Warning Event on the pending pod when its hold first passes the hour


def stuck_victims(preemptor: Preemptor, req: Json, node: str, entry: Json, running: Collection[str],
                  refusal: str | None, said: dict[tuple[str, str, str], float]) -> list[str] | None:
    """Where `req`'s preemption hold `entry` on `node` reaches its cap with victims still among `running` (the pods
    bound there, as the pass read them): the victims still there, terminating past their grace, each read (module
    docstring).
    None while the cap is not reached, or where `refusal` says why the node no longer admits the pod (None: it
    does): nothing is asked, and `noted` renews the hold as before, up to its cap (logged once per hold: `said`,
    (pod, node, since) -> when, kept by the caller, forgotten after `reserve_s`, by when such a hold has lapsed)."""
    now = preemptor.clock()
    terminating = [k for k in entry.get(EVICTED) or () if k in running]
    if not capped(entry, terminating, now, preemptor.reserve_s):
        return None
    who, ago = f"scheduler {preemptor.scheduler_name}: {req['name']}", _ago(entry, now)
    if refusal is not None:
        for k in [k for k, t in said.items() if now - t >= preemptor.reserve_s]:
            del said[k]
        if said.setdefault((req["name"], node, str(entry.get(SINCE))), now) == now:
            until = max(parse_time(entry.get("expires")) or now, (parse_time(entry.get(SINCE)) or now) + MAX_HOLD_S)
            log.warning("%s: %s, still terminating on %s, which no longer admits it (%s): its hold is not kept past "
                        "%s, and it may preempt elsewhere then", who, _whose(entry, terminating, "it", ago), node,
                        refusal, rfc3339(until))
        return None
    # the pods the hold only waits for never keep it (`Holds.resume` gives it back once one is past its grace): not
    # judged here either, on a later clock reading, where a grace ending during the read kept it past the hour once
    waited = set(awaited_of(entry))
    stuck = [v for v in terminating if v not in waited and _still_there(preemptor, v, node)]
    if stuck:
        log.warning("%s: %s, still terminating on %s past their grace (a finalizer, or a kubelet that hangs?): "
                    "%s stays held for it past the %.0f min a hold lasts, while they are there", who,
                    _whose(entry, stuck, "it", ago), node, node, MAX_HOLD_S / 60)
    return stuck


def _whose(entry: Json, victims: Sequence[str], whom: str, ago: str) -> str:
    """`victims` of the hold `entry` as words: those evicted for `whom` (`ago`: when the preemption began), and
    those it only waits for (`AWAITED`: terminating already as the hold began), said so. Every one was said
    "evicted for it", though no eviction was made for it; and then "not evicted for it", though one may have been,
    by an earlier hold of the pod's that lapsed at the hour (a victim with a 2 h grace) before it was gone."""
    waited = set(awaited_of(entry))
    evicted, only = [v for v in victims if v not in waited], [v for v in victims if v in waited]
    return "; ".join(s for s in (
        evicted and f"{', '.join(evicted)}, evicted for {whom} {ago}",
        only and f"{', '.join(only)}, terminating already as the hold began, waited for from {ago}") if s)


def _ago(entry: Json, now: float) -> str:
    """How long ago the preemption of `entry` began, in words."""
    since = parse_time(entry.get(SINCE))
    return f"{(now - since) / 60:.0f} min ago ({entry[SINCE]})" if since is not None else "earlier"


def _still_there(preemptor: Preemptor, victim: str, node: str) -> bool:
    """Whether `victim` is still on `node` and terminating past its grace (`k8s_preempt.past_grace`: its
    `deletionTimestamp`, the deletion's time plus its grace period, and `GRACE_SLACK_S` more; one without a readable
    time is within it, as `room_coming` takes it: it was taken as past it here, kept past the hour and said stuck,
    while the planner counted its room as coming), as the API server says now; one that cannot be read counts as
    there (logged: the next renewal reads it again). One within its grace is not stuck: its owner's deletion with a
    2 h grace was said stuck at 57 min."""
    ns, name = victim.split("/", 1)
    try:
        pod = preemptor.api(f"pod {victim}", preemptor.api.core.read_namespaced_pod, name, ns,
                            halt=preemptor.halted)
    except NotFoundError:
        return False
    except ActuationError as err:
        log.warning("scheduler %s: cannot read %s, counted as still terminating on %s: %s",
                    preemptor.scheduler_name, victim, node, err)
        return True
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    if not meta.get("deletionTimestamp") or spec.get("nodeName") != node or status.get("phase") in ("Succeeded",
                                                                                                  "Failed"):
        return False
    return past_grace(parse_time(meta.get("deletionTimestamp")), preemptor.clock())


def stuck_said(node: str, victims: Sequence[str]) -> str:
    """What a pod whose hold is kept past the hour is told, as the end of its FailedScheduling message."""
    return (f"; {', '.join(victims)} still terminating (a finalizer, or a kubelet that hangs?): {node} stays held "
            f"past the {MAX_HOLD_S / 60:.0f} min a hold lasts, while they are there")


def tell_stuck(preemptor: Preemptor, req: Json, node: str, victims: Sequence[str], entry: Json) -> None:
    """The Warning Event `PreemptionStuck` on `req` as its hold `entry` on `node` first passes the hour (best
    effort)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "name": req["pod"], "namespace": req["namespace"], "uid": req["uid"]}
    message = (f"{_whose(entry, victims, 'this pod', _ago(entry, preemptor.clock()))}, still terminating on {node} "
               f"past their grace (a finalizer, or a kubelet that hangs?): {node} stays held for this pod past the "
               f"{MAX_HOLD_S / 60:.0f} min a hold lasts, while they are there, and no one else is preempted for it")
    try:
        post_event(preemptor.api, pod, "Warning", STUCK_REASON, message, preemptor.scheduler_name, preemptor.clock())
    except ActuationError as err:
        log.warning("scheduler %s: cannot post %s event on %s: %s", preemptor.scheduler_name, STUCK_REASON,
                    req["name"], err)
