"""Kueue's objects for the actuator's training scaling: a Job's Workloads, their activation, and GPU quota moves
between two ClusterQueues of a cohort.

`KueueQuota` reads a Job's Workloads and the ClusterQueues through the gateway's `_Api` and patches the queues'
`nvidia.com/gpu` nominalQuota in one ResourceFlavor; which flavor is decided by the pure rules of `k8s_kueue`
(the one Kueue admitted the Job under, else the only one both queues hold). The lender is lowered first, so the
cohort's total never exceeds what exists, and restored if raising the borrower fails.

`set_active` stops and resumes a queued Job the way Kueue documents it, through its Workload's `spec.active`
(Kueue owns such a Job's `spec.suspend`: see `k8s_training`).
"""

from __future__ import annotations

import json
import logging

from balancer.actuate.k8s_kueue import JOB_UID_LABEL, admitted_flavor, choose_flavor, owned_by
from balancer.actuate.k8s_requests import quantity
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    KUEUE,
    KUEUE_WORKLOADS,
    MERGE_PATCH,
    Json,
    KubeTemporaryError,
    NotFoundError,
    _Api,
)
from balancer.errors import ActuationError, PermanentActuationError

log = logging.getLogger(__name__)


# the operator's lendingLimit of a ClusterQueue's GPU flavors while a loan holds it lower (JSON {flavor: limit}):
# Kueue wants lendingLimit <= nominalQuota, so lowering the quota lowers it, and giving the quota back restores it
OWN_LENDING_ANNOTATION = "gputide.io/own-lending-limits"


def _lending_limit(cq: Json, res: Json, flavor: str, nominal: int) -> Json:
    """Set `res`'s lendingLimit (if it has one) for a nominalQuota of `nominal`: the operator's own (the annotation
    while gputide holds it lower, else the current one), clamped to `nominal`. Returns the metadata merge patch
    that keeps the operator's value while clamped and forgets it once restored ({} when the note stays as is)."""
    if "lendingLimit" not in res:
        return {}
    notes = (cq.get("metadata") or {}).get("annotations") or {}
    try:
        own = {k: int(v) for k, v in json.loads(notes.get(OWN_LENDING_ANNOTATION) or "{}").items()}
    except (ValueError, TypeError, AttributeError):
        own = {}
    kept = own.get(flavor, int(quantity(res["lendingLimit"])))
    res["lendingLimit"] = min(kept, nominal)
    after = {**own, flavor: kept} if kept > nominal else {k: v for k, v in own.items() if k != flavor}
    if after == own:
        return {}
    return {"metadata": {"annotations": {OWN_LENDING_ANNOTATION: json.dumps(after, sort_keys=True) if after else None}}}


class KueueQuota:
    def __init__(self, api: _Api) -> None:
        self.api = api

    def workloads(self, ns: str, name: str, job: Json) -> list[Json]:
        """The Job's Workloads (Kueue makes one per Job).

        Found by Kueue's `kueue.x-k8s.io/job-uid` label; a Workload without it (Kueue sets it only where the uid is
        a valid label value) is found by its owner reference, at the cost of listing the namespace's Workloads."""
        uid = job["metadata"].get("uid") or ""
        what = f"kueue workloads of job {ns}/{name}"
        items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns, "workloads",
                         label_selector=f"{JOB_UID_LABEL}={uid}").get("items") or []
        if not items:
            items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns,
                             "workloads").get("items") or []
        return [w for w in items if owned_by(w, uid)]

    @staticmethod
    def admitted_flavor(ns: str, name: str, workloads: list[Json]) -> str | None:
        """The GPU flavor Kueue admitted the Job under, from its Workloads; None while it is not admitted."""
        return admitted_flavor(workloads, GPU_RESOURCE, f"{ns}/{name}")

    def set_active(self, ns: str, workloads: list[Json], active: bool) -> list[str]:
        """Set `spec.active` on those of the Workloads that differ; returns their names.

        Inactive, Kueue evicts a Workload (its quota released, its admission cleared) and suspends its Job, and
        keeps it so; active again, it is queued and its Job unsuspended once admitted. A Workload gone meanwhile
        is skipped when activating (Kueue replaced it by one that is active) and a temporary error when
        deactivating (its replacement is not deactivated yet)."""
        changed = []
        for wl in workloads:
            if ((wl.get("spec") or {}).get("active", True) is not False) == active:
                continue
            name = wl["metadata"]["name"]
            try:
                self.api(f"kueue workload {ns}/{name}", self.api.custom.patch_namespaced_custom_object,
                         *KUEUE_WORKLOADS, ns, "workloads", name, {"spec": {"active": active}},
                         _content_type=MERGE_PATCH)
            except NotFoundError as err:
                if not active:
                    raise KubeTemporaryError(f"kueue workload {ns}/{name} was replaced: {err}", 404) from err
                continue
            changed.append(name)
        return changed

    def check_queues(self, queues: tuple[str, str], flavor: str | None) -> tuple[str, str]:
        """(flavor, cohort) of a quota move between two ClusterQueues, read fresh: both must be in one cohort and
        hold GPU quota in `flavor` (None: in exactly one common flavor, `k8s_kueue.choose_flavor`)."""
        read = {q: self._read_queue(q) for q in queues}
        cohorts = {q: cq["spec"].get("cohort") or "" for q, cq in read.items()}
        if not cohorts[queues[0]] or cohorts[queues[0]] != cohorts[queues[1]]:
            raise PermanentActuationError(f"ClusterQueues {queues[0]}, {queues[1]} are not in one cohort: {cohorts}")
        return choose_flavor(read, flavor, GPU_RESOURCE), cohorts[queues[0]]

    def shift(self, from_queue: str, to_queue: str, gpus: int, flavor: str | None = None) -> str:
        """Move `gpus` of nominalQuota (nvidia.com/gpu) in one ResourceFlavor from one ClusterQueue to another in
        the same cohort. Without `flavor`, the queues must hold GPU quota in exactly one common flavor (never a
        guess between several); with it, both must hold quota in it. Nothing changes when either is not so.

        The lender is lowered first, so the cohort's total never exceeds what exists; its lendingLimit is clamped
        to the new nominal quota (the operator's kept in the annotation `gputide.io/own-lending-limits`, put back
        when the quota comes back). If raising the borrower fails, the lender is restored (best effort)."""
        if gpus <= 0:
            raise PermanentActuationError(f"kueue quota shift: gpus must be > 0, got {gpus}")
        flavor, cohort = self.check_queues((from_queue, to_queue), flavor)
        self._change_quota(from_queue, -gpus, flavor)
        try:
            self._change_quota(to_queue, gpus, flavor)
        except ActuationError:
            try:
                with self.api.reserve():   # undoing: on the time the action's deadline keeps for it
                    self._change_quota(from_queue, gpus, flavor)
            except ActuationError as undo:
                log.error("kueue quota shift half-done, %s lost %d GPUs: %s", from_queue, gpus, undo)
            raise
        return f"kueue quota {gpus} x {GPU_RESOURCE} ({flavor}): {from_queue} -> {to_queue} (cohort {cohort})"

    def _read_queue(self, name: str) -> Json:
        return self.api(f"clusterqueue {name}", self.api.custom.get_cluster_custom_object, *KUEUE, name)

    def _change_quota(self, queue: str, delta: int, flavor: str) -> None:
        """Add `delta` to the queue's GPU nominalQuota in `flavor` (only there: other flavors stay as they are).

        Once: a patch that landed without an answer is retried by the gateway, answered 409 and read again; a queue
        found at exactly the quota the first read computed is taken as that write having landed (`_Api.update`
        would otherwise add `delta` a second time)."""
        aimed: list[int] = []   # the nominalQuota the first read computed

        def change(cq: Json) -> Json | None:
            groups = cq["spec"].get("resourceGroups") or []
            for group in groups:
                for fl in group.get("flavors") or []:
                    for res in fl.get("resources") or []:
                        if res.get("name") == GPU_RESOURCE and fl.get("name") == flavor:
                            if aimed and int(quantity(res["nominalQuota"])) == aimed[0]:
                                return None   # our unanswered write landed
                            nominal = int(quantity(res["nominalQuota"])) + delta
                            aimed[:] = [nominal]
                            if nominal < 0:
                                raise PermanentActuationError(
                                    f"clusterqueue {queue}: {flavor} nominalQuota would be {nominal}")
                            res["nominalQuota"] = nominal
                            return {**_lending_limit(cq, res, flavor, nominal), "spec": {"resourceGroups": groups}}
            raise PermanentActuationError(f"clusterqueue {queue} has no {GPU_RESOURCE} quota (flavor {flavor})")

        what = f"clusterqueue {queue}"
        self.api.update(what, lambda: self._read_queue(queue), lambda body: self.api(
            what, self.api.custom.patch_cluster_custom_object, *KUEUE, queue, body, _content_type=MERGE_PATCH), change)
