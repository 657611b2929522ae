"""The Kubernetes actuator: frozen actions turned into API calls, every failure into an `ActionResult`.

Nothing here decides *what* to do. This module holds the actuator itself (dispatch, deadline, results, Events) and
the power-cap and taint paths; the Migrate path is `k8s_migrate`'s, the training Job path `k8s_training`'s and the
inference path (HPA floors, Deployment scales and the record of their operator's counts, and their give-back,
`restore_floors`) `k8s_inference`'s (`InferenceScaling`, the actuator's `inference`). What the actions leave on
nodes (hot taints, reservations, power caps' expiry) is released or renewed by `k8s_upkeep` (`release_expired`,
`recover`, `housekeeping`, `keep_power_caps` delegate to its `Upkeep`: when, under which holds, per shard). How each
action reaches the cluster:

    Migrate         (`k8s_migrate`) reserve the target node (annotation `gputide.io/reserved-for`, a JSON map keyed
                    by the workload's owner so the replacement pod matches it), taint the hot source node
                    `gputide.io/hot=true:NoSchedule` with an expiry (`gputide.io/hot-until`; not a consolidation's
                    cool source: `Migrate.taint_source`), then evict the pod through the Eviction API, naming the
                    uid read. 429 = a PodDisruptionBudget says no -> RETRY, reservation released.
    SetPowerLimit   merge {uuid: watts} into the node annotation `gputide.io/power-caps`, where the node's power-cap
                    agent reads it and applies it between the GPU's minimum and its default limit; a give-back turns
                    the GPU's entry into {"restore": watts} (the agent puts the board's default back), and the same
                    write drops the entries of GPUs no longer on the node and the give-backs carried out
                    (`k8s_nodes.power_caps_update`). The annotation is also what a restarted controller or a new
                    leader reads back (`Node.power_caps`) to give back what an earlier one throttled. The node's caps
                    expire (`gputide.io/power-caps-until`, `power_cap_ttl_s` after the write), so a dead controller
                    leaves none in force for good: a live one renews the expiry (`k8s_upkeep`: not while it holds
                    still for an emergency stop, nor on a node labelled `gputide.io/emergency-stop=true`), and the
                    agent gives the caps back once it has passed.
    ScaleInference  (`k8s_inference`) raise/lower the HPA's spec.minReplicas (a predictive floor under the HPA) when
                    an autoscaling/v2 HPA scales the service (a Deployment, StatefulSet or Rollout of its name:
                    `k8s_hpa.service_hpa`), else the Deployment's scale subresource. The floor never goes below the
                    operator's own minReplicas, kept in the HPA's annotation `gputide.io/own-min-replicas` while the
                    floor differs from it (a restarted controller reads it back), nor above maxReplicas (a floor
                    capped there is still APPLIED, its cap carried: `ActionResult.capped_to`, a WARNING once per HPA
                    and bound: `InferenceScaling._floor_clamp`); the floor written is kept beside it
                    (`gputide.io/floor-min-replicas`), so a minReplicas someone else wrote since is the operator's
                    own from then on (`k8s_hpa`). An HPA another controller keeps (KEDA's, controlled by its
                    ScaledObject) is refused (FAILED): its owner writes the floor back.
                    So is a Deployment no HPA scales that another controller keeps (a controlling ownerReference: a
                    KServe InferenceService, an operator's custom resource), read first (get): its owner writes
                    `spec.replicas` back. So is a service with neither (a StatefulSet's or an operator's, profiled
                    with --services): nothing gputide can scale. Each refusal is logged once (WARNING) while it
                    lasts, then at DEBUG.
                    A Deployment's scale is lowered only while its `spec.replicas` is still the action's
                    `previous_replicas`, with the resourceVersion read: a count someone else set since the plan (an
                    operator's scale-up for a spike) is theirs, the plan stale (RETRY, code 409, nothing written); a
                    raise is written whatever the count (a reclaim), one already at the action's count is left as it
                    is (`InferenceScaling._scale_deployment`). The operator's count is recorded before the scale,
                    beside the controller rather than on the Deployment (whose patch right would reach its pod
                    template): the ConfigMap "gputide-replicas" in its Lease's namespace, shared, each entry naming
                    its writer (`k8s_deploy_record`; none without `floor_owner`), and a lowering whose record cannot
                    be written is not made (RETRY; a raise is, logged: the SLO first).
                    `restore_floors` gives the operator's own minReplicas, and a recorded Deployment's own count,
                    back where their services left gputide's management (a policy reload protecting them; never on
                    shutdown), only where this controller wrote the floor (`floor_owner`, recorded as
                    `gputide.io/floor-owner`) or no writer is recorded (an older version's floor): another shard's or
                    controller's floors are its own, as are the Deployments' records it wrote.
    ScaleTraining   batch/v1 Job (`k8s_training`): stopped for 0 workers, labelled `gputide.io/suspended=true` (its
                    pods' priority kept in `gputide.io/priority`) so `KubernetesWorkloads.suspended_jobs` finds it
                    again: a plain Job by `spec.suspend`, a Job queued through Kueue by its Workload's
                    `spec.active: false` (Kueue owns that Job's suspend and would undo one). Else resized: parallelism
                    = workers, an Elastic Indexed Job's completions with it, never beyond `completions - succeeded`
                    where completions cannot change (`k8s_jobs`); the label removed, a Workload gputide deactivated
                    made active again. With `kueue_queues` set and the Job queued, GPU quota moves between the two
                    ClusterQueues of the cohort, in the ResourceFlavor Kueue admitted the Job under (`k8s_kueue`).
                    A resize never stops more running workers than the plan meant (`previous_workers - workers`,
                    what the safety guard charged): a Job running more than the plan saw (workers on a node without
                    an exporter, the Job grown since) gets the size that stops just those (runs 8, saw 6, reclaim
                    to 4: 6), never below its elastic minimum (its pods' `gputide.io/elastic-min`), its quota moved
                    for the workers removed; pending workers do not count (the Job controller deletes those first),
                    so a Job asking for more workers than run is resized as before. A stop is never cut to a
                    resize: the Job is stopped whole as above, workers the plan did not see included (the detail
                    says so).
                    A shrink never raises a Job's size: one at or below its target (its owner shrank it since the
                    plan's view) or stopped by gputide is left as it is, nothing written, applied ("(already)";
                    `k8s_jobs`, `k8s_training`), its result `unchanged`: the planner does not remember it as
                    gputide's shrink, to give back (`planner.acknowledge`).
    Jobs and Deployments are named by their bare name (a pod's owner); the namespace is that of their pods in the
    snapshot (or of the suspended Job), else `default_namespace`.
    TaintNode       add or remove the hot taint. Its expiry (`gputide.io/hot-until`, `hot_taint_ttl_s` after the
                    write) is the safety net for a dead controller: `k8s_upkeep` removes the taint then. A
                    renewal (`renew`, the planner's, for a node still hot whose expiry is near) writes a fresh expiry
                    and posts no Event (the loop's log and audit record it; the annotation shows the new expiry).

Every read-modify-write carries the object's `metadata.resourceVersion` (optimistic concurrency): a 409 means
someone else wrote in between, so the object is read again and the change recomputed. 5xx, throttling 429 and
transport errors are retried with exponential backoff (`backoff_s * 2**attempt`, injected `sleep`) up to
`max_retries`; after that the action comes back as RETRY. 404/403/422 are permanent (FAILED).

Patches are sent as `application/merge-patch+json` explicitly: the generated client would otherwise pick a
strategic merge patch, which custom resources (Kueue) do not support. The API calls go through the gateway's
`_Api` (`balancer/actuate/kubernetes.py`).

Deadline. Each action ends within `action_deadline_s` (3 minutes; `gputide run --action-deadline`; why that is
long enough: `k8s_budget`), however many calls its path makes and however they fail: the gateway cuts each try's
timeout to what is left and starts no call or retry that could not end in time (`_Api.deadline`). The action's own
calls have the first two thirds; the last third is the reserve, kept for what undoes or completes a change already
made (a Migrate's reservation released, Kueue quota given back, a Job's label restored, the quota a shrunk Job
returns) and the action's Event, so running out of time never leaves a half-done action without time to undo it.
An action out of time comes back as RETRY with code `deadline`, like any action whose API calls failed: the
planner leaves it alone for a while, the next cycle starts from the fleet as it is, and nothing enters the safety
ledger unless its outcome is unknown (below). What it can leave behind is what a failed call leaves: a hot taint
and a reservation that expire on their own, a Job resized but its Kueue Workload not reactivated (its label
restored, so a later cycle resumes it); the eviction is a Migrate's last call, made once its target is reserved.
`housekeeping` and `recover` run under the same deadline (what is left is released next cycle). The controller's
grace period and liveness limit are derived from it (balancer/app/health.py).

Unknown outcome. A write that got no answer (its last try a transport error or a 504, or its retries cut by the
deadline after one) may have landed: the gateway lists it (`_Api.writes`) and a RETRY/FAILED result says so
(`maybe_applied`, "outcome unknown" in `detail`), which the loop counts against the safety budgets. A Migrate
counts its eviction only (the reservation and taint expire) and first confirms it by one read of the pod on the
reserve (`k8s_migrate`): gone, being deleted or replaced, it landed (APPLIED, the reservation kept); running, it did
not. So does a Migrate whose eviction is answered 409 after a try that got no answer (`after_unanswered`): where
that read fails too, the result is `maybe_applied`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from prometheus_client import CollectorRegistry

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import ActionResult, Outcome, refused_result
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_events import post_event, tell_action  # noqa: F401  (post_event: re-exported, k8s_tell's)
from balancer.actuate.k8s_hpa import HPA_OWN_MIN_ANNOTATION  # noqa: F401  (re-exported)
from balancer.actuate.k8s_inference import InferenceScaling
from balancer.actuate.k8s_migrate import Migrations
from balancer.actuate.k8s_nodes import (
    POWER_CAP_TTL_S,
    node_power_limits,
    power_caps_note,
    power_caps_patch,
    power_caps_update,
    taints_change,
)
from balancer.actuate.k8s_quota import KueueQuota
from balancer.actuate.k8s_training import Applied, TrainingJobs
from balancer.actuate.k8s_upkeep import Upkeep
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    POWER_CAP_ANNOTATION,
    RESERVATION_ANNOTATION,
    Json,
    _Api,
    _code,
    _json_annotation,
    read_power_caps,
    rfc3339,
    split_name,
)
from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)

log = logging.getLogger(__name__)


def _failed(action: Action, outcome: Outcome, err: ActuationError, unknown: list[str]) -> ActionResult:
    """A failed action; one with unanswered writes (`_Api.writes`) may have been carried out all the same."""
    if not unknown:
        return ActionResult(action, outcome, str(err), _code(err))
    return ActionResult(action, outcome, f"{err}; outcome unknown: no answer to {', '.join(unknown)}, which may "
                        "have been carried out", _code(err), maybe_applied=True)


# ---- the actuator --------------------------------------------------------------------------------------------


class KubernetesActuator:
    """Applies actions through the Kubernetes API. Failures come back as RETRY / FAILED results, never raised."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: Any,
        *,
        default_namespace: str = "default",
        power_cap_annotation: str = POWER_CAP_ANNOTATION,
        hot_taint_key: str = HOT_TAINT_KEY,
        reservation_annotation: str = RESERVATION_ANNOTATION,
        hot_taint_ttl_s: float = HOT_TAINT_TTL_S,
        power_cap_ttl_s: float = POWER_CAP_TTL_S,
        power_cap_nodes: Callable[[str], bool] | None = None,
        reservation_ttl_s: float = 300.0,
        kueue_queues: tuple[str, str] | None = None,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        request_timeout_s: float = 10.0,
        action_deadline_s: float = ACTION_DEADLINE_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        deadline_clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
        floor_owner: str | None = None,
    ) -> None:
        """`floor_owner`: the name this controller records on the HPA floors it writes and gives back only those of
        (gputide run: its Lease, "namespace/name"; `k8s_hpa.floor_owned`); None: none recorded, every floor given
        back (one controller alone)."""
        if not action_deadline_s > 0:
            raise ValueError(f"action_deadline_s must be > 0, got {action_deadline_s}")
        self.api = _Api(api_client, max_retries, backoff_s, sleep, request_timeout_s, deadline_clock)
        self.action_deadline_s = action_deadline_s
        self.default_namespace = default_namespace
        self.power_cap_annotation = power_cap_annotation
        self.hot_taint_key = hot_taint_key
        self.reservation_annotation = reservation_annotation
        self.hot_taint_ttl_s = hot_taint_ttl_s
        self.power_cap_ttl_s = power_cap_ttl_s
        self.reservation_ttl_s = reservation_ttl_s
        self.kueue_queues = kueue_queues   # (inference ClusterQueue, training ClusterQueue) of one cohort
        self.floor_owner = floor_owner
        # `registry`: where its `gputide_kueue_quota_untold_total` is served (`k8s_quota.untold_counter`)
        self.kueue = KueueQuota(self.api, excess_min_age_s=action_deadline_s, registry=registry, queues=kueue_queues)
        self.upkeep = Upkeep(   # what this actuator leaves on nodes and queues, released or renewed (`k8s_upkeep`)
            self.api, self.kueue, clock, action_deadline_s=action_deadline_s, hot_taint_key=hot_taint_key,
            reservation_annotation=reservation_annotation, power_cap_annotation=power_cap_annotation,
            power_cap_ttl_s=power_cap_ttl_s, power_cap_nodes=power_cap_nodes, kueue_queues=kueue_queues,
            registry=registry)
        self.training = TrainingJobs(self.api, self.kueue, clock)
        self.clock = clock
        self.migrations = Migrations(
            self.api, clock, default_namespace=default_namespace, hot_taint_key=hot_taint_key,
            reservation_annotation=reservation_annotation, hot_taint_ttl_s=hot_taint_ttl_s,
            reservation_ttl_s=reservation_ttl_s)
        # the refusals and floor caps logged at WARNING once (`InferenceScaling._refuse`, `_floor_clamp`): one set
        self._refusals: set[str] = set()
        self.inference = InferenceScaling(self.api, floor_owner, self._refusals, action_deadline_s=action_deadline_s)
        # each handler returns its detail, or `Applied` where the result carries more (as data, never parsed)
        self._handlers: dict[type, Callable[[Any, ClusterSnapshot], str | Applied]] = {
            Migrate: self.migrations.migrate, SetPowerLimit: self._power_limit, ScaleInference: self._scale_inference,
            ScaleTraining: self._scale_training, TaintNode: self._taint,
        }  # fmt: skip

    @property
    def power_cap_nodes(self) -> Callable[[str], bool] | None:
        """The nodes whose caps this controller renews (a shard's own); None: every node's (`Upkeep`)."""
        return self.upkeep.power_cap_nodes

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        handler = self._handlers.get(type(action))
        if handler is None:
            return ActionResult(action, Outcome.FAILED, f"kubernetes actuator cannot apply {action.kind}")
        # every call below within the deadline, undo and Event included; its unanswered writes listed (`unknown`)
        with self.api.deadline(self.action_deadline_s), self.api.writes() as unknown:
            try:
                done = handler(action, snapshot)
            except TemporaryActuationError as err:   # DeadlineExceeded too: out of time is tried again later
                return refused_result(_failed(action, Outcome.RETRY, err, unknown), err)
            except PermanentActuationError as err:   # what it refused (a target, a workload) told the planner
                return refused_result(_failed(action, Outcome.FAILED, err, unknown), err)
            applied = done if isinstance(done, Applied) else Applied(done)
            if not (isinstance(action, TaintNode) and action.renew):   # a renewal changes nothing to tell
                with self.api.reserve():   # the action is done: its Event (best effort) may use what is left
                    tell_action(self.api, action, applied.detail, self.clock(), self.default_namespace,
                                lambda owner: self._owner_namespace(owner, snapshot))
        return ActionResult(action, Outcome.APPLIED, applied.detail, unchanged=applied.unchanged,
                            capped_to=applied.capped_to)

    # ---- power caps, taints ----

    def _power_limit(self, action: SetPowerLimit, snapshot: ClusterSnapshot) -> str:
        watts = None if action.give_back else round(float(action.watts), 1)
        limits = node_power_limits(snapshot, action.node)
        seen: dict[str, Any] = {}

        def change(n: Json) -> Json | None:
            current = _json_annotation(n, self.power_cap_annotation)
            seen.update(before=current, after=power_caps_update(current, action.uuid, watts, limits))
            return power_caps_patch(n, self.power_cap_annotation, current, seen["after"],
                                    self.clock() + self.power_cap_ttl_s)

        self.api.update_node(action.node, change)
        return power_caps_note(f"{action.node} {self.power_cap_annotation}", action.uuid, watts, **seen)

    def _taint(self, action: TaintNode, snapshot: ClusterSnapshot) -> str:
        until = None if action.remove else self.clock() + self.hot_taint_ttl_s
        had: list[bool] = []

        def change(n: Json) -> Json | None:
            had[:] = [any(t.get("key") == self.hot_taint_key for t in (n.get("spec") or {}).get("taints") or ())]
            return taints_change(n, self.hot_taint_key, not action.remove, until)

        self.api.update_node(action.node, change)
        done = "removed" if action.remove else "renewed" if action.renew and had[0] else "added"
        return f"{done} taint {self.hot_taint_key} on {action.node}" + (f" until {rfc3339(until)}" if until else "")

    def power_caps(self, node: str) -> dict[str, float]:
        return read_power_caps(self.api(f"node {node}", self.api.core.read_node, node), self.power_cap_annotation)

    # ---- upkeep: the loop's hooks, `k8s_upkeep`'s (what the actions left, released or renewed) ----

    def recover(self, nodes: Collection[str] | None = None) -> list[str]:
        """The loop's first cycle as leader that plans (`Upkeep.recover`; on `nodes` only when given, a shard's own)."""
        return self.upkeep.recover(nodes)

    def housekeeping(self, nodes: Collection[str] | None = None) -> list[str]:
        """Once per planning cycle (`Upkeep.housekeeping`; on `nodes` only when given, a shard's own)."""
        return self.upkeep.housekeeping(nodes)

    def keep_power_caps(self) -> list[str]:
        """While the loop holds still for fail-static (`Upkeep.keep_power_caps`): caps' expiry kept, nothing else."""
        return self.upkeep.keep_power_caps()

    def release_expired(self, nodes: Collection[str] | None = None) -> list[str]:
        """Expired hot taints and reservations removed, caps' expiry renewed when due (`Upkeep.release_expired`)."""
        return self.upkeep.release_expired(nodes)

    # ---- inference: HPA floor or Deployment scale, and their give-back (k8s_inference) ----

    def _scale_inference(self, action: ScaleInference, snapshot: ClusterSnapshot) -> str | Applied:
        ns, name = split_name(action.service, self._owner_namespace(action.service, snapshot))
        return self.inference.scale(ns, name, int(action.replicas), int(action.previous_replicas))

    def restore_floors(self, namespaces: Iterable[str] | None = None, managed: Collection[str] = ()) -> list[str]:
        """The operator's own minReplicas and Deployment counts back where their services left gputide's management
        (`InferenceScaling.restore_floors`: the policy reloader's on_leave, capacity shifting off). Not called on a
        plain shutdown."""
        return self.inference.restore_floors(namespaces, managed)

    # ---- training: Job stop / resume / size, Kueue quota (k8s_training) ----

    def _owner_namespace(self, owner: str, snapshot: ClusterSnapshot) -> str:
        """The namespace of a job or service named by its bare name: that of its pods (or, for a suspended job,
        the one the snapshot lists it in; for a service, that of its serving series, which tell it while none of its
        pods runs), else the actuator's default. A bare name whose pods and suspended jobs sit in two namespaces
        names two objects: acting on either could scale the wrong one, so it is refused (`KubernetesWorkloads`
        qualifies such owners as `namespace/name`)."""
        spaces = {w.namespace for w in snapshot.workloads_by_owner.get(owner, ())}
        spaces |= {j.namespace for j in snapshot.suspended_jobs or () if j.name == owner}
        status = (getattr(snapshot, "services", None) or {}).get(owner)
        if status is not None and status.namespace:
            spaces.add(status.namespace)
        if len(spaces) > 1:
            raise PermanentActuationError(f"{owner!r} names objects in namespaces {', '.join(sorted(spaces))}: "
                                          "refusing to guess; owners must be namespace/name")
        return spaces.pop() if spaces else self.default_namespace

    def _scale_training(self, action: ScaleTraining, snapshot: ClusterSnapshot) -> Applied:
        ns, name = split_name(action.job, self._owner_namespace(action.job, snapshot))
        pods = snapshot.workloads_by_owner.get(action.job)
        return self.training.scale(ns, name, int(action.workers), int(action.previous_workers),
                                   pods[0].priority if pods else None, self.kueue_queues, action)

    def shift_kueue_quota(self, from_queue: str, to_queue: str, gpus: int, flavor: str | None = None) -> str:
        """Move `gpus` of GPU nominalQuota between two ClusterQueues of a cohort (`KueueQuota.shift`)."""
        return self.kueue.shift(from_queue, to_queue, gpus, flavor)
