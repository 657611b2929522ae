"""How many workers a batch/v1 Job can run, and the spec change that runs N of them: pure decisions on a Job's JSON.

`parallelism` is only an upper bound on the pods a Job runs. The Job controller never runs more than the
completions still outstanding (`completions - status.succeeded`; JobSpec.parallelism in the API reference), so a
Job with `completions` set is not resized by parallelism alone:

| the Job | resized by | at most |
|---|---|---|
| no `completions` (a work queue) | `parallelism` | unbounded |
| Indexed, `completions == parallelism` (an Elastic Indexed Job: one index per rank) | `completions` and `parallelism`
  together, kept equal (KEP-3715, beta in Kubernetes 1.27, GA in 1.31) | unbounded |
| NonIndexed with `completions`, or Indexed with `completions != parallelism` | `parallelism` |
  `completions - succeeded` |

The API server rejects a change of `completions` except on an Indexed Job whose completions equal its parallelism
after the update (`validateCompletions`, pkg/apis/batch/validation), so the last row cannot raise its completions;
asking it for more workers than can run would lend GPUs (and Kueue quota) to pods that never start. `resize`
refuses that with a `PermanentActuationError` naming the Job and the limit; the actuator calls it before anything
changes. `k8s_workloads.suspended_job` caps a suspended Job's `elastic_max` by the same `worker_limit`, so the
planner does not ask for what cannot run.

A resize stops no more running workers than the plan meant to (`previous - workers`, what the safety guard charged):
where the Job runs more than the plan saw, a smaller cut is written (`seen_size`, from the Job's pods read where
`may_stop_unseen`: `pod_selector`, `running_workers`; `seen_note` says so). Which pods a smaller size stops is the
Job controller's choice (`activePodsForRemoval`, pkg/controller/job): an Indexed Job's pods whose index is at or
beyond its completions first, whatever their phase (an Elastic Indexed Job shrunk to N loses indexes N and up), then
pending before running (not-ready < ready, unscheduled < scheduled, pending < running), so pending workers are
stopped first and cost no running one. That smaller cut never goes below the Job's elastic minimum (its pods'
`gputide.io/elastic-min`, `elastic_floor`), the fewest workers it runs with. A stop (0 workers) is never cut: the
Job is suspended whole, its unseen workers too (`stops_unseen` tells). A shrink never raises a Job's size
(`raises`).

gputide's hotspot shrink is recorded on the Job it resized, in the same patch: the annotation `gputide.io/shrunk`,
`{"from": workers before, "to": workers it left}`, removed by the give-back. "Before" is what the Job asked for
(its size: its owner's, pending workers included), or what an earlier valid record of it says, never the running
workers the plan counted: a plan from a view older than the owner's own shrink counts more, and its give-back would
grow the Job over the owner's size. A restarted controller or a new leader
reads it back (`shrink_record`) and gives the workers back once the GPU is cool; a Job whose size is no longer the
`to` was resized since (by hand, by another planner): the record is void and the Job's size is the operator's.
Any other gputide resize (the capacity planner's tide, co-location) or stop removes the record in its own patch
once it is done with (`shrink_patch`): when it leaves the Job at the record's `from` or more (the workers are back),
and when the record is already void, so a stale record never counts again if the Job later returns to its `to`.

Co-location's shrink is recorded the same way, apart (`gputide.io/colocation-shrunk`, `{"from": N, "to": M,
"service": S}`; `balancer.colocation_record` decides what each gputide resize does to it, `colocation_patch` writes
it in the resize's patch and `colocation_record` reads it back, valid only while the Job asks for M workers, void
once it does not). Its N, too, is at most what the Job asked for, never a plan's running count above it.

A give-back (the hotspot's, co-location's) grows the Job to no more than its valid record's `from`, and writes nothing
where it has none (`give_back_limit`): the shrink found the Job already smaller and wrote nothing, or the Job was
resized since; the planner's memory of the shrink is the plan's view, which may count workers the owner took away.
"""

from __future__ import annotations

import json
from typing import Any

from balancer import colocation_record as colocation
from balancer import shrink_rule
from balancer.actions import ScaleTraining
from balancer.actuate.k8s_pods import elastic_bounds
from balancer.actuate.kubernetes import controller_ref
from balancer.errors import PermanentActuationError

Json = dict[str, Any]
SHRUNK_ANNOTATION = "gputide.io/shrunk"
COLOCATION_ANNOTATION = "gputide.io/colocation-shrunk"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"   # a pod's index in an Indexed Job (annotation; label too)


def _count(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def indexed(job: Json) -> bool:
    return (job.get("spec") or {}).get("completionMode") == "Indexed"


def elastic_indexed(job: Json) -> bool:
    """An Indexed Job whose completions equal its parallelism: resized by changing both."""
    spec = job.get("spec") or {}
    n = _count(spec.get("completions"))
    return indexed(job) and n is not None and n == _count(spec.get("parallelism", 1))


def worker_limit(job: Json) -> int | None:
    """The most pods the Job can run whatever its parallelism: `completions - succeeded` for a Job with completions
    that is not an Elastic Indexed Job; None when only parallelism bounds it."""
    n = _count((job.get("spec") or {}).get("completions"))
    if n is None or elastic_indexed(job):
        return None
    return max(n - (_count((job.get("status") or {}).get("succeeded")) or 0), 0)


def resize(job: Json, workers: int, what: str) -> Json:
    """The `spec` merge patch that runs `workers` (> 0) workers of the Job (see the module docstring); raises
    PermanentActuationError when the Job cannot run that many."""
    if elastic_indexed(job):
        return {"completions": workers, "parallelism": workers}
    limit = worker_limit(job)
    if limit is not None and workers > limit:
        spec = job.get("spec") or {}
        succeeded = _count((job.get("status") or {}).get("succeeded")) or 0
        mode = "Indexed" if indexed(job) else "NonIndexed"
        raise PermanentActuationError(
            f"{what} ({mode}, completions {spec.get('completions')}, parallelism {spec.get('parallelism', 1)}, "
            f"{succeeded} succeeded) can run at most {limit} workers, not {workers}: the Job controller starts no "
            f"pod beyond completions - succeeded and its completions cannot change; nothing changed")
    return {"parallelism": workers}


def describe(size: Json) -> str:
    """The size `resize` set, for the action's detail."""
    if "completions" in size:
        return f"parallelism = completions = {size['parallelism']} (Elastic Indexed Job)"
    return f"parallelism = {size['parallelism']}"


def size(job: Json) -> int:
    """The workers the Job asks for now: its parallelism (1 when unset, as the API defaults it)."""
    return _count((job.get("spec") or {}).get("parallelism", 1)) or 0


def workers_asked(job: Json) -> int:
    """The workers the Job runs at its size now, as Kueue counts its Workload: its parallelism, capped by what can
    still run (`worker_limit`: completions - succeeded)."""
    limit = worker_limit(job)
    return size(job) if limit is None else min(size(job), limit)


def may_stop_unseen(job: Json, workers: int, previous: int) -> bool:
    """Whether resizing the Job to `workers` could stop running workers beyond the `previous - workers` the plan
    meant: only a size below the Job's own on a Job that asks for more than the plan saw run (its running workers
    never exceed what it asks for), so the common resize, of a Job asking for what the plan saw, reads no pods. A
    stop (0 workers) never is one: it stops the Job whole, unseen workers too (`stops_unseen`)."""
    return 0 < workers < size(job) and size(job) > previous


def stops_unseen(job: Json, workers: int, previous: int) -> str:
    """What a stop (`workers` 0) of a Job asking for more workers than the `previous` the plan saw run stops beyond
    them, for the action's detail ("" otherwise). A stop is never cut to a smaller resize: the planners stop a Job
    they cannot shrink below its elastic minimum, and a Job left running a few workers would hold GPUs, unlabelled
    and below that minimum."""
    if workers or size(job) <= previous:
        return ""
    return (f"it asks for {size(job)} workers, more than the {previous} the plan saw run: all stopped, workers the "
            "plan did not see included (a stop is never cut to a resize)")


def elastic_floor(job: Json) -> int:
    """The fewest workers the Job runs with: its pods' `gputide.io/elastic-min` (from its template, read as the
    planners read a pod's, `k8s_pods.elastic_bounds`: 0 unless elastic), capped by what it can still run."""
    template = (job.get("spec") or {}).get("template") or {}
    floor = elastic_bounds((template.get("metadata") or {}).get("annotations") or {})[0]
    limit = worker_limit(job)
    return floor if limit is None else min(floor, limit)


def raises(job: Json, workers: int, previous: int, stopped: bool) -> bool:
    """Whether the plan's shrink (`workers` > 0 below the `previous` it saw run) would raise the Job's size: it asks
    for `workers` or fewer (its owner shrank it since the plan's view), or gputide stopped it (`stopped`: it runs
    none). Such a shrink writes nothing; a stop (0 workers) never raises. The rule is `balancer.shrink_rule`'s,
    which the simulator follows too."""
    return shrink_rule.raises(size(job), workers, previous, stopped)


def pod_selector(job: Json) -> str:
    """The label selector of the Job's pods: its `spec.selector.matchLabels` (the API server defaults it to the
    Job's controller-uid label); "" when it has none (its pods are then told by their owner, `running_workers`)."""
    labels = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _controlled_by(pod: Json, job: Json) -> bool:
    meta, ref = job.get("metadata") or {}, controller_ref(pod.get("metadata") or {}) or {}
    if ref.get("kind") != "Job":
        return False
    return ref.get("uid") == meta["uid"] if meta.get("uid") else ref.get("name") == meta.get("name")


def _running(job: Json, pods: list[Json]) -> list[Json]:
    return [p for p in pods if _controlled_by(p, job) and (p.get("status") or {}).get("phase") == "Running"
            and not (p.get("metadata") or {}).get("deletionTimestamp")]


def running_workers(job: Json, pods: list[Json]) -> int:
    """How many of `pods` (those under the Job's selector) are its workers running now: controlled by the Job,
    Running, and not being deleted (a pod terminating stops whatever its Job's size)."""
    return len(_running(job, pods))


def _index(pod: Json) -> int | None:
    meta = pod.get("metadata") or {}
    return _count((meta.get("annotations") or {}).get(INDEX_KEY, (meta.get("labels") or {}).get(INDEX_KEY)))


def _stops(job: Json, running: list[Json], n: int) -> int:
    """How many of the Job's `running` workers its controller stops once it asks for `n`: an Elastic Indexed Job's
    with an index of `n` or more (or none: removed first too), else those beyond `n` (pending ones go first)."""
    if not elastic_indexed(job):
        return max(len(running) - n, 0)
    return sum(1 for p in running if (i := _index(p)) is None or i >= n)


def seen_size(job: Json, pods: list[Json], workers: int, previous: int) -> int:
    """The size to write for the plan's resize of the Job to `workers` (below its own size), `previous` running as
    the plan saw it, `pods` those under its selector: the least from `workers` and the Job's elastic minimum
    (`elastic_floor`) up that stops no more of its running workers than the `previous - workers` the plan meant (none
    for a grow); its own size when every smaller one would (nothing to write)."""
    running, meant = _running(job, pods), max(previous - workers, 0)
    least = max(workers, elastic_floor(job))
    return next((n for n in range(least, size(job)) if _stops(job, running, n) <= meant), size(job))


def seen_note(job: Json, pods: list[Json], workers: int, written: int, previous: int) -> str:
    """Why `written` and not the plan's `workers` (`seen_size`), for the action's detail."""
    running, meant = running_workers(job, pods), max(previous - workers, 0)
    cut = f"resized to {written}" if written < size(job) else f"left at {size(job)}"
    floor = elastic_floor(job)
    held = f" and none below its elastic minimum {floor}" if written == floor > workers else ""
    return (f"it runs {running} workers, more than the {previous} the plan saw: {cut}, not {workers}, so that no more "
            f"than the {meant} running workers the plan meant stop{held}")


def shrink_note(before: int, left: int) -> str:
    """The `gputide.io/shrunk` value of a hotspot shrink from `before` to `left` workers."""
    return json.dumps({"from": int(before), "to": int(left)}, sort_keys=True)


def shrink_patch(job: Json, workers: int, shrunk_from: int | None) -> Json:
    """The metadata merge patch gputide's change of the Job to `workers` (0: a stop) writes for the hotspot shrink
    record, in the same patch as the size: the record of a hotspot shrink (`shrunk_from` > 0: from the workers its
    valid record owes, else from the Job's own size, when more than `workers`); its removal on
    the give-back (`shrunk_from` 0) and on any other change that leaves the Job at the record's `from` or more or finds
    the record void (`ScaleTraining.shrunk_from` None: the tide, co-location); else nothing ({})."""
    if shrunk_from is not None and workers > 0:
        # the workers owed: its valid record's, else the Job's own size (pending workers count), never the plan's
        # running count, which a view older than the owner's own shrink puts above what the Job asks for
        before = (shrink_record(job)[0] or size(job)) if shrunk_from else 0
        return {"annotations": {SHRUNK_ANNOTATION: shrink_note(before, workers) if before > workers else None}}
    before, void = shrink_record(job)
    if void or (before and workers >= before):
        return {"annotations": {SHRUNK_ANNOTATION: None}}
    return {}


def give_back_limit(job: Json, action: ScaleTraining) -> int | None:
    """The most workers a give-back `action` may grow the Job to: the workers before gputide's shrink as the Job's
    valid record of it says (the hotspot's, `shrunk_from` 0: `shrink_record`; co-location's, `colocation_slack`:
    `colocation_record.give_back_limit`, the simulator's rule too), 0 when it has none (the shrink wrote nothing,
    having found the Job already smaller, or the Job was resized since: nothing of gputide's to give back); None for
    any other resize."""
    if action.cause == "colocation_slack":
        return colocation.give_back_limit(colocation.parse(_colocation_note(job)), size(job))
    return shrink_record(job)[0] if action.shrunk_from == 0 and action.cause is None else None


def shrink_record(job: Json) -> tuple[int, bool]:
    """(workers before gputide's hotspot shrink, overridden) as the Job's `gputide.io/shrunk` says: (0, False) with no
    record (or one that is not `{"from": N, "to": M}` with N > M > 0), (N, False) while the Job still asks for the M
    workers gputide left, (0, True) once it was resized since (the record is void)."""
    note = ((job.get("metadata") or {}).get("annotations") or {}).get(SHRUNK_ANNOTATION)
    try:
        record = json.loads(note) if note else None
    except ValueError:
        record = None
    if not isinstance(record, dict):
        return 0, False
    before, left = _count(record.get("from")), _count(record.get("to"))
    if before is None or left is None or not before > left > 0:
        return 0, False
    return (before, False) if size(job) == left else (0, True)


def _colocation_note(job: Json) -> str | None:
    return ((job.get("metadata") or {}).get("annotations") or {}).get(COLOCATION_ANNOTATION)


def colocation_record(job: Json) -> tuple[colocation.ColocationRecord | None, bool]:
    """(co-location's shrink as the Job records it while valid, void) from one parse, as `shrink_record`: (None, False)
    with no record or one that is not gputide's, (record, False) while the Job still asks for the workers it left,
    (None, True) once it was resized since by someone else (the record is void)."""
    record = colocation.parse(_colocation_note(job))
    if record is None:
        return None, False
    return (record, False) if size(job) == record.left else (None, True)


def colocation_patch(job: Json, action: ScaleTraining) -> Json:
    """The annotations merge patch gputide's `action` writes for the Job's co-location record, in the same patch as
    the size (`colocation_record.after`): the new record, its removal, or nothing ({}) when it does not change."""
    note = _colocation_note(job)
    record = colocation.after(colocation.parse(note), size(job), action)
    new = record.note() if record is not None else None
    return {} if new == note else {COLOCATION_ANNOTATION: new}


# What an evicted pod fails with, as a podFailurePolicy rule sees it. The Eviction API gives the pod the condition
# DisruptionTarget (status True) before its containers are stopped; their exit codes are not known in advance: SIGTERM
# (143), SIGKILL at the end of the grace period (137), 0 (excluded from onExitCodes) or the application's own.
EVICTED_CONDITION = "DisruptionTarget"
SIGNAL_EXIT_CODES = frozenset({128 + 9, 128 + 15})
# a rule with another action is skipped, as the Job controller does
ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


def _rule_matches(rule: Json) -> bool | None:
    """Whether a podFailurePolicy `rule` matches the failure of an evicted pod: True for certain (a DisruptionTarget
    pattern with status True, the default), False never, None perhaps (an exit code rule: the codes are not known in
    advance, `In` taken to match when it lists a signal's code, `NotIn` always; a pattern of another condition)."""
    codes = rule.get("onExitCodes")
    if codes is not None:
        values = {_count(v) for v in codes.get("values") or ()}
        return None if codes.get("operator") != "In" or values & SIGNAL_EXIT_CODES else False
    patterns = rule.get("onPodConditions") or ()
    if any(p.get("type") == EVICTED_CONDITION and p.get("status", "True") == "True" for p in patterns):
        return True
    return None if any(p.get("type") != EVICTED_CONDITION for p in patterns) else False


def eviction_actions(job: Json) -> list[tuple[int, str]]:
    """(index, action) of each podFailurePolicy rule that may decide an evicted pod's failure, in order. The rules
    apply in order and the first that matches wins (JobSpec.podFailurePolicy): the list ends at the first rule that
    matches for certain, and (-1, "Count"), the default handling, ends it when none does."""
    rules = ((job.get("spec") or {}).get("podFailurePolicy") or {}).get("rules") or ()
    possible = []
    for index, rule in enumerate(rules):
        match = _rule_matches(rule) if rule.get("action") in ACTIONS else False
        if match is not False:
            possible.append((index, rule["action"]))
        if match:
            return possible
    return [*possible, (-1, "Count")]


def _restarts(pod: Json | None) -> int:
    statuses = (pod or {}).get("status") or {}
    return sum(_count(c.get("restartCount")) or 0
               for c in (*(statuses.get("initContainerStatuses") or ()), *(statuses.get("containerStatuses") or ())))


def _backoff_refusal(job: Json, pod: Json | None) -> str | None:
    """Why the eviction, counted against `backoffLimit` (default 6), could fail the Job or leave it no failure to spare
    for a real one. Failed pods fail it past the limit (`status.failed` > limit). With `restartPolicy: OnFailure`
    the restarts of the containers of its Pending and Running pods count too, apart: it fails once they reach the
    limit (any at limit 0). The evicted pod's stay counted while it terminates (its grace period) and its replacement's
    add to them: the restarts of `pod` (the others' are not read) and one more must stay below the limit."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    limit, failed = _count(spec.get("backoffLimit")), _count(status.get("failed")) or 0
    limit = 6 if limit is None else limit
    if failed + 2 > limit:   # the Job fails at its limit + 1st failure: after the eviction's, one more must fit
        return f"an eviction counts as a failure against its backoffLimit ({failed} of {limit} used)"
    restarts = _restarts(pod)
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") == "OnFailure" and restarts + 1 >= limit:
        return (f"its containers' restarts count against its backoffLimit too (restartPolicy OnFailure): the pod's "
                f"{restarts} of {limit}, counted while it terminates, leave its replacement no restart to spare")
    return None


def eviction_refusal(job: Json, pod: Json | None = None) -> str | None:
    """Why evicting `pod`, one of the Job's pods (a migration), could fail the whole Job, None when it cannot. An
    evicted pod fails, and the first podFailurePolicy rule that matches it decides (`eviction_actions`;
    kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy): an Ignore rule for DisruptionTarget
    spares it only when no earlier rule may match first (a FailJob on exit codes NotIn [0] catches the evicted pod's
    143); FailJob and FailIndex fail the Job or the pod's index; Count, and no rule, count it against `backoffLimit`
    (`_backoff_refusal`). A Job with `backoffLimitPerIndex` counts per index, which gputide does not see: refused
    unless disruptions are ignored."""
    actions = eviction_actions(job)
    fatal = next(((i, a) for i, a in actions if a in ("FailJob", "FailIndex")), None)
    if fatal is not None:
        return (f"its podFailurePolicy rule {fatal[0]} ({fatal[1]}) may match an evicted pod (DisruptionTarget, or "
                "its exit code after SIGTERM) before any rule that ignores evictions")
    if all(a == "Ignore" for _, a in actions):
        return None
    why = ("no podFailurePolicy rule surely ignores evictions (an Ignore rule for the DisruptionTarget condition, "
           "no earlier rule that may match an evicted pod)")
    if (job.get("spec") or {}).get("backoffLimitPerIndex") is not None:
        return f"its failures are counted per index (backoffLimitPerIndex) and {why}"
    refusal = _backoff_refusal(job, pod)
    return None if refusal is None else f"{refusal}, and {why}"
