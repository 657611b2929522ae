"""The Kubernetes actuator: frozen actions turned into API calls, every failure into an `ActionResult`.

Nothing here decides *what* to do. This module holds the actuator itself (dispatch, deadline, results, Events,
the release of expired taints and reservations) and the power-cap, taint and inference paths; the Migrate path is
`k8s_migrate`'s and the training Job path `k8s_training`'s. How each action reaches the cluster:

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
                    leaves none in force for good: `release_expired` renews the expiry of every node that holds a cap
                    once less than half the TTL is left (`k8s_nodes.power_caps_renewal`), and the agent gives the
                    caps back once it has passed. While the loop holds still for fail-static, `keep_power_caps`
                    renews only the expiries still to come (`k8s_nodes.power_caps_kept`) and nothing else, counted
                    in `gputide_power_caps_renewed_holding_still_total` (a new leader's `recover` waits for a cycle
                    that plans). A node labelled `gputide.io/emergency-stop=true` has its caps renewed by neither
                    (`k8s_nodes.node_stopped`): they lapse, logged once per node and stop.
    ScaleInference  raise/lower the HPA's spec.minReplicas (a predictive floor under the HPA) when an autoscaling/v2
                    HPA scales the service (a Deployment, StatefulSet or Rollout of its name: `k8s_hpa.service_hpa`),
                    else the Deployment's scale subresource. The floor never goes below
                    the operator's own minReplicas, kept in the HPA's annotation `gputide.io/own-min-replicas` while
                    the floor differs from it (a restarted controller reads it back), nor above maxReplicas; the
                    floor written is kept beside it (`gputide.io/floor-min-replicas`), so a minReplicas someone else
                    wrote since is the operator's own from then on (`k8s_hpa`). An HPA another controller keeps
                    (KEDA's, controlled by its ScaledObject) is refused (FAILED): its owner writes the floor back.
                    So is a Deployment no HPA scales that another controller keeps (a controlling ownerReference:
                    a KServe InferenceService, an operator's custom resource), read first (get): its owner writes
                    `spec.replicas` back. Each refusal is logged once (WARNING) while it lasts, then at DEBUG.
                    `restore_floors` gives the operator's own minReplicas back in namespaces whose services left
                    gputide's management (a policy reload protecting them; never on shutdown).
    ScaleTraining   batch/v1 Job (`k8s_training`): stopped for 0 workers, labelled `gputide.io/suspended=true` (its
                    pods' priority kept in `gputide.io/priority`) so `KubernetesWorkloads.suspended_jobs` finds it
                    again: a plain Job by `spec.suspend`, a Job queued through Kueue by its Workload's
                    `spec.active: false` (Kueue owns that Job's suspend and would undo one). Else resized: parallelism
                    = workers, an Elastic Indexed Job's completions with it, never beyond `completions - succeeded`
                    where completions cannot change (`k8s_jobs`); the label removed, a Workload gputide deactivated
                    made active again. With `kueue_queues` set and the Job queued, GPU quota moves between the two
                    ClusterQueues of the cohort, in the ResourceFlavor Kueue admitted the Job under (`k8s_kueue`).
    Jobs and Deployments are named by their bare name (a pod's owner); the namespace is that of their pods in the
    snapshot (or of the suspended Job), else `default_namespace`.
    TaintNode       add or remove the hot taint. Its expiry (`gputide.io/hot-until`, `hot_taint_ttl_s` after the
                    write) is the safety net for a dead controller: `release_expired` removes the taint then (a
                    shard's controller on its own nodes only; the expiry judged again on the node the write reads, so
                    a renewal that lands after the list is never undone). A
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
not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import ActionResult, Outcome, refused_result
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_events import post_event, tell_action  # noqa: F401  (post_event: re-exported, k8s_tell's)
from balancer.actuate.k8s_hpa import (  # noqa: F401  (HPA_OWN_MIN_ANNOTATION: re-exported)
    FIELD_MANAGER,
    HPA_OWN_MIN_ANNOTATION,
    controller_name,
    floor_restore_patch,
    hpa_controller,
    hpa_floor,
    hpa_floor_patch,
    service_hpa,
)
from balancer.actuate.k8s_migrate import Migrations
from balancer.actuate.k8s_nodes import (
    POWER_CAP_TTL_S,
    annotation_map_change,
    caps_until,
    expired_reservations,
    expired_taint_removal,
    node_power_limits,
    node_stopped,
    power_caps_kept,
    power_caps_note,
    power_caps_patch,
    power_caps_renewal,
    power_caps_update,
    taints_change,
)
from balancer.actuate.k8s_quota import KueueQuota, corrections_counter
from balancer.actuate.k8s_training import TrainingJobs
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    MERGE_PATCH,
    POWER_CAP_ANNOTATION,
    RESERVATION_ANNOTATION,
    Json,
    NotFoundError,
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
    ) -> None:
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
        # the nodes whose caps this controller renews (a shard's own: another shard's controller renews, or not, its
        # own); None: every node's
        self.power_cap_nodes = power_cap_nodes
        self.reservation_ttl_s = reservation_ttl_s
        self.kueue_queues = kueue_queues   # (inference ClusterQueue, training ClusterQueue) of one cohort
        self.kueue = KueueQuota(self.api, excess_min_age_s=action_deadline_s)
        self.quota_corrections = corrections_counter(registry, kueue_queues)   # on the controller's metrics registry
        self.caps_kept = PromCounter(   # `keep_power_caps`' renewals, on the controller's registry too
            "gputide_power_caps_renewed_holding_still", "Renewals of a node's power caps' expiry made while the "
            "controller held still for fail-static (nothing else is written then).",
            registry=registry if registry is not None else CollectorRegistry())
        self.training = TrainingJobs(self.api, self.kueue)
        self.clock = clock
        self.migrations = Migrations(
            self.api, clock, default_namespace=default_namespace, hot_taint_key=hot_taint_key,
            reservation_annotation=reservation_annotation, hot_taint_ttl_s=hot_taint_ttl_s,
            reservation_ttl_s=reservation_ttl_s)
        self._refusals: set[str] = set()   # the refusals logged at WARNING once (`_refuse`)
        self._caps_lapsing: set[str] = set()   # nodes under their stop label whose caps' lapse was logged
        self._handlers: dict[type, Callable[[Any, ClusterSnapshot], str]] = {
            Migrate: self.migrations.migrate, SetPowerLimit: self._power_limit, ScaleInference: self._scale_inference,
            ScaleTraining: self._scale_training, TaintNode: self._taint,
        }  # fmt: skip

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        handler = self._handlers.get(type(action))
        if handler is None:
            return ActionResult(action, Outcome.FAILED, f"kubernetes actuator cannot apply {action.kind}")
        # every call below within the deadline, undo and Event included; its unanswered writes listed (`unknown`)
        with self.api.deadline(self.action_deadline_s), self.api.writes() as unknown:
            try:
                detail = handler(action, snapshot)
            except TemporaryActuationError as err:   # DeadlineExceeded too: out of time is tried again later
                return refused_result(_failed(action, Outcome.RETRY, err, unknown), err)
            except PermanentActuationError as err:   # what it refused (a target, a workload) told the planner
                return refused_result(_failed(action, Outcome.FAILED, err, unknown), err)
            if not (isinstance(action, TaintNode) and action.renew):   # a renewal changes nothing to tell
                with self.api.reserve():   # the action is done: its Event (best effort) may use what is left
                    tell_action(self.api, action, detail, self.clock(), self.default_namespace,
                                lambda owner: self._owner_namespace(owner, snapshot))
        return ActionResult(action, Outcome.APPLIED, detail)

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

    def recover(self, nodes: Collection[str] | None = None) -> list[str]:
        """The loop's first cycle as leader that plans: what a previous leader left behind is released once expired.

        Migrations are make-room-first and level-triggered here (the reservation and the taint carry their own
        expiry; an eviction either happened or did not), so recovering is `release_expired`, on `nodes` only when
        given (a shard's own: `_run_parts.ShardBound`); an API failure becomes a note, the expiries stay and the next
        cycle's housekeeping tries again. Never while the loop holds still (it waits for the first cycle that plans):
        it renews caps whose expiry has passed, which an agent may have given back, and releases taints and
        reservations; under fail-static only `keep_power_caps` runs, under an emergency stop nothing.
        """
        return self._release_expired_noting("recover", nodes)

    def housekeeping(self, nodes: Collection[str] | None = None) -> list[str]:
        """Once per planning cycle (the loop's duck-typed hook): `release_expired` (on `nodes` only when given, a
        shard's own), Kueue quota moves settled and quota lent to training beyond what its Jobs hold given back
        (`KueueQuota.reconcile`), API failures as a note. The give-back is a capacity move: here only, which a cycle
        that holds still never reaches, not in `recover`."""
        return self._release_expired_noting("housekeeping", nodes) + self._reconcile_quota_noting("housekeeping")

    def keep_power_caps(self) -> list[str]:
        """The loop's hook while it holds still for fail-static (telemetry it does not trust): the caps this controller
        set stay as they are, their expiry renewed when due lest the agents give them back on a reading nobody trusts
        (`power_caps_kept`: only an expiry still to come; no cap written, changed or re-applied, no taint,
        reservation or quota touched). Each renewal counted; an API failure becomes a note, the next cycle tries again.
        Never under an emergency stop (the loop does not call it then): the operator said stop, so nothing is written
        and the caps lapse as a stopped controller's do; nor on a node under its own stop label (`_renew_power_caps`)."""
        now, renewed, failed = self.clock(), [], []
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                for node in self.api("list nodes", self.api.core.list_node).get("items", []):
                    renewed += self._renew_power_caps(node, now, power_caps_kept)   # one note per node renewed
        except ActuationError as err:
            failed.append(f"could not renew the power caps' expiry: {err}")
        self.caps_kept.inc(len(renewed))
        return renewed + failed

    def _release_expired_noting(self, what: str, nodes: Collection[str] | None) -> list[str]:
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):   # what is left waits for next cycle
                notes = self.release_expired(nodes)
        except ActuationError as err:
            notes = [f"{what}: could not release expired taints and reservations: {err}"]
        return notes + self._settle_quota_noting(what)

    def _settle_quota_noting(self, what: str) -> list[str]:
        """A Kueue quota move a previous leader (or this one) left half done - the lender lowered, the borrower not
        yet raised - finished or rolled back (`KueueQuota.settle_all`), so a restart between the two writes loses
        no quota from the cohort; failures are a note and the record stays for the next cycle."""
        notes = []
        for queue in self.kueue_queues or ():
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    notes += self.kueue.settle_all((queue,))
            except NotFoundError:
                continue   # no queue, no move left open on it (a quota shift names the missing queue itself)
            except ActuationError as err:
                notes.append(f"{what}: could not settle kueue quota moves of {queue}: {err}")
        return notes

    def _reconcile_quota_noting(self, what: str) -> list[str]:
        """Quota lent to training beyond what its Jobs hold given back to inference (`KueueQuota.reconcile`), each
        correction counted; a failure is a note, and the next cycle looks again."""
        if not self.kueue_queues:
            return []
        try:
            with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                cuts = self.kueue.reconcile(self.kueue_queues)
        except NotFoundError:
            return []   # a queue missing: nothing lent to it (a quota shift names the missing queue itself)
        except ActuationError as err:
            return [f"{what}: could not check the kueue quota lent to {self.kueue_queues[1]}: {err}"]
        self.quota_corrections.labels(queue=self.kueue_queues[1]).inc(len(cuts))
        return [cut.note(*reversed(self.kueue_queues)) for cut in cuts]

    def release_expired(self, nodes: Collection[str] | None = None) -> list[str]:
        """Remove hot taints and reservations whose expiry has passed, renew the power caps' expiry when due (not on a
        node under its stop label: `_renew_power_caps`); call once per reconcile. With `nodes`, on those nodes only (a
        shard's own: another shard's expiries are that shard's to release, and its renewals its own); None: every
        node. Returns notes.

        The expiry is judged on the node as listed, then again on the node the write reads (`expired_taint_removal`,
        `expired_reservations`), and the write carries that read's resourceVersion (a 409 reads again): a taint or a
        reservation renewed after the list, or between the read and the write, is kept, never removed as expired."""
        now, notes = self.clock(), []
        for node in self.api("list nodes", self.api.core.list_node).get("items", []):
            name = node["metadata"]["name"]
            if nodes is not None and name not in nodes:
                continue
            notes += self._release_taint(node, now) + self._release_reservations(node, now)
            notes += self._renew_power_caps(node, now)
        return notes

    def _release_taint(self, node: Json, now: float) -> list[str]:
        """`node`'s hot taint removed if its expiry has passed, on the node as listed and as written."""
        name, key = node["metadata"]["name"], self.hot_taint_key
        if expired_taint_removal(node, key, now) is None \
                or self.api.update_node(name, lambda n: expired_taint_removal(n, key, now)) is None:
            return []   # not expired, or renewed since the list
        return [f"{name}: hot taint expired"]

    def _release_reservations(self, node: Json, now: float) -> list[str]:
        """`node`'s reservations whose expiry has passed removed, judged on the node as listed and as written. An entry
        that is not {"expires": ...} is nobody's: gone as expired, never an error that would stop the nodes after this
        one from being cleaned."""
        name, key, gone = node["metadata"]["name"], self.reservation_annotation, {}

        def change(n: Json) -> Json | None:
            gone.clear()
            gone.update(expired_reservations(n, key, now))   # renewed since the list: no longer among them
            return annotation_map_change(n, key, gone) if gone else None

        if not expired_reservations(node, key, now) or self.api.update_node(name, change) is None:
            return []
        return [f"{name}: reservations expired: {sorted(gone)}"]

    def _renew_power_caps(self, node: Json, now: float,
                          due: Callable[[Json, str, float, float], Json | None] = power_caps_renewal) -> list[str]:
        """The expiry of `node`'s power caps moved `power_cap_ttl_s` ahead when `due` says so (`power_caps_renewal`;
        `power_caps_kept` while the loop holds still). Never on a node that carries the emergency-stop label, on the
        node as listed or as the write reads it (`node_stopped`): the label stops every action touching the node, so
        its caps lapse as under the global stop (`_stopped_caps_lapse` logs it once)."""
        def renewal(n: Json) -> Json | None:
            return None if node_stopped(n) else due(n, self.power_cap_annotation, now, self.power_cap_ttl_s)

        name, was = node["metadata"]["name"], caps_until(node, self.power_cap_annotation)
        if (self.power_cap_nodes is not None and not self.power_cap_nodes(name)) or self._stopped_caps_lapse(node) \
                or (patch := renewal(node)) is None or self.api.update_node(name, renewal) is None:
            return []
        if next(iter(patch["metadata"]["annotations"].values())) is None:
            return [f"{name}: power caps expiry removed (no cap left)"]
        until = rfc3339(now + self.power_cap_ttl_s)
        if was is not None and was <= now:
            return [f"{name}: power caps had expired at {rfc3339(was)} (not renewed in time): renewed until {until}; "
                    "the node's agent applies again any it gave back"]
        return [f"{name}: power caps renewed until {until}"]

    def _stopped_caps_lapse(self, node: Json) -> bool:
        """Whether `node` carries the emergency-stop label (`node_stopped`), its caps then left to lapse; said once per
        node and stop (WARNING) while it holds caps, so the GputidePowerCapsExpired that follows is no surprise."""
        name = node["metadata"]["name"]
        if not node_stopped(node):
            self._caps_lapsing.discard(name)
            return False
        if name not in self._caps_lapsing and read_power_caps(node, self.power_cap_annotation):
            self._caps_lapsing.add(name)
            until = caps_until(node, self.power_cap_annotation)
            log.warning("%s carries the emergency-stop label: the power caps gputide set on it are not renewed while it "
                        "does; %s", name, "they carry no expiry (an older controller's), so they stay" if until is None
                        else f"they lapse once their expiry {rfc3339(until)} passes and its agent gives them back")
        return True

    # ---- inference: HPA floor or Deployment scale ----

    def _scale_inference(self, action: ScaleInference, snapshot: ClusterSnapshot) -> str:
        ns, name = split_name(action.service, self._owner_namespace(action.service, snapshot))
        hpas = self.api(f"list HPAs in {ns}", self.api.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
        hpa = service_hpa(hpas, name)   # whatever it scales: a Deployment, a StatefulSet, a Rollout
        if hpa is None:
            what = f"deployment {ns}/{name}"
            owner = controller_name(self.api(what, self.api.apps.read_namespaced_deployment, name, ns))
            if owner is not None:   # its controller writes spec.replicas back (KServe, an operator): flapping
                self._refuse(f"deployment {ns}/{name} is kept by {owner}, which writes its replicas back: not scaled "
                             "(scale it through the owner, or leave the service out of the profiles)")
            self.api(f"{what} scale", self.api.apps.patch_namespaced_deployment_scale, name, ns,
                     {"spec": {"replicas": int(action.replicas)}}, _content_type=MERGE_PATCH,
                     field_manager=FIELD_MANAGER)
            return f"{ns}/{name} replicas = {action.replicas}"
        hname, floor, owner = hpa["metadata"]["name"], {}, hpa_controller(hpa)
        if owner is not None:   # its controller writes its spec back (KEDA): a floor there would not hold
            self._refuse(f"hpa {ns}/{hname} is generated and kept by {owner}, which writes its minReplicas back: not "
                         "floored (set the floor on the owner, or leave the service out of the profiles)")

        def change(h: Json) -> Json | None:
            want, own = hpa_floor(h, int(action.replicas))
            floor["value"] = want
            return hpa_floor_patch(h, want, own)

        what = f"hpa {ns}/{hname}"
        self.api.update(
            what, lambda: self.api(what, self.api.autoscaling.read_namespaced_horizontal_pod_autoscaler, hname, ns),
            lambda body: self.api(what, self.api.autoscaling.patch_namespaced_horizontal_pod_autoscaler, hname, ns,
                                  body, _content_type=MERGE_PATCH, field_manager=FIELD_MANAGER), change)
        clamped = "" if floor["value"] == action.replicas else f" (asked {action.replicas}, clamped to HPA range)"
        return f"hpa {ns}/{hname} minReplicas = {floor['value']}{clamped}"

    def _refuse(self, why: str) -> None:
        """Refuse the action (FAILED, code "refused"), logging `why` at WARNING the first time only: the loop reports
        every FAILED result already (its log line, the audit, gputide_actuation_errors_total{code="refused"})."""
        if why not in self._refusals:
            self._refusals.add(why)
            log.warning("%s", why)
        else:
            log.debug("%s", why)
        raise PermanentActuationError(why)

    def restore_floors(self, namespaces: Iterable[str]) -> list[str]:
        """Give the operator's own minReplicas back to every HPA of `namespaces` that carries gputide's floor
        record (`k8s_hpa.floor_restore_patch`): their services left gputide's management (a policy reload protected
        the namespaces; balancer/app/policy_reload.py). Only while minReplicas is still the floor gputide wrote; one
        someone else wrote since is left as it is and logged. Returns a note per HPA changed or left; a namespace
        whose HPAs cannot be read or written is a note too, the rest go on.

        Not called on a plain shutdown: a restarted controller (or the next leader) reads the record back and keeps
        the floors the load still needs; dropping them at each restart would shrink services under load."""
        notes: list[str] = []
        for ns in sorted(set(namespaces)):
            try:
                with self.api.deadline(self.action_deadline_s, reserve_s=0.0):
                    notes += self._restore_namespace(ns)
            except ActuationError as err:
                notes.append(f"hpa floors in {ns} not given back: {err}")
        for note in notes:
            log.info("%s", note)
        return notes

    def _restore_namespace(self, ns: str) -> list[str]:
        hpas = self.api(f"list HPAs in {ns}", self.api.autoscaling.list_namespaced_horizontal_pod_autoscaler, ns)
        notes = []
        for item in hpas.get("items", []):
            hname, said = item["metadata"]["name"], {}
            if floor_restore_patch(item)[0] is None:
                continue

            def change(h: Json, said: dict = said) -> Json | None:
                body, said["what"] = floor_restore_patch(h)
                return body

            what = f"hpa {ns}/{hname}"
            self.api.update(
                what, lambda w=what, n=hname: self.api(w, self.api.autoscaling.read_namespaced_horizontal_pod_autoscaler,
                                                       n, ns),
                lambda body, w=what, n=hname: self.api(w, self.api.autoscaling.patch_namespaced_horizontal_pod_autoscaler,
                                                       n, ns, body, _content_type=MERGE_PATCH,
                                                       field_manager=FIELD_MANAGER), change)
            if "what" in said:
                notes.append(f"{what}: service left gputide's management: {said['what']}")
        return notes

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

    def _scale_training(self, action: ScaleTraining, snapshot: ClusterSnapshot) -> str:
        ns, name = split_name(action.job, self._owner_namespace(action.job, snapshot))
        pods = snapshot.workloads_by_owner.get(action.job)
        return self.training.scale(ns, name, int(action.workers), int(action.previous_workers),
                                   pods[0].priority if pods else None, self.kueue_queues, action)

    def shift_kueue_quota(self, from_queue: str, to_queue: str, gpus: int, flavor: str | None = None) -> str:
        """Move `gpus` of GPU nominalQuota between two ClusterQueues of a cohort (`KueueQuota.shift`)."""
        return self.kueue.shift(from_queue, to_queue, gpus, flavor)
