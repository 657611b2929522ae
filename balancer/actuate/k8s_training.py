"""`ScaleTraining` on a batch/v1 Job: how the actuator stops, resumes and resizes a training Job, and when Kueue
quota moves.

Stop (0 workers). The Job is labelled `gputide.io/suspended=true` (and its pods' priority kept in the annotation
`gputide.io/priority`, since a stopped Job has no pods to read it from), so `KubernetesWorkloads.suspended_jobs`
finds it again; its size is kept. A plain Job is then suspended (`spec.suspend: true`). A Job queued through Kueue
(label `kueue.x-k8s.io/queue-name`, with or without `--kueue-queues`) is not: Kueue owns its `spec.suspend`. Kueue's
job reconciler (kueue pkg/controller/jobframework/reconciler.go) unsuspends a suspended Job whose Workload is still
admitted and suspends a running Job whose Workload is not (kubernetes-sigs/kueue#1726), so a suspend patched on it
is undone at Kueue's next reconcile and the Job keeps running on GPUs the plan gave to inference. Such a Job is stopped
through its Workload, Kueue's documented way: `spec.active: false`, on which Kueue evicts the Workload (its quota
released) and suspends the Job, and keeps it suspended. A queued Job without a Workload is refused (FAILED):
nothing could keep it stopped. A deactivation that got no answer is read back: landed, the stop is done; else the
label is removed only where the Workloads are read back active (unread, it stays: a Job Kueue keeps suspended
without it would never be found again, one labelled but running is not taken as stopped, below).

Run (N > 0 workers). The size comes from `k8s_jobs.resize` (parallelism; completions too for an Elastic Indexed
Job; refused beyond `completions - succeeded` where completions cannot change) and the label is removed. A hotspot
shrink writes its record (`gputide.io/shrunk`, `k8s_jobs.shrink_patch`) in that same patch, and its give-back
removes it there, so the Job never runs shrunk without the record a restarted controller gives it back by; any other
resize or stop removes it there too once the Job is back at the record's `from` or the record is void. The give-back
grows the Job no further than that record says it had (`k8s_jobs.give_back_limit`) and writes nothing without a
valid one ("(already)"): a shrink that found the Job already smaller wrote none, and a Job resized since is its
owner's; the planner's memory of the shrink (the plan's view) never raises a Job over its owner's size. Co-location's
give-back likewise, by its own record.
Co-location's shrink is recorded the same way (`gputide.io/colocation-shrunk`, `k8s_jobs.colocation_patch`). A plain
Job is unsuspended with it; a running queued Job is resized in place only where Kueue's ElasticJobsViaWorkloadSlices
honours its `kueue.x-k8s.io/elastic-job: "true"` annotation, else Kueue suspends it, re-queues and re-admits it at
the new size (every pod restarting: the detail says so, and the planner prices it, `JobView.restarts_on_resize`);
a queued Job that gputide stopped has its Workloads made active again after the Job's
new size is written, so Kueue queues them as they now are and unsuspends the Job once admitted, and its label is
removed only then (a failure or a restart in between leaves it labelled, so a later cycle resumes it; the label's
removal failing is a note). gputide never writes `spec.suspend` on a queued Job.

Stopped. A Job counts as stopped by gputide when labelled and suspended (`spec.suspend`) or, queued, with a
Workload inactive; the label alone is not enough (a stop cut between its label and the deactivation, an older
gputide's label on a Job Kueue kept running): such a Job runs and holds its quota, and is resized as running.

Quota. With `--kueue-queues` and a queued Job, GPU nominalQuota moves between the two ClusterQueues in the flavor
`k8s_kueue` settles, read before anything changes (stopping clears the admission): to training before a Job grows,
so Kueue can admit the workers (and given back if the Job then cannot be changed; where its last write got no
answer, only once read back unchanged: a grow that landed keeps it), back to inference after it shrinks. The GPUs
moved are the change of the Job's own size (the GPUs its pod template requests, none for a Job asking for no GPU,
x the workers its spec asks for now, `k8s_jobs.workers_asked`, 0 for a Job gputide stopped), never the action's
`previous_workers`: a plan from a snapshot that lags a resize (gputide's or anyone's) would move quota no Job asks
for, and the queues would drift apart from the Jobs a little more each time. Each move is durable across a restart
(`k8s_quota`, `k8s_transfer`); one lent ahead of a grow is rolled back if found open. Every refusal (a size that
cannot run, a flavor that cannot be told, a queued Job without a Workload) comes before any change.

Stale plans. The planners count a Job's running workers (`previous`: its pods the telemetry places on GPUs, so
not those on a node without an exporter or whose exporter went dark), and the safety guard charges its disruption
budget with those a resize takes below that count. The Job's controller stops the workers beyond the new size,
pending ones first (an Elastic Indexed Job's indexes at or beyond it, whatever their phase; `k8s_jobs`), so where
the Job runs more than the plan saw, writing the plan's size would stop workers no one counted (the plan saw 4
running and shrinks to 2, the Job runs 8: 6 stopped). The size written then stops no more running workers than the
plan meant (`k8s_jobs.seen_size`; 8 - (4 - 2) = 6, the detail says so; a Job Kueue restarts whole to resize
restarts every worker all the same, and keeps the plan's cut), its shrink records tell that cut, and the Kueue
quota given back is that of the workers the size written removes; that size is never below the Job's elastic
minimum (its pods' `gputide.io/elastic-min`: the plan saw 6 and shrinks to 1, the Job runs 8 and runs with 4 at
least: 4, not 3). A stop (0 workers: the capacity planner stops a Job it cannot shrink below its elastic minimum) is
never cut to a resize: the Job is suspended whole, the workers the plan did not see too, and the detail says so
(`k8s_jobs.stops_unseen`); a Job left running 2 of its 8 workers, below its minimum and unlabelled, would hold its
GPUs and never be resumed as a stopped one. A resize is never refused: a Job whose unseen workers
no later view counts either (their node has no exporter) would be refused every cycle, and a reclaim of loaned
GPUs must go through. A size that would stop running workers where the plan meant none (a grow planned for a Job
that runs more than its target) is not written. Its pods are read (Running, controlled by the Job, not being
deleted) only where it could be so: a size below the Job's own on a Job asking for more than the plan saw. Pending
workers (the Job asks for more than run) cost no running one: the Job's controller deletes them first, and the
plan's size is written. A shrink never raises a Job's size (`k8s_jobs.raises`): one planned from a view that lags
its owner's own shrink (the plan "reclaims" 8 -> 6, the Job asks for 4 now), or of a Job gputide stopped since,
writes nothing and moves no quota; the action is applied, as an inference scale already at its count is
("(already)").

A plain Job suspended by someone else (`spec.suspend` without gputide's label: its owner paused it) is refused
before any change: resizing it would unsuspend it, stopping it would label it and a later cycle would resume it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from balancer.actions import ScaleTraining
from balancer.actuate.k8s_jobs import (
    colocation_patch,
    describe,
    give_back_limit,
    may_stop_unseen,
    pod_selector,
    raises,
    resize,
    seen_note,
    seen_size,
    shrink_patch,
    stops_unseen,
    workers_asked,
)
from balancer.actuate.k8s_jobs import size as job_size
from balancer.actuate.k8s_kueue import (
    ELASTIC_JOB_ANNOTATION,
    JOB_UID_LABEL,
    RESIZE_RESTARTS_ANNOTATION,
    framework_restarts,
    restarts_on_resize,
)
from balancer.actuate.k8s_quota import KueueQuota, Untold
from balancer.actuate.k8s_requests import pod_requests
from balancer.actuate.kubernetes import (
    KUEUE_QUEUE_LABEL,
    KUEUE_WORKLOADS,
    MERGE_PATCH,
    PRIORITY_ANNOTATION,
    RESIZED_ANNOTATION,
    SUSPENDED_LABEL,
    Json,
    _Api,
    rfc3339,
)
from balancer.errors import ActuationError, PermanentActuationError

log = logging.getLogger(__name__)

# what the detail of a resize that wrote nothing says, for people ("job NS/NAME left as it is (already): why"); the
# actuator is told by `Applied.unchanged`, never by these words
LEFT_AS_IS = "left as it is (already)"


@dataclass(frozen=True, slots=True)
class Applied:
    """What an action the Kubernetes actuator applied did, as its handler says it (`KubernetesActuator.apply` makes
    the `ActionResult` of it; a handler may return its detail alone, a str): the `detail` for people, and as data
    what the loop tells the planner, never read back from the words (a message reworded would lose it):
    `unchanged`, nothing written (a training resize left as it is, `LEFT_AS_IS`); `capped_to`, the most replicas an
    HPA floor capped at its maxReplicas runs (`k8s_inference.InferenceScaling._floor_clamp`). Here, below the actuator
    and k8s_inference that import this module, so all can write it."""

    detail: str
    unchanged: bool = False
    capped_to: int | None = None


@dataclass(frozen=True)
class _Job:
    """The Job an action changes, as read before it: where it is, its Kueue queue ("" when not queued), whether
    gputide's label says it stopped it and whether it is stopped indeed (`_stopped`)."""

    ns: str
    name: str
    queue: str
    labelled: bool
    stopped: bool = False   # labelled and stopped indeed: spec.suspend, or a Workload inactive (`_stopped`)
    restarts: bool = False   # Kueue restarts it whole to resize it (`k8s_kueue.restarts_on_resize`)
    # its framework restarts every worker on a resize (`k8s_kueue.framework_restarts`)
    framework_restarts: bool = False

    @property
    def what(self) -> str:
        return f"job {self.ns}/{self.name}"


class TrainingJobs:
    """Stops, resumes and resizes training Jobs; moves Kueue quota with them (the module docstring)."""

    def __init__(self, api: _Api, kueue: KueueQuota, clock: Callable[[], float] = time.time) -> None:
        self.api, self.kueue, self.clock = api, kueue, clock

    def scale(self, ns: str, name: str, workers: int, previous: int, priority: int | None,
              queues: tuple[str, str] | None, action: ScaleTraining | None = None) -> Applied:
        """Run `workers` workers of Job ns/name (0: stop it), `previous` before as the plan saw it (the quota moved
        is from the Job's own size, `k8s_jobs.workers_asked`, 0 if gputide stopped it); `priority` is that of its pods
        (None: none running), `queues` the (inference, training) ClusterQueues quota moves between, `action` the
        resize whose shrink records are written with the size (the hotspot's `ScaleTraining.shrunk_from`: 0 removes
        it, None leaves it unless done with, `k8s_jobs.shrink_patch`; co-location's, `k8s_jobs.colocation_patch`).
        Returns what changed (`Applied`: `unchanged` when nothing was written); raises ActuationError."""
        what = f"job {ns}/{name}"
        obj = self.api(what, self.api.batch.read_namespaced_job, name, ns)
        labels = obj["metadata"].get("labels") or {}
        queue = labels.get(KUEUE_QUEUE_LABEL) or ""
        labelled = labels.get(SUSPENDED_LABEL) == "true"
        if not queue and obj["spec"].get("suspend") and not labelled:
            raise PermanentActuationError(
                f"{what} is suspended, not by gputide (no {SUSPENDED_LABEL} label): its owner paused it; neither "
                "resumed nor resized")
        # a labelled queued Job's Workloads tell whether it is stopped indeed (`_stopped`)
        owned = self.kueue.workloads(ns, name, obj) if queue and labelled else None
        job = _Job(ns, name, queue, labelled, _stopped(obj, labelled, owned), restarts_on_resize(obj, queue),
                   framework_restarts(obj))
        size = resize(obj, workers, what) if workers else {}   # a size that cannot run: refused before anything
        written, seen = self._written(job, obj, workers, previous, action)
        if written is None:
            return Applied(f"{what} {LEFT_AS_IS}: {seen}", unchanged=True)
        if written != workers:   # the size that stops no running worker the plan did not mean to
            # its shrink records (`_records`) tell the cut written: the plan's, from the workers running
            cut = {"workers": written, "previous_workers": previous + written - workers}
            workers, action = written, replace(action, **cut) if action else None
            size = resize(obj, workers, what)   # `written` is never a stop (`_written`)
        # quota follows the Job as it is, not the plan's `previous` (read from a snapshot, which can lag a resize
        # gputide or anyone else made): a stopped Job holds none, else what Kueue admits it for
        asked = 0 if job.stopped else workers_asked(obj)
        # per worker, what its pod requests (Kueue's count, and the drift check's): a Job asking for no GPU moves none
        delta = (workers - asked) * pod_requests(obj["spec"].get("template") or {})[0]
        quota = queues if queues and job.queue and delta else None
        if owned is None:
            owned = self.kueue.workloads(ns, name, obj) if job.queue and (quota or not workers) else []
        flavor = self.kueue.check_queues(quota, self.kueue.admitted_flavor(ns, name, owned))[0] if quota else None
        notes = [seen] if seen else []
        if quota and asked != previous:
            notes.append(f"quota moved for the {asked} workers the Job asks for, not the {previous} the plan saw")
        if quota and delta > 0:   # grow: quota first, so Kueue can admit the workers (rolled back if it cannot)
            notes.append(self.kueue.shift(quota[0], quota[1], delta, flavor, undo=True))
        try:
            record = _records(obj, workers, action)
            current = job_size(obj)
            # the work since its checkpoint restarts: a stopped Job resumed, a shrink (its stopped workers' share is
            # lost and a synchronous job's others go back to the checkpoint), or any resize that restarts it whole;
            # a plain grow adds workers and loses nothing (`JobView.restarts_on_resize` prices the same way)
            restarted = job.stopped or workers < current or (
                workers != current and (job.restarts or job.framework_restarts))
            state = (self._run(job, owned, size, record, restarted) if workers
                     else self._stop(job, owned, priority, record))
        except ActuationError:
            # an unanswered write may have grown the Job all the same: its quota kept then (`_grown`)
            if quota and delta > 0 and not self._grown(job, workers, owned):
                self._give_back(quota, delta, flavor)
            raise
        if quota and delta < 0:   # shrink: the quota goes back once the job is smaller, completing a change
            notes.append(self._quota_back(quota, -delta, flavor))   # already made: its failure is a note
        return Applied("; ".join([f"{what} {state}", *notes]))

    def _written(self, job: _Job, obj: Json, workers: int, previous: int,
                 action: ScaleTraining | None) -> tuple[int | None, str]:
        """The size to write for the plan's `workers` (None: nothing, the Job left as it is) and why it differs ("":
        it does not). A give-back grows the Job to no more than its valid shrink record says it had
        (`k8s_jobs.give_back_limit`), nothing without one. A shrink never raises the Job's size (`k8s_jobs.raises`); a
        size below the Job's own on a Job
        asking for more than the plan saw run stops no more running workers than the plan meant, nor goes below its
        elastic minimum (`k8s_jobs.seen_size`, from its pods read now); a stop stops it whole, its unseen workers too
        (`k8s_jobs.stops_unseen`: the note)."""
        limit = give_back_limit(obj, action) if action is not None and workers > job_size(obj) else None
        if limit is not None and workers > limit:
            if not limit:
                return None, ("a give-back, but it has no valid record of gputide's shrink (the shrink wrote nothing, "
                              "or the Job was resized since): nothing of gputide's to give back; nothing written")
            return limit, (f"given back the {limit} workers its record says it had before gputide's shrink, "
                           f"not {workers}")
        if raises(obj, workers, previous, job.stopped):
            asks = "is stopped" if job.stopped else f"asks for {job_size(obj)}"
            return None, (f"the plan's shrink from {previous} to {workers} workers would raise it: it {asks} (resized "
                          "since the plan's view); nothing written")
        if job.stopped or not may_stop_unseen(obj, workers, previous):   # a stop stops it whole, never cut
            return workers, "" if job.stopped else stops_unseen(obj, workers, previous)
        selector = pod_selector(obj)
        pods = self.api(f"pods of {job.what}", self.api.core.list_namespaced_pod, job.ns,
                        field_selector="status.phase=Running", **({"label_selector": selector} if selector else {}))
        items = pods.get("items") or []
        written = seen_size(obj, items, workers, previous)
        note = seen_note(obj, items, workers, written, previous) if written != workers else ""
        return (None if written >= job_size(obj) else written), note

    def _quota_back(self, queues: tuple[str, str], gpus: int, flavor: str | None) -> str:
        """Quota freed by a shrink that happened, back to inference (on the action's reserve). A failure does not undo
        the shrink: the workers are stopped all the same, so the action is applied (the budgets count it, and a retry
        would find the Job shrunk already and move nothing). The give-back is owed (`KueueQuota.shift`'s `owed`): once
        training is lowered, its record there has the next settle (housekeeping, every cycle) raise inference, never
        roll it back; a temporary failure before that moved nothing (the cohort's total unchanged), and the move is
        kept owed in the controller's memory, made by the next housekeeping (a restart forgets it); a permanent one
        (the queues changed since) is not retried. Each is said in the detail and the log."""
        owed = self.kueue.owes(queues[1])
        try:
            with self.api.reserve():
                return self.kueue.shift(queues[1], queues[0], gpus, flavor, owed=True)
        except ActuationError as err:
            log.error("kueue quota freed by a shrink was not given back to %s (%d GPUs): %s", queues[0], gpus, err)
            if self.kueue.owes(queues[1]) > owed:
                return (f"kueue quota not given back to {queues[0]} yet ({gpus} GPUs): owed, housekeeping (every "
                        f"cycle) moves it once the queues allow: {err}")
            if isinstance(err, Untold):   # training lowered, inference perhaps not raised: said as it is
                return f"kueue quota NOT given back to {queues[0]} ({gpus} GPUs): {err}"
            return f"kueue quota NOT given back to {queues[0]} ({gpus} GPUs): nothing moved, still {queues[1]}'s: {err}"

    def _patch(self, job: _Job, body: Json) -> None:
        self.api(job.what, self.api.batch.patch_namespaced_job, job.name, job.ns, body, _content_type=MERGE_PATCH)

    def _stop(self, job: _Job, owned: list[Json], priority: int | None, record: Json) -> str:
        meta: Json = {"labels": {SUSPENDED_LABEL: "true"}, "annotations": dict(record.get("annotations") or {})}
        if priority is not None:
            meta["annotations"][PRIORITY_ANNOTATION] = str(priority)
        if not meta["annotations"]:
            del meta["annotations"]
        if not job.queue:
            self._patch(job, {"metadata": meta, "spec": {"suspend": True}})
            return "suspended" + _noted(record)
        if not owned:
            raise PermanentActuationError(
                f"{job.what} is queued through Kueue ({KUEUE_QUEUE_LABEL}={job.queue}) but has no Workload: Kueue "
                "owns its spec.suspend and would undo a suspend, and there is no Workload to deactivate; not stopped")
        # labelled first: a Job stopped but not labelled would never be found again, one labelled but still
        # running is not listed as suspended (`k8s_workloads.suspended_job` wants spec.suspend too) nor counted as
        # stopped (`_stopped`)
        self._patch(job, {"metadata": meta})
        # the deactivation's unanswered patch, if any: it may have landed (handed up to the action's list)
        with self.api.writes(hand_up=True) as doubt:
            try:
                names = self.kueue.set_active(job.ns, owned, False)
            except ActuationError as err:
                names = self._stop_failed(job, owned, err, bool(doubt))
                doubt.clear()   # read back: it landed
        done = f"Kueue workload {', '.join(names)} deactivated" if names else "its Kueue workload already inactive"
        return f"stopped: {done} (spec.active = false: Kueue evicts it and suspends the Job)" + _noted(record)

    def _stop_failed(self, job: _Job, owned: list[Json], err: ActuationError, doubt: bool) -> list[str]:
        """After a Workload's deactivation failed: when its outcome is unknown (`doubt`), the Workloads read back
        (`_read_back`); all inactive, it landed, and their names are returned. Else `err` is raised, the label
        removed only where the stop surely did not land (a definite failure, or every Workload read back active):
        a Job Kueue keeps suspended without it would never be found again (`suspended_jobs`), while one labelled
        but running is not counted as stopped (`_stopped`)."""
        found = self._read_back(job, owned) if doubt else None
        if found and all(not _active(wl) for wl in found):
            log.warning("%s: the deactivation of its Kueue workloads got no answer but landed: stopped", job.what)
            return [wl["metadata"]["name"] for wl in found]
        if not job.labelled and (not doubt or (found is not None and all(_active(wl) for wl in found))):
            self._relabel(job, None)
        raise err

    def _read_back(self, job: _Job, owned: list[Json]) -> list[Json] | None:
        """The Workloads `owned` read again, on the reserve (what confirms a change of unknown outcome), in one list:
        by Kueue's job-uid label where they carry it, else the namespace's; None when unread or one is gone
        (replaced by Kueue)."""
        uids = {(wl["metadata"].get("labels") or {}).get(JOB_UID_LABEL) for wl in owned}
        uid = uids.pop() if len(uids) == 1 else None
        try:
            with self.api.reserve():
                items = self.api(f"kueue workloads of {job.what}", self.api.custom.list_namespaced_custom_object,
                                 *KUEUE_WORKLOADS, job.ns, "workloads",
                                 **({"label_selector": f"{JOB_UID_LABEL}={uid}"} if uid else {})).get("items") or []
        except ActuationError as err:
            log.warning("%s: its Kueue workloads could not be read back: %s", job.what, err)
            return None
        found = {wl["metadata"]["name"]: wl for wl in items}
        names = [wl["metadata"]["name"] for wl in owned]
        return [found[name] for name in names] if all(name in found for name in names) else None

    def _run(self, job: _Job, owned: list[Json], size: Json, record: Json, restarted: bool) -> str:
        spec = dict(size) if job.queue else {**size, "suspend": False}
        # when a resize restarted its work (`restarted`): what it did since its checkpoint was lost unless it
        # checkpoints on SIGTERM, so its pods' `gputide.io/last-checkpoint`, which a trainer restarted from that
        # checkpoint does not move, would overstate the work a next resize loses (`k8s_workloads.with_job`)
        stamp = {RESIZED_ANNOTATION: rfc3339(self.clock())} if restarted else {}
        notes = {**(record.get("annotations") or {}), **stamp}
        # a queued Job gputide labelled keeps its label until its Workloads are active again: a Job left suspended
        # by Kueue without it (a failure, a restart in between) would never be found again (`suspended_jobs`)
        reactivate = bool(job.queue and job.labelled)
        meta: Json = {**({} if reactivate else {"labels": {SUSPENDED_LABEL: None}}),
                      **({"annotations": notes} if notes else {})}
        self._patch(job, {"metadata": meta, "spec": spec})
        state = describe(size) + _noted(record)
        if job.restarts and not job.stopped:   # a running queued Job resized: Kueue re-queues it whole
            state += (f"; Kueue restarts the whole Job to resize it (no {ELASTIC_JOB_ANNOTATION}: \"true\"): it "
                      "suspends it, every pod stops, and re-admits it at its new size")
        elif job.framework_restarts and not job.stopped:
            state += f"; every worker restarts from its last checkpoint ({RESIZE_RESTARTS_ANNOTATION}: \"true\")"
        if reactivate:   # a queued Job gputide stopped: its Workloads made active again, then its label removed
            names = self.kueue.set_active(job.ns, owned, True)   # a failure: the label stays, next cycle resumes it
            if names:
                state += (f"; Kueue workload {', '.join(names)} active again (Kueue unsuspends the Job once it "
                          "admits it)")
            state += self._unlabel(job)
        return state

    def _unlabel(self, job: _Job) -> str:
        """The label of a queued Job resumed removed, once its Workloads are active (on the reserve: it completes a
        change made). A failure does not undo the resume, only leaves a label that counts for nothing while the Job
        runs (`_stopped`) and that its next resize or stop writes again: a note in the detail and the log."""
        try:
            with self.api.reserve():
                self._patch(job, {"metadata": {"labels": {SUSPENDED_LABEL: None}}})
        except ActuationError as err:
            log.error("%s resumed, but its label %s was not removed: %s", job.what, SUSPENDED_LABEL, err)
            return f"; label {SUSPENDED_LABEL} NOT removed: {err}"
        return ""

    def _relabel(self, job: _Job, value: str | None) -> None:
        """Undo the label change of a stop that failed half-way (best effort: the action's error is what
        matters)."""
        try:
            with self.api.reserve():   # undoing: on the time the action's deadline keeps for it
                self._patch(job, {"metadata": {"labels": {SUSPENDED_LABEL: value}}})
        except ActuationError as err:
            log.warning("%s: could not restore label %s=%s: %s", job.what, SUSPENDED_LABEL, value, err)

    def _grown(self, job: _Job, workers: int, owned: list[Json]) -> bool:
        """After a grow failed: whether it may have happened all the same, so the quota lent ahead of it stays. Only
        where its last write got no answer (`_Api.unknown_writes`), read back on the reserve: a running Job's patch,
        the Job asks for `workers`; a stopped queued Job's Workloads' activation (its patch came before, answered),
        they are all active. Unread, the quota is kept too: quota lent beyond what the Jobs hold is given back by
        `KueueQuota.reconcile`, while quota given back under a Job that grew would never be lent again."""
        unknown = self.api.unknown_writes
        if job.stopped and job.queue:   # resumed once its Workloads are active: only their activation can tell
            if not any(w.startswith(f"kueue workload {job.ns}/") for w in unknown):
                return False
            found = self._read_back(job, owned)
            grown = found is None or all(_active(wl) for wl in found)
        elif job.what in unknown:
            try:
                with self.api.reserve():
                    now = self.api(job.what, self.api.batch.read_namespaced_job, job.name, job.ns)
                grown = job_size(now) == workers
            except ActuationError as err:
                log.error("%s: its resize of unknown outcome could not be read back: %s", job.what, err)
                grown = True
        else:
            return False
        if grown:
            log.warning("%s: the grow to %d workers got no answer and may have landed: its kueue quota kept (what no "
                        "Job holds is given back by the quota reconcile)", job.what, workers)
        return grown

    def _give_back(self, queues: tuple[str, str], gpus: int, flavor: str | None) -> None:
        """Return quota lent for a grow that did not happen (best effort)."""
        try:
            with self.api.reserve():   # undoing: on the time the action's deadline keeps for it
                self.kueue.shift(queues[1], queues[0], gpus, flavor)
        except ActuationError as err:
            log.error("kueue quota lent to %s for a grow that failed was not given back (%d GPUs): %s",
                      queues[1], gpus, err)


def _active(workload: Json) -> bool:
    return (workload.get("spec") or {}).get("active", True) is not False


def _stopped(job: Json, labelled: bool, workloads: list[Json] | None) -> bool:
    """Whether gputide stopped the Job indeed: labelled, and suspended (`spec.suspend`) or, queued, one of its
    Workloads inactive. The label alone is not enough: a stop cut between its label and the Workload's deactivation
    (a restart, an answer lost), or a label an older gputide left on a Job Kueue keeps running, labels a Job that
    runs and holds its quota."""
    if not labelled:
        return False
    return (job.get("spec") or {}).get("suspend") is True or any(not _active(wl) for wl in workloads or ())


def _records(job: Json, workers: int, action: ScaleTraining | None) -> Json:
    """The metadata merge patch of the Job's shrink records that resizing it to `workers` by `action` writes."""
    notes = shrink_patch(job, workers, action.shrunk_from if action else None).get("annotations", {})
    if action is not None:
        notes = {**notes, **colocation_patch(job, action)}
    return {"annotations": notes} if notes else {}


def _noted(record: Json) -> str:
    """What the change did to the shrink records (`_records`), for the action's detail."""
    notes = (record.get("annotations") or {}).items()
    return "".join(f"; {key} = {note}" if note else f"; {key} removed" for key, note in sorted(notes))
