"""What the metrics cannot say about a pod, read from the Kubernetes API: the `workload_overrides` of
`PrometheusTelemetrySource` for `gputide run`.

The exporter's join table `gputide_gpu_workload_info{UUID,namespace,pod,workload_class}` says which pod runs on
which GPU, nothing more. Planning needs the rest: which Deployment or Job a pod belongs to (so capacity shifting
can name the service to scale and the training job to shrink), its priority, whether the job is elastic and
within which bounds, whether it may be moved. `KubernetesWorkloads()` lists the running pods (one call, served
from the API server's watch cache, at most once per `ttl_s`) and turns each GPU pod into a `Workload`. With
`watch=True` (what `gputide run` uses) it lists once and then follows the API server's watch (`ListWatch`,
balancer/actuate/k8s_watch.py): owners are as fresh as the last event and a planning cycle costs the API server
nothing; until that first list succeeds (or when watching is refused) it lists per `ttl_s` as before.

| field | from |
|---|---|
| `owner` | label `gputide.io/service` or `gputide.io/job`; else the controlling owner: a ReplicaSet's Deployment (its
  name less the `pod-template-hash`), a Job's name, any other controller's name |
| `workload_class` | label `gputide.io/workload-class` (inference, training, batch); else a Deployment's pod is
  inference, a Job's pod with elastic bounds is training, a pod of any other controller (a StatefulSet, an
  operator's) whose owner a profile of `--services` names (`services`, matched as owners are qualified below)
  inference, anything else batch (`k8s_pods.servable`) |
| `priority` | `spec.priority` (set by its PriorityClass) |
| `gpus`, `cpu_milli`, `memory_mib` | the containers' `nvidia.com/gpu` limits and cpu/memory requests |
| `gpu_milli` | annotation `gputide.io/gpu-milli` (a shared GPU), else 1000 |
| `elastic_min`, `elastic_max` | annotations `gputide.io/elastic-min`, `gputide.io/elastic-max` (workers), capped at the
  pod's Job's `completions - succeeded` where its completions cannot grow (`k8s_jobs.worker_limit`, read from the Job:
  `job_facts`), so the planner never asks a Job for workers it cannot start |
| `restarts_on_resize` | its Job is queued through Kueue (label `kueue.x-k8s.io/queue-name`) without Kueue's
  `kueue.x-k8s.io/elastic-job: "true"` annotation: Kueue suspends, re-queues and re-admits such a Job whenever its
  parallelism changes, every pod restarting; or the Job says its framework restarts every worker on any change of size
  (`gputide.io/resize-restarts: "true"`, torchrun elastic) (`job_facts`) |
| `allowed_models` | annotation `gputide.io/gpu-spec` (`A100-SXM4-80GB|H100-SXM`, catalogue or Alibaba names), else the
  `nvidia.com/gpu.product` node selector, else a required node affinity whose every term allows products by `In` (GPU
  feature discovery labels resolve to catalogue keys) |
| `labels` | the pod's labels, which PodDisruptionBudgets select by |
| `node_rules` | its tolerations, node selector and required node affinity (`balancer.noderules`): the planner moves a
  pod only to a node whose taints it tolerates and whose labels it selects, read from the Kubernetes nodes
  (`KubernetesNodes`); pods of one template share one rule set. A pod that mounts PersistentVolumeClaims (or generic
  ephemeral volumes) also needs a node every volume they are bound to attaches to: each bound PersistentVolume's
  `spec.nodeAffinity.required` is ANDed into its node affinity (`k8s_claims.confined`; a volume without node affinity,
  network storage, restricts nothing) |
| `pod_affinity` | its required pod affinity and anti-affinity (`balancer.noderules.PodAffinity`): a migration target
  must satisfy them against where the other pods run (`ClusterSnapshot.affinity_admits`); a term's `namespaceSelector`
  is resolved against the Namespace objects' labels (`k8s_namespaces`) |
| `checkpointed_at`, `started_at` | annotation `gputide.io/last-checkpoint` (RFC 3339 or epoch seconds: the training
  loop, or a sidecar, writes it after each checkpoint), and `status.startTime`, or the Job's `gputide.io/resized-at`
  (written by gputide's resize) where that is later (`_restarted`): a job's work since its checkpoint is what a resize
  loses, which picks the job to shrink (`capacity.since_checkpoint`); +inf (a resize loses nothing) where its Job says
  its trainer saves a checkpoint on SIGTERM within its grace period (`gputide.io/checkpoint-on-sigterm: "true"`,
  `job_facts`) |
| `shrunk_from`, `shrink_overridden` | its Job's `gputide.io/shrunk` record of gputide's hotspot shrink
  (`k8s_jobs.shrink_record`, read from the Job: `job_facts`): the workers to give back, or, once the Job's parallelism
  is no longer what gputide left, void (the operator's) |
| `colocation_from`, `colocation_service`, `colocation_overridden` | its Job's `gputide.io/colocation-shrunk` record of
  co-location's shrink (`k8s_jobs.colocation_record`, `job_facts`), while the Job still asks for the workers it left:
  the workers to give back once the service has slack; once it does not, void (the operator's) |
| `movable`, `protected` | annotations `gputide.io/movable: "false"`, `gputide.io/protected: "true"`; a pod whose pod
  affinity names namespaces by a `namespaceSelector` is not movable while the namespaces' labels are not known (before
  the first list of them answers); a pod that mounts a claim is not movable while the claims and volumes are not known,
  nor when a claim is missing, being deleted or not Bound, or its volume is missing, not Bound, being deleted, or
  `local` / `hostPath` (its data on the one node it runs on) (`k8s_claims.attachable`), unless it says
  `gputide.io/movable: "true"` (its operator vouches that any node its own rules admit can mount its volumes) |

The Jobs themselves are read as the budgets are (`jobs_facts`: every Job, listed then followed, or at most one list
per `ttl_s`), keeping of each only what its pods cannot say (`JobFacts`: the worker limit and whether a resize
restarts it, gputide's records of a hotspot or co-location shrink), and only for Jobs that have one of them; a pod whose
owner (a training pod's owner, in its namespace) is such a Job gets them. Until the Jobs have been read, pods keep their
annotations' bounds and are taken as resized in place.

`KubernetesWorkloads.disruption_budgets()` reads the PodDisruptionBudgets as the pods are read (with `watch`, listed
once and then followed, so `disruptionsAllowed` is as fresh as the last watch event; else at most one list per
`ttl_s`), with each pod's labels in its Workload: the safety guard refuses a migration whose eviction a budget does
not allow now, as the Eviction API would, before anything is reserved or tainted for it. Until the API has answered
once they are None (unknown: the Eviction API alone guards them meanwhile).

`KubernetesWorkloads.suspended_jobs()` reads, as the budgets are, the Jobs gputide itself suspended (label
`gputide.io/suspended=true`, set by the actuator when it stops a Job and removed on resume, so the label-selected
watch sends DELETED for a resumed Job; a Job a person suspended is not gputide's to resume) that are suspended
indeed (`spec.suspend`: Kueue suspends a queued Job itself once gputide deactivated its Workload, and a labelled Job
still running is counted by its pods, not as suspended): their elastic bounds and GPU models from the pod
template's annotations (`elastic_max` capped at `completions - succeeded` where completions cannot grow,
`k8s_jobs.worker_limit`), GPUs per worker from its containers, priority from the annotation `gputide.io/priority`
the actuator recorded. The capacity planner suspends jobs only when this list is available (a Job at parallelism 0
has no pods, so without it gputide could never resume it).

Owners are bare names (`chat`), as people name their services in profiles and serving metrics, except where a
bare name would name two things: an owner found in two namespaces (two `vllm` Deployments, a running and a
suspended `train` Job) becomes `namespace/name` for every pod and Job it covers, so the planner never merges them
and the actuator knows which one to scale (it refuses a bare name that spans namespaces). Profiles for such
services are named `namespace/name` too.

The PersistentVolumeClaims and PersistentVolumes are read as the budgets are (`claims`, `volumes`: every one,
listed then followed, or at most one list of each per `ttl_s`), and only once a running GPU pod mounts a claim
its annotation does not settle; the workloads are rebuilt when either changes, as for the namespaces below.

`KubernetesWorkloads.finished_pods()` reads, as the budgets are, the GPU pods that ran to their end (Succeeded or
Failed, `finished_gpu_pod`): kubelets before 1.34 still list such a pod's devices in PodResources
(kubernetes#119423, fixed by #132028), and the attribution drops them rather than count a completed Job's pod as
holding its GPU. A pod the API does not describe (one holding only MIG or shared devices, one not yet Running)
still falls back to what the metrics say.

The Namespace objects are read as the budgets are (`namespaces`: listed, then followed, or at most one list per
`ttl_s`): the pods cache holds each pod's terms as its spec says, and the workloads handed out have their
namespaceSelectors resolved against the namespaces' latest labels, rebuilt when either the pods or the
namespaces change, so a label put on a Namespace changes which pods a term selects from the next cycle on.

One pod's object becomes its Workload in `k8s_pods.py` (`workload_from_pod`, re-exported here); this module reads
and caches the API's lists. A pod the API cannot describe falls back to what the metrics say. When the API does not
answer, the last good answer is kept (and the failure logged): stale ownership is safer than none, and the safety guard
still re-checks every action against the fresh snapshot.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from balancer.actuate.k8s_claims import claim_entry, volume_state
from balancer.actuate.k8s_jobs import colocation_record, shrink_record, worker_limit
from balancer.actuate.k8s_kueue import framework_restarts, restarts_on_resize
from balancer.actuate.k8s_namespaces import Resolver, labels_by_name, namespace_entry
from balancer.actuate.k8s_nodes import by_name
from balancer.actuate.k8s_pods import (  # noqa: F401  (workload_from_pod, running_workload: re-exported)
    as_int,
    elastic_bounds,
    pod_models,
    running_pod,
    running_workload,
    with_namespaces,
    with_volumes,
    workload_from_pod,
)
from balancer.actuate.k8s_requests import pod_requests
from balancer.actuate.k8s_watch import ListCache, by_key
from balancer.actuate.kubernetes import (
    KUEUE_QUEUE_LABEL,
    PRIORITY_ANNOTATION,
    RESIZED_ANNOTATION,
    SUSPENDED_LABEL,
    _Api,
    parse_time,
)
from balancer.colocation_record import ColocationRecord
from balancer.model import DisruptionBudget, SuspendedJob, Workload, WorkloadClass
from balancer.noderules import Selector

log = logging.getLogger(__name__)
Json = dict[str, Any]
# a training Job's word that its trainer saves a checkpoint when its workers get SIGTERM, within their grace period
# (preemption-aware checkpointing): lowering its parallelism loses no work
CHECKPOINT_ON_SIGTERM_ANNOTATION = "gputide.io/checkpoint-on-sigterm"


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a Job says of its workers that their pods do not (module docstring)."""

    limit: int | None   # the most workers it can run (`k8s_jobs.worker_limit`); None: only parallelism bounds it
    restarts: bool      # Kueue restarts it whole to resize it
    shrunk_from: int = 0             # workers before gputide's hotspot shrink (`k8s_jobs.shrink_record`); 0: none
    shrink_overridden: bool = False  # it records such a shrink but was resized since: the record is void
    colocation: ColocationRecord | None = None   # co-location's shrink, while valid (`k8s_jobs.colocation_record`)
    colocation_void: bool = False    # it records such a shrink but was resized since (`k8s_jobs.colocation_record`)
    checkpoints_on_sigterm: bool = False   # its trainer saves a checkpoint on SIGTERM: a resize loses nothing
    resized_at: float = math.nan     # when a resize by gputide last restarted its work (`gputide.io/resized-at`)


def job_facts(job: Json) -> JobFacts | None:
    """A Job's `JobFacts`; None for a Job that has neither a worker limit nor a restarting resize (a Job queued
    through Kueue without `kueue.x-k8s.io/elastic-job: "true"`, `k8s_kueue.restarts_on_resize`, or one that says
    `gputide.io/resize-restarts: "true"`, `k8s_kueue.framework_restarts`) nor a record of gputide's hotspot or
    co-location shrink, nor says it checkpoints on SIGTERM (`gputide.io/checkpoint-on-sigterm: "true"`)."""
    meta = job.get("metadata") or {}
    restarts = (restarts_on_resize(job, (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL) or "")
                or framework_restarts(job))
    limit = worker_limit(job)
    shrunk_from, overridden = shrink_record(job)
    colocation, colocation_overridden = colocation_record(job)
    notes = meta.get("annotations") or {}
    saves = notes.get(CHECKPOINT_ON_SIGTERM_ANNOTATION) == "true"
    resized = parse_time(notes.get(RESIZED_ANNOTATION))
    if not meta.get("name") or (limit is None and not restarts and not shrunk_from and not overridden
                                and colocation is None and not colocation_overridden and not saves
                                and resized is None):
        return None
    return JobFacts(limit, restarts, shrunk_from, overridden, colocation, colocation_overridden, saves,
                    math.nan if resized is None else resized)


def with_job(w: Workload, facts: JobFacts | None) -> Workload:
    """A training pod `w` with what its Job says (`JobFacts`): elastic bounds capped at the Job's worker limit
    (never below one worker: a running Job is still there to shrink), whether a resize restarts it, and gputide's
    records of a hotspot or co-location shrink; a Job that checkpoints on SIGTERM has its pods' checkpoint always
    current (+inf: `capacity.since_checkpoint` reads 0 s of work lost), and one gputide resized after the pod's
    checkpoint (or, without one, after the pod started) restarted its work then (`_restarted`)."""
    if facts is None or w.workload_class is not WorkloadClass.TRAINING:
        return w
    hi = w.elastic_max if facts.limit is None else min(w.elastic_max, max(facts.limit, 1))
    co = facts.colocation
    return replace(w, elastic_min=min(w.elastic_min, hi), elastic_max=hi, restarts_on_resize=facts.restarts,
                   checkpointed_at=math.inf if facts.checkpoints_on_sigterm else _restarted(w, facts.resized_at),
                   shrunk_from=facts.shrunk_from, shrink_overridden=facts.shrink_overridden,
                   colocation_from=co.before if co else 0, colocation_service=co.service if co else "",
                   colocation_overridden=facts.colocation_void)


def _restarted(w: Workload, resized_at: float) -> float:
    """The pod's checkpoint time, or the Job's last resize by gputide when that came later than the checkpoint (or
    than the pod's start, where it reports no checkpoint): the resize lost the work since the checkpoint and the
    trainer went on from it, while the annotation, which only a new checkpoint moves, still names the old one."""
    since = w.checkpointed_at if not math.isnan(w.checkpointed_at) else w.started_at
    # no resize known, or one before: the pod's own; a NaN `since` (nothing known) compares False, so the resize wins
    return w.checkpointed_at if math.isnan(resized_at) or resized_at <= since else resized_at


def suspended_job(job: Json) -> SuspendedJob | None:
    """The SuspendedJob a Job gputide suspended is (see the module docstring); None unless it is elastic, can still
    run a worker and is suspended indeed (`spec.suspend`: a Kueue-queued Job is suspended by Kueue once gputide
    deactivated its Workload, and one Kueue keeps running is not suspended, whatever its label says)."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    template = spec.get("template") or {}
    notes = (template.get("metadata") or {}).get("annotations") or {}
    elastic_min, elastic_max = elastic_bounds(notes)
    limit = worker_limit(job)   # completions - succeeded, where completions cannot grow with the Job
    if limit is not None and limit < elastic_max:
        elastic_min, elastic_max = min(elastic_min, limit), limit
    if elastic_max <= 0 or not meta.get("name") or spec.get("suspend") is not True:
        return None
    tspec = template.get("spec") or {}
    return SuspendedJob(
        name=meta["name"], namespace=meta.get("namespace", "default"), elastic_min=elastic_min,
        elastic_max=elastic_max, gpus_per_worker=max(pod_requests(template)[0], 1),
        priority=as_int((meta.get("annotations") or {}).get(PRIORITY_ANNOTATION), as_int(tspec.get("priority"), 0)),
        allowed_models=pod_models(notes, tspec),
    )


def finished_gpu_pod(pod: Json) -> bool | None:
    """True for a pod that ran to its end (Succeeded or Failed) with an `nvidia.com/` device (a GPU, a shared one,
    a MIG device); None otherwise."""
    if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
        return None
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        asked = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        if any(r.startswith("nvidia.com/") and str(n).strip() not in ("0", "") for r, n in asked.items()):
            return True
    return None


def disruption_budget(pdb: Json) -> DisruptionBudget | None:
    """The DisruptionBudget a PodDisruptionBudget is; None for one without a name, or without a selector: in
    policy/v1 a null selector selects no pod (an empty one, `{}`, every pod of its namespace), so it guards nothing."""
    meta = pdb.get("metadata") or {}
    selector = (pdb.get("spec") or {}).get("selector")
    if not meta.get("name") or selector is None:
        return None
    return DisruptionBudget(meta["name"], meta.get("namespace", "default"), Selector.from_json(selector),
                            max(as_int((pdb.get("status") or {}).get("disruptionsAllowed"), 0), 0))


def served(workloads: dict[str, Workload], servable: frozenset[str], services: frozenset[str]) -> dict[str, Workload]:
    """`workloads` with each pod of `servable` (`k8s_pods.servable`: no class label, no Job's) whose owner, as
    qualified (`qualify_ambiguous`), is one of `services` (the profiles' names) made inference."""
    made = {k: replace(w, workload_class=WorkloadClass.INFERENCE) for k in servable
            if (w := workloads.get(k)) is not None and w.owner in services
            and w.workload_class is not WorkloadClass.INFERENCE}
    return workloads | made if made else workloads


def ambiguous_owners(workloads: dict[str, Workload], suspended: tuple[SuspendedJob, ...] | None) -> frozenset[str]:
    """Bare owner (and suspended Job) names that occur in more than one namespace."""
    spaces: dict[str, set[str]] = {}
    for w in workloads.values():
        if w.owner and "/" not in w.owner:
            spaces.setdefault(w.owner, set()).add(w.namespace)
    for j in suspended or ():
        spaces.setdefault(j.name, set()).add(j.namespace)
    return frozenset(name for name, ns in spaces.items() if len(ns) > 1)


def qualify_ambiguous(workloads: dict[str, Workload], suspended: tuple[SuspendedJob, ...] | None,
                      clash: frozenset[str] | None = None
                      ) -> tuple[dict[str, Workload], tuple[SuspendedJob, ...] | None]:
    """Owners (and suspended Jobs) named in `clash` (default: `ambiguous_owners`) renamed `namespace/name`."""
    clash = ambiguous_owners(workloads, suspended) if clash is None else clash
    if not clash:
        return workloads, suspended
    pods = {k: replace(w, owner=f"{w.namespace}/{w.owner}") if w.owner in clash else w for k, w in workloads.items()}
    jobs = None if suspended is None else tuple(
        replace(j, name=f"{j.namespace}/{j.name}") if j.name in clash else j for j in suspended)
    return pods, jobs


class KubernetesWorkloads:
    """`workload_overrides` for `PrometheusTelemetrySource`: {"namespace/pod": Workload} of the running GPU pods.
    `services`: the names of `--services`' profiles, whose pods of any controller but a Job are inference unless
    their label says otherwise (`served`); none: every pod is classed by its own object alone."""

    def __init__(self, api_client: Any, ttl_s: float = 60.0, clock: Callable[[], float] = time.time, *,
                 max_retries: int = 1, sleep: Callable[[float], None] = time.sleep, watch: bool = False,
                 watch_s: float = 300.0, services: Collection[str] = ()) -> None:
        self.api = _Api(api_client, max_retries, 0.5, sleep, 10.0)
        self.services = frozenset(services)
        self.ttl_s, self.clock = ttl_s, clock
        core, batch, policy = self.api.core, self.api.batch, self.api.policy
        self.pods = ListCache(
            "running pods", lambda **kw: self.api("list running pods", core.list_pod_for_all_namespaces, **kw),
            core.list_pod_for_all_namespaces, running_pod,
            selectors={"field_selector": "status.phase=Running"}, ttl_s=ttl_s, clock=clock, watch=watch,
            watch_s=watch_s)
        self.watch = self.pods.watch   # the pods' ListWatch (None without `watch`), whose state the metrics show
        self.finished = ListCache(
            "finished pods", lambda **kw: self.api("list finished pods", core.list_pod_for_all_namespaces, **kw),
            core.list_pod_for_all_namespaces, finished_gpu_pod,
            selectors={"field_selector": "status.phase!=Running,status.phase!=Pending"}, view=frozenset,
            ttl_s=ttl_s, clock=clock, watch=watch, watch_s=watch_s)
        self.jobs = ListCache(
            "suspended jobs", lambda **kw: self.api("list suspended jobs", batch.list_job_for_all_namespaces, **kw),
            batch.list_job_for_all_namespaces, suspended_job, selectors={"label_selector": f"{SUSPENDED_LABEL}=true"},
            view=by_key, ttl_s=ttl_s, clock=clock, watch=watch, watch_s=watch_s)
        self.budgets = ListCache(
            "pod disruption budgets",
            lambda **kw: self.api("list pod disruption budgets",
                                  policy.list_pod_disruption_budget_for_all_namespaces, **kw),
            policy.list_pod_disruption_budget_for_all_namespaces, disruption_budget, view=by_key, ttl_s=ttl_s,
            clock=clock, watch=watch, watch_s=watch_s)
        self.namespaces = ListCache(
            "namespaces", lambda **kw: self.api("list namespaces", core.list_namespace, **kw), core.list_namespace,
            namespace_entry, view=labels_by_name, ttl_s=ttl_s, clock=clock, watch=watch, watch_s=watch_s)
        self.jobs_facts = ListCache(
            "jobs", lambda **kw: self.api("list jobs", batch.list_job_for_all_namespaces, **kw),
            batch.list_job_for_all_namespaces, job_facts, ttl_s=ttl_s, clock=clock, watch=watch, watch_s=watch_s)
        self.claims = ListCache(
            "persistentvolumeclaims",
            lambda **kw: self.api("list persistentvolumeclaims",
                                  core.list_persistent_volume_claim_for_all_namespaces, **kw),
            core.list_persistent_volume_claim_for_all_namespaces, claim_entry, ttl_s=ttl_s, clock=clock, watch=watch,
            watch_s=watch_s)
        self.volumes = ListCache(
            "persistentvolumes", lambda **kw: self.api("list persistentvolumes", core.list_persistent_volume, **kw),
            core.list_persistent_volume, volume_state, view=by_name, ttl_s=ttl_s, clock=clock, watch=watch,
            watch_s=watch_s)
        # (pods, namespaces, jobs, claims, volumes versions) and the workloads of the last `__call__`, settled
        self._pods: tuple[tuple[int, ...], dict[str, Workload]] = ((0, 0, 0, 0, 0), {})
        self._mounted = (-1, False)   # (pods version, whether a pod has claims to settle)
        self._servable: frozenset[str] = frozenset()   # of the last `__call__`'s pods: `k8s_pods.servable`
        self._jobs: tuple[int, tuple[SuspendedJob, ...] | None] = (0, None)  # of the last `suspended_jobs()`
        self._memo: tuple[tuple, tuple] | None = None
        self._clash: frozenset[str] = frozenset()

    def _qualified(self) -> tuple[dict[str, Workload], tuple[SuspendedJob, ...] | None]:
        """Both latest answers with ambiguous owners qualified, and then the profiled services' pods made inference
        (`served`; recomputed only when either answer changed)."""
        key = (self._pods[0], self._jobs[0], self.services)
        if self._memo is None or self._memo[0] != key:
            clash = ambiguous_owners(self._pods[1], self._jobs[1])
            if clash != self._clash and clash:  # said once while it lasts, not at every pod event
                log.warning("owner names used in several namespaces, qualified as namespace/name: %s",
                            ", ".join(sorted(clash)))
            self._clash = clash
            pods, jobs = qualify_ambiguous(self._pods[1], self._jobs[1], clash)
            if self.services:
                pods = served(pods, self._servable, self.services)
            self._memo = (key, (pods, jobs))
        return self._memo[1]

    def suspended_jobs(self) -> tuple[SuspendedJob, ...] | None:
        """The Jobs gputide suspended, read as the budgets are (with `watch`, as of the last event once synced;
        else at most one list per `ttl_s`); None until the API has answered once."""
        jobs = self.jobs.current()
        self._jobs = (self.jobs.version, jobs)
        return self._qualified()[1]

    def disruption_budgets(self) -> tuple[DisruptionBudget, ...] | None:
        """Every PodDisruptionBudget, by namespace/name: with `watch`, as of the watch's last event once it has
        synced; before that (and without `watch`) listed at most once per `ttl_s`. None until the API has answered
        once (the safety guard then leaves the budgets to the Eviction API)."""
        return self.budgets.current()

    def finished_pods(self) -> frozenset[str] | None:
        """The GPU pods (namespace/pod) that ran to their end, Succeeded or Failed, read as the budgets are; None
        until the API has answered once. Kubelets before 1.34 still list their devices in PodResources
        (kubernetes#119423), so the exporter attributes them to GPUs they no longer hold: the attribution drops them
        (`balancer.telemetry.attribution.attributed`'s `finished`)."""
        return self.finished.current()

    def close(self) -> None:
        """Stop watching (a no-op without `watch`)."""
        for cache in (self.pods, self.finished, self.jobs, self.budgets, self.namespaces, self.jobs_facts,
                      self.claims, self.volumes):
            cache.close()

    def __call__(self) -> dict[str, Workload]:
        """The running GPU pods; {} until the API has answered once (the metrics describe them meanwhile). Their
        namespaceSelectors are resolved by the namespaces' latest labels (a pod with one is not movable until the
        namespaces have been read), their claims settled by the claims and volumes (`with_volumes`: read only while
        a pod has claims to settle) and their Jobs' facts applied (`with_job`); rebuilt only when the pods, the
        namespaces, the Jobs, the claims or the volumes changed."""
        running = self.pods.current() or {}
        labels = self.namespaces.current()   # every cycle, so the namespaces watch starts with the others
        facts = self.jobs_facts.current() or {}
        if self._mounted[0] != self.pods.version:   # a scan of the pods only when they changed
            self._mounted = (self.pods.version, any(r.mounts for r in running.values()))
        mounted = self._mounted[1]
        claims = self.claims.current() if mounted else None
        volumes = self.volumes.current() if mounted else None
        key = (self.pods.version, self.namespaces.version, self.jobs_facts.version, self.claims.version,
               self.volumes.version)
        if key != self._pods[0]:
            items = {k: with_volumes(r.workload, r.mounts, claims, volumes) for k, r in running.items()}
            resolve = Resolver(lambda: labels).affinity
            unresolved = [k for k, w in items.items() if w.pod_affinity.unresolved]
            if unresolved:
                items |= {k: with_namespaces(items[k], resolve) for k in unresolved}
            if facts:
                items = {k: with_job(w, facts.get(f"{w.namespace}/{w.owner}")) for k, w in items.items()}
            self._pods = (key, items)
            self._servable = frozenset(k for k, r in running.items() if r.servable) if self.services else frozenset()
        return self._qualified()[0]
