"""`Migrate` on Kubernetes: how the actuator moves a pod off a hot GPU, make-room-first.

The pod's node is checked against the plan (a pod that runs elsewhere makes the plan stale: FAILED) and the target,
as it is now, against the pod's own rules (a cordon too, read from `spec.unschedulable`) and the node affinity of
the PersistentVolumes it mounts (`placement_refusal`: a replacement that could not run there, or could not attach
its disks there, is not evicted), and the snapshot's pods against its hard topology spread constraints
(`k8s_spread`). The volumes' affinity
is the snapshot's: the workload's node rules there are the pod's own ANDed with its volumes' (`k8s_claims.confined`,
read by `k8s_workloads`), so it costs no API call. The target's room is checked as it is now, not as the snapshot
saw it (a cycle old: the default scheduler, which does not read gputide's reservations, may have filled it since):
the pods bound there (one list, `BOUND_TO`, once its rules allow the pod) ask no more of its allocatable
`nvidia.com/gpu` than leaves the pod's own request (`gpus_left`), else `TargetHeld` (RETRY) before anything changes.
The rules and the room are checked on the node as the reservation reads it (one read of the target). Then:

    reserve   the target node's GPUs, in its annotation `gputide.io/reserved-for`, a JSON map keyed by the
              workload's owner (its replacement pod has another name), each entry with an expiry (the TTL, or the
              pod's grace period and a minute when longer: `hold_s`); one owner's at a time, and never GPUs held
              for others (a sibling replica's entry still running there, or holds of others beyond the node's
              other free GPUs, by the snapshot and by its pods now: RETRY, before anything changes;
              `reserve_change`); a release takes back only the entry this move wrote;
    taint     the hot source node `gputide.io/hot=true:NoSchedule` with an expiry (`gputide.io/hot-until`), so the
              replacement does not land back on it (not a consolidation's cool source: `Migrate.taint_source`):
              the taint's TTL, or as long as the target's hold when that is longer (`taint_until`);
    evict     the pod through the Eviction API, once, last. 429 = a PodDisruptionBudget says no -> RETRY, with the
              reservation released (on the deadline's reserve); a pod already gone leaves the reservation in place.

The reservation and the taint expire on their own (`KubernetesActuator.release_expired`), so only the eviction is
listed as a write whose outcome counts (`_Api.writes`). An eviction that got no answer is confirmed by one read of
the pod on the reserve (`Migrations.eviction_landed`): gone, being deleted or replaced, it landed (APPLIED, the
reservation kept); still running, it did not. So is one whose retry, after a try that got no answer, is answered 409
(what that try, landed, may leave; `_Api` says so: `after_unanswered`); answered 404, it landed (the pod is gone).

Refusals, all before anything changes, say what they refuse (`balancer.actuate.base.Refused`, the result's
`refused`): the target (`TargetRefused`: the pod's rules, its volumes' or its topology spread there; `TargetHeld`:
the target's GPUs held for others or taken by pods bound there since, tried again later), so the planner takes
another node next; or the pod itself (`WorkloadRefused`: being deleted, nothing recreates it, pinned, its Job would
fail). A pod that runs elsewhere than planned makes the plan stale: no refusal of either, the workload is not moved
for a while as after any failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from balancer.actuate.base import Refused
from balancer.actuate.k8s_filters import CORDON
from balancer.actuate.k8s_jobs import eviction_refusal
from balancer.actuate.k8s_nodes import annotation_map_change, taints_change
from balancer.actuate.k8s_pods import may_move, recreated
from balancer.actuate.k8s_requests import basic_requests, exact_quantity, pod_requests
from balancer.actuate.k8s_spread import spread_refusal
from balancer.actuate.k8s_time import parse_time
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    HOT_UNTIL_ANNOTATION,
    ConflictError,
    Json,
    KubeTemporaryError,
    NotFoundError,
    ThrottledError,
    _Api,
    _json_annotation,
    controller_ref,
    rfc3339,
    split_name,
)
from balancer.errors import ActuationError, PermanentActuationError
from balancer.model import ClusterSnapshot, Migrate
from balancer.noderules import NodeRules, Taint

log = logging.getLogger(__name__)


class TargetRefused(PermanentActuationError):
    """The pod's replacement could not run on the target (its rules, its volumes', its topology spread there)."""

    refused = Refused.TARGET


class TargetHeld(KubeTemporaryError):
    """The target's GPUs are held for others (a sibling's move, a preemptor, a starving pod) or taken by pods bound
    there since the snapshot (`gpus_left`): RETRY."""

    refused = Refused.TARGET


class WorkloadRefused(PermanentActuationError):
    """The pod may not be moved, wherever to (being deleted, nothing recreates it, pinned, its Job)."""

    refused = Refused.WORKLOAD


def placement_refusal(pod: Json, node: Json, planned: NodeRules | None = None) -> str | None:
    """Why Kubernetes would not run `pod` on `node` by the pod's own rules (a cordon, `spec.unschedulable`, unless
    it tolerates `k8s_filters.CORDON`; a NoSchedule or NoExecute taint it does not tolerate, its node selector, its
    required node affinity) or, when the node affinity of the workload's `planned` rules is not the pod's own, by
    that (its PersistentVolumes', `k8s_claims.confined`); None when they allow it. The cordon is read from the spec,
    as kube-scheduler's NodeUnschedulable filter reads it: the node lifecycle controller adds its taint only later,
    and a pod evicted towards a node cordoned in between had its replacement refused there."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    name, labels = meta.get("name", ""), meta.get("labels") or {}
    own = NodeRules.from_pod_spec(pod.get("spec") or {})
    if spec.get("unschedulable") and not own.tolerates(CORDON):
        return f"been cordoned (spec.unschedulable), and the pod does not tolerate {CORDON.key}:{CORDON.effect}"
    refusal = own.refusal(name, labels, map(Taint.from_json, spec.get("taints") or ()))
    if refusal is None and planned is not None and planned.terms != own.terms and not planned.affinity_allows(
            name, labels):
        return "labels the node affinity of the PersistentVolumes it mounts does not allow"
    return refusal


GRACE_MARGIN_S = 60.0   # after the evicted pod's grace period, for its replacement to be created and bound


def hold_s(pod: Json, ttl_s: float) -> float:
    """How long the target is held for the replacement of `pod`: `ttl_s`, or its grace period and a minute when
    that is longer. A StatefulSet's pod is created again (same name) only once the evicted one is gone, and a Job's
    with `podReplacementPolicy: Failed` (the default with a podFailurePolicy) only once it has failed: a hold
    shorter than the grace period (a training pod saving its checkpoint) lapsed before its replacement existed."""
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    try:
        grace_s = max(float(grace), 0.0) if grace is not None else 30.0   # the API's default
    except (TypeError, ValueError):
        grace_s = 30.0
    return max(ttl_s, grace_s + GRACE_MARGIN_S)


def taint_until(node: Json, until: float) -> float:
    """When the hot taint a move puts on its source `node` expires: `until` (the taint's TTL, or the hold's when
    longer: the replacement of a pod with a long grace period exists only once it is gone, and must not land back on
    the hot node once the taint has lapsed), or the node's own `gputide.io/hot-until` when later (another move's
    taint, for a longer grace period, is not cut short)."""
    seen = parse_time(((node.get("metadata") or {}).get("annotations") or {}).get(HOT_UNTIL_ANNOTATION))
    return until if seen is None else max(until, seen)


def eviction(pod: Json) -> Json:
    """The Eviction of `pod` as read: with its uid as a precondition, so a pod of its name created since (a
    StatefulSet's replacement, elsewhere and just started) is never the one evicted (409 instead)."""
    meta = pod.get("metadata") or {}
    body: Json = {"apiVersion": "policy/v1", "kind": "Eviction",
                  "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}}
    if meta.get("uid"):
        body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
    return body


def free_besides(snapshot: ClusterSnapshot, node: str, ours: tuple[int, ...]) -> int:
    """GPUs of `node` that no workload uses in `snapshot`, besides the move's own `ours`: room for others' holds."""
    used, mine = snapshot.gpu_milli_used, set(ours)
    return sum(1 for g in snapshot.gpus if g.node == node and g.index not in mine and used[g.index] == 0)


# the pods bound to a node that hold its resources (not yet Succeeded or Failed), by a field selector
BOUND_TO = "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"


def _gpus_asked(pod: Json) -> int | None:
    """The whole GPUs `pod` requests (`nvidia.com/gpu`, what the kubelet admits it by); None: unreadable."""
    try:
        return pod_requests(pod)[0]
    except ActuationError:
        return None


def _key(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def gpus_left(node: Json, bound: Iterable[Json], pod: Json) -> int:
    """The GPUs of `node` left besides the replacement of `pod`, as the kubelet will admit it: its allocatable
    `nvidia.com/gpu` less what the pods bound there now ask (`BOUND_TO`; `pod` itself not, should it run there) and
    `pod`'s own request. None left (below 0): `TargetHeld`, before anything changes. The snapshot can be a cycle
    old: another scheduler (the default one, which does not read gputide's reservations) may have filled the target
    since. A share of a GPU (`gputide.io/gpu-milli`) asks whole `nvidia.com/gpu` of the API as any pod does, and is
    counted by that request; a pod whose requests cannot be read leaves no room."""
    mine, name = _key(pod), (node.get("metadata") or {}).get("name")
    others = [p for p in bound if _key(p) != mine]
    asked = [_gpus_asked(p) for p in others]
    need = _gpus_asked(pod)
    if need is None or None in asked:
        raise TargetHeld(f"migrate {mine}: {name}: the requests of a pod there (or its own) cannot be read")
    try:
        have = basic_requests({GPU_RESOURCE: exact_quantity(
            ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, 0))}, down=True)[0]
    except ActuationError:
        have = 0
    used = sum(n for n in asked if n is not None)
    if have - used < need:
        raise TargetHeld(f"migrate {mine}: {name} has no room for its replacement now: {have} GPU(s) allocatable, "
                         f"{used} asked by the {len(others)} pod(s) bound there, {need} needed")
    return have - used - need


def _gpus_held(entry: Json) -> int:
    try:
        return max(int(entry.get("count") or 0), 0)
    except (TypeError, ValueError):
        return 0


def reserve_change(node: Json, annotation: str, key: str, entry: Json, now: float, room: int) -> Json | None:
    """The patch that holds `node` for `key` (the owner the replacement pod matches by) with `entry`, or
    `TargetHeld` before anything changes (the move is tried again later) when the replacement would find no
    place there:

    * a sibling's entry still running (another replica of the owner on its way there): the map holds one entry per
      owner and the scheduler uses it up with the first pod of that owner it binds there, so overwriting it would
      leave one of the two replacements without its hold;
    * the node's GPUs held for others (a preemptor, a starving pod, another owner's move) need more than the `room`
      of free GPUs the node has besides the move's own: the planner does not see those holds, and the GPUs it chose
      are promised to someone else."""
    name = (node.get("metadata") or {}).get("name")
    live = {k: v for k, v in _json_annotation(node, annotation).items()
            if isinstance(v, dict) and (parse_time(v.get("expires")) or 0) > now}
    held = live.get(key)
    if held is not None and held.get("pod") != entry["pod"]:
        raise TargetHeld(f"migrate {entry['pod']}: {name} is held for {key} already, for the replacement "
                         f"of {held.get('pod')}: one at a time")
    others = {k: _gpus_held(v) for k, v in live.items() if k != key}
    if sum(others.values()) > room:
        raise TargetHeld(f"migrate {entry['pod']}: {sum(others.values())} GPU(s) of {name} are held for "
                         f"{', '.join(sorted(k for k, n in others.items() if n))} and it has {room} other "
                         "free: its GPUs are promised to others")
    return annotation_map_change(node, annotation, {key: entry})


def release_change(node: Json, annotation: str, key: str, entry: Json) -> Json | None:
    """The patch that gives back the hold `entry` wrote for `key`, only while it is still that one (not a
    sibling's or another writer's written since)."""
    if _json_annotation(node, annotation).get(key) != entry:
        return None
    return annotation_map_change(node, annotation, {key: None})


class Migrations:
    """Carries out `Migrate` actions: reserve, taint, evict (the module docstring). Raises ActuationError."""

    def __init__(self, api: _Api, clock: Callable[[], float], *, default_namespace: str, hot_taint_key: str,
                 reservation_annotation: str, hot_taint_ttl_s: float, reservation_ttl_s: float) -> None:
        self.api, self.clock, self.default_namespace = api, clock, default_namespace
        self.hot_taint_key, self.hot_taint_ttl_s = hot_taint_key, hot_taint_ttl_s
        self.reservation_annotation, self.reservation_ttl_s = reservation_annotation, reservation_ttl_s

    def migrate(self, action: Migrate, snapshot: ClusterSnapshot) -> str:
        ns, pod = split_name(action.workload, self.default_namespace)
        try:
            slots = [snapshot.gpus[i].slot for i in action.target_gpus]
            source = snapshot.gpus[action.source_gpus[0]].node if action.source_gpus else ""
        except IndexError as exc:
            raise PermanentActuationError(f"migrate {action.workload}: GPU index not in snapshot") from exc
        current = self._movable_pod(ns, pod, source)
        workload = snapshot.workload_by_name.get(action.workload)
        planned = workload.node_rules if workload is not None else None
        spread = spread_refusal(current, snapshot, action.workload, action.target_node)
        bound: list[Json] = []   # the pods bound to the target, listed once, after its rules allowed the pod
        # the reservation is the owner's (its replacement pod has another name); an owner may already be qualified
        key = "/".join(split_name(workload.owner, ns)) if workload is not None and workload.owner else f"{ns}/{pod}"
        now, room = self.clock(), free_besides(snapshot, action.target_node, action.target_gpus)
        hold = hold_s(current, self.reservation_ttl_s)
        entry = {"pod": f"{ns}/{pod}", "gpus": slots, "count": len(slots), "expires": rfc3339(now + hold)}

        def reserve(target: Json) -> Json | None:   # the target as read for the hold, checked before it is written
            refusal = placement_refusal(current, target, planned) or spread
            if refusal is not None:   # its replacement could not run there: moving it could leave it without a place
                raise TargetRefused(f"migrate {ns}/{pod}: {action.target_node} has {refusal}")
            if not bound:
                bound.append(self.api(f"pods on {action.target_node}", self.api.core.list_pod_for_all_namespaces,
                                      field_selector=BOUND_TO.format(node=action.target_node)))
            left = gpus_left(target, bound[0].get("items") or (), current)
            return reserve_change(target, self.reservation_annotation, key, entry, now, min(room, left))

        self._reserve(action.target_node, key, entry, reserve)
        try:
            if source and source != action.target_node and action.taint_source:
                with self.api.writes():
                    self.api.update_node(source, lambda n: taints_change(
                        n, self.hot_taint_key, True, taint_until(n, now + max(self.hot_taint_ttl_s, hold))))
            return self._evict(current, ns, pod, f"reserved {action.target_node} GPUs {slots} for {key}", source)
        except ActuationError as err:   # a 404 before the eviction (the node) is a failure
            self.release_reservation(action.target_node, key, entry)
            if isinstance(err, ThrottledError):
                raise KubeTemporaryError(f"eviction blocked by a PodDisruptionBudget: {err}", err.status) from err
            raise

    def _evict(self, current: Json, ns: str, pod: str, reserved: str, source: str) -> str:
        """Evict pod `ns/pod`, `current` as read (its uid a precondition), once `reserved` is held: the detail, or the
        error when it did not go (the caller then releases the hold). A pod gone since the read (404), or replaced by
        one of its name (409, the precondition; confirmed by a read, `eviction_landed`), leaves the hold to its
        replacement. After a try that got no answer (the error's `after_unanswered`), a 404 is that try's eviction
        landed, the pod gone: the migration happened; a 409 is what it may have left (the pod terminating, or made
        again), which `_Api.writes` takes for a definite answer: the eviction is listed as of unknown outcome again
        until the read tells (gone, terminating or replaced: landed; running still: not; no read: `maybe_applied`)."""
        evict, uid = f"evict pod {ns}/{pod}", (current.get("metadata") or {}).get("uid")
        try:
            self.api(evict, self.api.core.create_namespaced_pod_eviction, pod, ns, eviction(current),
                     retry_throttled=False)
            return f"{reserved}, evicted {ns}/{pod} from {source or '?'}"
        except NotFoundError as err:   # the pod (not the source node) is gone since it was read
            if not err.after_unanswered:   # deleted by another
                return f"{reserved}; {ns}/{pod} was already gone"
            landed, why = "is gone (by that eviction, or deleted by another)", err   # most likely the try unanswered
        except ConflictError as err:   # its uid precondition failed (a pod of its name, a StatefulSet's, replaced
            if err.after_unanswered and evict not in self.api.unknown_writes:   # it), the PDB's update kept
                self.api.unknown_writes.append(evict)   # conflicting, or an earlier try landed
            replaced = self.eviction_landed(evict, ns, pod, uid)
            if replaced is None:   # the pod read still runs: not evicted (or the read cannot tell: still listed)
                raise
            if not err.after_unanswered:
                return f"{reserved}; {ns}/{pod} {replaced}"
            landed, why = replaced, err
        except ActuationError as err:   # a timed-out eviction may have gone through
            found = self.eviction_landed(evict, ns, pod, uid) if evict in self.api.unknown_writes else None
            if found is None:
                raise
            landed, why = found, err
        return (f"{reserved}, evicted {ns}/{pod} from {source or '?'} (confirmed after no answer: the pod {landed}; "
                f"{why})")

    def _movable_pod(self, ns: str, pod: str, source: str) -> Json:
        """The pod, read, once it may be moved: not being deleted already (evicted: its controller replaces it, and
        evicting it again succeeds, a terminating pod skipping its budgets, and would hold a second target), a
        controller recreates it, its Job can lose it (else `WorkloadRefused`), and it still runs on `source` (else
        the plan is stale: PermanentActuationError); before anything changes."""
        current = self.api(f"pod {ns}/{pod}", self.api.core.read_namespaced_pod, pod, ns)
        meta = current.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            raise WorkloadRefused(f"migrate {ns}/{pod}: it is being deleted already (terminating): not "
                                  "evicted again")
        if not recreated(meta):   # evicted, nothing would run it again anywhere
            raise WorkloadRefused(f"migrate {ns}/{pod}: no controller recreates it (a bare pod, or a static "
                                  "pod of its node): it is not moved")
        if not may_move(meta, current.get("spec") or {}):   # pinned, or hostPath / DRA claims, since the snapshot
            raise WorkloadRefused(f"migrate {ns}/{pod}: its own object keeps it in place now "
                                  "(gputide.io/movable: \"false\", or a hostPath volume or DRA claims that "
                                  "gputide.io/movable: \"true\" does not vouch for): it is not moved")
        self._job_can_lose_a_pod(current, ns, pod)
        running_on = (current.get("spec") or {}).get("nodeName")
        if source and running_on and running_on != source:
            raise PermanentActuationError(f"pod {ns}/{pod} runs on {running_on}, not {source}: the plan is stale")
        return current

    def _reserve(self, node: str, key: str, entry: Json, change: Callable[[Json], Json | None]) -> None:
        """Hold `node` for `key` by `change` (`reserve_change`). The hold and the taint expire on their own: only the
        eviction counts as a write whose outcome matters; but a hold that got no answer may be there all the same
        (as long as the pod's grace period): released on the reserve before the error goes on."""
        with self.api.writes() as unsure:
            try:
                self.api.update_node(node, change)
            except ActuationError:
                if unsure:
                    self.release_reservation(node, key, entry)
                raise

    def _job_can_lose_a_pod(self, current: Json, ns: str, pod: str) -> None:
        """A Job's pod is moved only when its eviction cannot fail the Job (`k8s_jobs.eviction_refusal`, by its
        podFailurePolicy, its backoffLimit and the pod's restarts): read the Job; `WorkloadRefused` before anything
        changes otherwise."""
        ref = controller_ref(current.get("metadata") or {})
        if ref is None or ref.get("kind") != "Job":
            return
        job = ref.get("name", "")
        refusal = eviction_refusal(self.api(f"job {ns}/{job}", self.api.batch.read_namespaced_job, job, ns), current)
        if refusal is not None:
            raise WorkloadRefused(f"migrate {ns}/{pod}: job {ns}/{job}: {refusal}")

    def eviction_landed(self, evict: str, ns: str, pod: str, uid: str | None) -> str | None:
        """Whether the eviction `evict` of pod `uid`, unanswered, went through, by one read of the pod on the
        deadline's reserve: how the pod shows it (gone, being deleted, replaced by another of its name), or None:
        still running, it did not (its outcome known: off `unknown_writes`), or the read failed (still unknown)."""
        try:
            with self.api.reserve():
                seen = self.api(f"pod {ns}/{pod}", self.api.core.read_namespaced_pod, pod, ns, retries=0)
        except NotFoundError:
            return "is gone"
        except ActuationError as err:
            log.warning("%s: outcome unknown, confirming it failed: %s", evict, err)
            return None
        meta = seen.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            return "is being deleted"
        if uid is None:   # read before without a uid: a pod of its name cannot be told from a replacement (unknown)
            return None
        if meta.get("uid") != uid:
            return "was replaced"
        if evict in self.api.unknown_writes:
            self.api.unknown_writes.remove(evict)
        return None

    def release_reservation(self, node: str, key: str, entry: Json) -> None:
        try:
            with self.api.reserve(), self.api.writes():   # undoing: within the action's deadline, on its reserve
                self.api.update_node(node, lambda n: release_change(n, self.reservation_annotation, key, entry))
        except ActuationError as err:   # it expires on its own; the action's own error is what matters
            log.warning("could not release reservation %s on %s: %s", key, node, err)
