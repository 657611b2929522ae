"""Which Kueue ResourceFlavor's GPU quota a training Job's scaling moves: pure decisions on Kueue's objects.

Kueue keeps quota per ResourceFlavor. In a heterogeneous cluster one ClusterQueue resourceGroup lists several
flavors (say `h100` and `a100`), each with its own `nvidia.com/gpu` nominalQuota, and Kueue admits a Job under one
of them, recording it in the Job's Workload (kueue.x-k8s.io/v1beta1, namespaced, owned by the Job and labelled
`kueue.x-k8s.io/job-uid`): `status.admission.podSetAssignments[*].flavors["nvidia.com/gpu"]`. Quota moved in
another flavor is quota the Job cannot use, lent by inference GPUs of another model. So the flavor comes from the
admission:

* admitted: that flavor, in both ClusterQueues; a queue without GPU quota in it is refused (never another flavor);
* not admitted (a Job gputide stopped, whose Workload's admission its deactivation cleared, being resumed; or one
  Kueue has not admitted yet): the one GPU flavor both queues have; with several in common
  Kueue's choice cannot be foreseen, so it is refused, naming the flavors, rather than guessed.

A refusal is a `PermanentActuationError` (the action comes back FAILED); `KubernetesActuator` resolves the flavor
before it changes anything, so a refusal changes nothing. The API calls are the actuator's
(`balancer/actuate/kubernetes.py`); this module only reads the JSON it fetched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from balancer.errors import PermanentActuationError

Json = dict[str, Any]
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"   # Kueue's label on the Workload it made for a Job
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"   # a Job's opt-in to Kueue's in-place resizes ("true")
# a Job's own word that any change of its size restarts every worker from its last checkpoint ("true"): torchrun's
# elastic agents (`--nnodes MIN:MAX`) stop and restart the whole worker group on every membership change
RESIZE_RESTARTS_ANNOTATION = "gputide.io/resize-restarts"


def restarts_on_resize(job: Json, queue: str) -> bool:
    """Whether Kueue restarts a Job queued in `queue` ("" when not queued) whole to change its size: unless its
    metadata carries `kueue.x-k8s.io/elastic-job: "true"` (ElasticJobsViaWorkloadSlices: a shrink recorded in the
    admitted Workload, a grow admitted as a new Workload slice in the same flavor), Kueue finds the admitted
    Workload no longer matching the Job, suspends the Job (every pod deleted) and queues a new Workload
    (kubernetes-sigs/kueue#467). The annotation is trusted: on a Kueue without that feature gate it does nothing."""
    notes = (job.get("metadata") or {}).get("annotations") or {}
    return bool(queue) and notes.get(ELASTIC_JOB_ANNOTATION) != "true"


def framework_restarts(job: Json) -> bool:
    """Whether the Job says its training framework restarts every worker on a change of its size
    (`gputide.io/resize-restarts: "true"`, e.g. torchrun elastic): whatever Kubernetes and Kueue do, a grow then
    costs the whole job's work since its checkpoint, as a shrink does."""
    return ((job.get("metadata") or {}).get("annotations") or {}).get(RESIZE_RESTARTS_ANNOTATION) == "true"


def quota_flavors(cluster_queue: Json, resource: str) -> list[str]:
    """The flavors of a ClusterQueue that hold nominalQuota for `resource`, in the queue's order."""
    return [fl.get("name", "") for group in cluster_queue.get("spec", {}).get("resourceGroups") or []
            for fl in group.get("flavors") or []
            if any(res.get("name") == resource for res in fl.get("resources") or [])]


def owned_by(workload: Json, uid: str) -> bool:
    """Whether a Workload belongs to the object with this uid (by Kueue's label or an owner reference)."""
    meta = workload.get("metadata") or {}
    return bool(uid) and ((meta.get("labels") or {}).get(JOB_UID_LABEL) == uid
                          or any(ref.get("uid") == uid for ref in meta.get("ownerReferences") or []))


def admitted_flavor(workloads: Iterable[Json], resource: str, job: str) -> str | None:
    """The flavor Kueue admitted the Job's `resource` under, None while no Workload of it holds an admission.

    A Job admitted under two flavors (one per pod set) is refused: which of them its new workers would take
    cannot be told."""
    flavors = sorted({flavor for w in workloads
                      for ps in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []
                      if (flavor := (ps.get("flavors") or {}).get(resource))})
    if len(flavors) > 1:
        raise PermanentActuationError(f"job {job} is admitted under {resource} flavors {', '.join(flavors)}: "
                                      "refusing to guess which one its workers take")
    return flavors[0] if flavors else None


def choose_flavor(queues: Mapping[str, Json], admitted: str | None, resource: str) -> str:
    """The flavor whose `resource` quota moves between `queues` (name -> ClusterQueue): the admitted one, which
    every queue must hold quota for, else the only one they all hold. Refusals name the queues and flavors."""
    held = {name: quota_flavors(cq, resource) for name, cq in queues.items()}
    names = ", ".join(queues)
    if admitted is not None:
        lacking = [f"{name} ({', '.join(fls) or 'none'})" for name, fls in held.items() if admitted not in fls]
        if lacking:
            raise PermanentActuationError(
                f"the job is admitted under flavor {admitted}, but clusterqueue {'; '.join(lacking)} has no "
                f"{resource} quota in it (its {resource} flavors in brackets): no quota moved")
        return admitted
    common = [fl for fl in next(iter(held.values()), []) if all(fl in fls for fls in held.values())]
    if len(common) != 1:
        shown = "; ".join(f"{name}: {', '.join(fls) or 'none'}" for name, fls in held.items())
        raise PermanentActuationError(
            f"no admitted {resource} flavor to shift (the job is not admitted yet) and clusterqueues {names} "
            f"have {len(common)} {resource} flavors in common ({shown}): refusing to guess")
    return common[0]
